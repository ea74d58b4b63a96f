"""A user's own refinement steps, as a corpus team would write them: importable ``module:factory`` targets."""

from __future__ import annotations

from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter


class WordCountFilter(BaseFilter):
    """Drops documents under ``min_words`` words (a classifier or any filter has this shape)."""

    name = "word count"

    def __init__(self, min_words: int = 5, exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.min_words = min_words

    def filter(self, doc):
        return len(doc.text.split()) >= self.min_words or (False, "too_few_words")


class TagStep(PipelineStep):
    """Tags every document (metadata only): a step that drops nothing."""

    name = "tag"

    def run(self, data, rank: int = 0, world_size: int = 1):
        for doc in data:
            doc.metadata["tagged"] = True
            self.stat_update("tagged")
            yield doc


def tag_step() -> TagStep:
    """A factory function rather than a class."""
    return TagStep()
