"""Where every stage of a run keeps its files: one layout for the CLI, the operators and the DAGs, so a run
started one way is continued another (finished shards, datatrove tasks and checkpoints are skipped).

A *run root* holds one WARC selection's simplified pages and one folder per extractor spec::

    {run root}/                                  e.g. {storage root}/runs/{crawl}/{selection}/ in Airflow
        _selection.json                          the selected WARC files and their shard plan (DAGs)
        simplified/  _run_summary.json           the simplify stage
        extractors/{name}/                       one extractor spec's corpus (name: the spec's)
            _extractor.json                      the spec its shards were made with
            extracted/                           the extract stage
            refine/ corpus/                      refinement (datatrove): its summary, the corpus
            tokens/                              Megatron .bin/.idx and their summary
            pretrain/{run}/                      a model trained on the tokens (checkpoints, hf-checkpoints/)
            eval/{run}/                          its scores (checkpoints/{checkpoint}.json, scores.json)
            _run_summary.json _build_summary.json
        ablations/{name}/extraction/ report/     an ablation's extraction-quality table and report

Paths are strings (local folders or fsspec URLs) joined with ``/``. Only the standard library is imported.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from dripper.io.storage import join_path

__all__ = ["ExtractorLayout", "RunLayout"]


@dataclass(frozen=True)
class ExtractorLayout:
    """The folders of one extractor spec under a run root."""

    root: str

    @property
    def name(self) -> str:
        return posixpath.basename(self.root.rstrip("/"))

    @property
    def spec_file(self) -> str:
        return join_path(self.root, "_extractor.json")

    @property
    def extracted(self) -> str:
        return join_path(self.root, "extracted")

    @property
    def run_summary(self) -> str:
        """The extract stage's run summary (pages per extractor, what a cascade routed)."""
        return join_path(self.root, "_run_summary.json")

    @property
    def corpus(self) -> str:
        return join_path(self.root, "corpus")

    @property
    def refine_summary(self) -> str:
        return join_path(self.root, "refine", "_summary.json")

    @property
    def tokens(self) -> str:
        return join_path(self.root, "tokens")

    @property
    def tokens_summary(self) -> str:
        return join_path(self.root, "tokens", "_summary.json")

    def pretrain(self, run: str) -> str:
        """A training run's folder (``train_log.jsonl``, ``checkpoints/``, ``hf-checkpoints/``)."""
        return join_path(self.root, "pretrain", run)

    def hf_checkpoints(self, run: str) -> str:
        return join_path(self.pretrain(run), "hf-checkpoints")

    def evaluation(self, run: str) -> str:
        """A training run's scores: ``checkpoints/{checkpoint}.json`` and ``scores.json`` (the last)."""
        return join_path(self.root, "eval", run)


@dataclass(frozen=True)
class RunLayout:
    """The folders of a run root (one WARC selection)."""

    root: str

    @property
    def selection_file(self) -> str:
        return join_path(self.root, "_selection.json")

    @property
    def simplified(self) -> str:
        return join_path(self.root, "simplified")

    def extractor(self, name: str) -> ExtractorLayout:
        return ExtractorLayout(join_path(self.root, "extractors", name))

    def ablation(self, name: str) -> str:
        return join_path(self.root, "ablations", name)
