"""Language handling without downloads: language identification and the quality steps' word tokenizer.

- :class:`LanguageIdFilter`: py3langid, whose model ships inside its wheel. datatrove's ``LanguageFilter``
  fetches a fastText model at run time (``lid.176.bin`` or GlotLID from the Hub); this filter has the same
  contract (``language`` and ``language_score`` in the metadata, drop reasons in the stats and the exclusion
  files) on a model installed with the package.
- :class:`QualityWordTokenizer`: the words the Gopher, C4, FineWeb and MinHash steps count, from datatrove's
  offline tokenizer for the language (spaCy's blank English pipeline; datatrove's NLTK tokenizers would
  fetch data), read through the Markdown syntax.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.utils.word_tokenizers import WordTokenizer, load_word_tokenizer

__all__ = [
    "LanguageIdFilter",
    "QualityWordTokenizer",
    "check_languages",
    "known_languages",
    "load_identifier",
    "markdown_words_view",
]


@lru_cache(maxsize=1)
def load_identifier() -> Any:
    """py3langid's identifier with normalised probabilities, loaded once per process (about 1 s)."""
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the language step needs py3langid (its model ships in the wheel): pip install py3langid"
        ) from error
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def known_languages() -> list[str]:
    """The ISO 639-1 codes the model knows."""
    return sorted(load_identifier().labels)


def check_languages(languages: tuple[str, ...]) -> None:
    """Raise ``ValueError`` for codes the model does not know (``eng`` instead of ``en``, …)."""
    labels = set(known_languages())
    unknown = [code for code in languages if code not in labels]
    if unknown:
        raise ValueError(
            f"language.languages: py3langid knows no {unknown}; use ISO 639-1 codes such as 'en', 'de', "
            f"'zh' (known: {', '.join(sorted(labels))})"
        )


class LanguageIdFilter(BaseFilter):
    """Label each document with its language; keep those in ``languages`` above ``threshold``.

    Args:
        languages: Codes to keep; empty keeps any language whose top score is above ``threshold``.
        threshold: Minimum normalised probability.
        label_only: Label, drop nothing.
        max_chars: Characters read per document.
        exclusion_writer: Where dropped documents go (with ``filter_reason``).

    Drop reasons: ``wrong_language`` (the top language is not kept) and ``low_language_score`` (it is, or
    any language is allowed, but its score is below ``threshold``).
    """

    name = "🌍 Language ID (py3langid)"
    _requires_dependencies = ["py3langid"]

    def __init__(
        self,
        languages: tuple[str, ...] = ("en",),
        threshold: float = 0.65,
        label_only: bool = False,
        max_chars: int = 20_000,
        exclusion_writer: Any = None,
    ) -> None:
        super().__init__(exclusion_writer)
        self.languages = tuple(languages)
        self.threshold = threshold
        self.label_only = label_only
        self.max_chars = max_chars

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        ranked = load_identifier().rank(doc.text[: self.max_chars])
        best, best_score = ranked[0]
        doc.metadata["language"] = best
        doc.metadata["language_score"] = round(float(best_score), 4)
        self.stat_update(f"lang_{best}")
        if self.label_only:
            return True
        if not self.languages:
            return True if best_score > self.threshold else (False, "low_language_score")
        scores = dict(ranked)
        if any(scores.get(code, 0.0) > self.threshold for code in self.languages):
            return True
        return False, "low_language_score" if best in self.languages else "wrong_language"


# -- words for the quality steps ---------------------------------------------------------------------------

_MARKDOWN_SYNTAX = (
    (re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)"), r"\1"),  # links and images: their text
    (re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+", re.M), ""),  # heading marks
    (re.compile(r"^[ \t]*(?:[-*+]|\d{1,3}[.)])[ \t]+", re.M), ""),  # list markers
    (re.compile(r"^[ \t]*>[ \t]?", re.M), ""),  # block quotes
    (re.compile(r"^[ \t]*\|?[ \t]*:?-{3,}[-:| \t]*$", re.M), ""),  # table separator rows
    (re.compile(r"^[ \t]*(?:```|~~~).*$", re.M), ""),  # code fences
    (re.compile(r"(?<!\w)(?:\*{1,3}|_{1,3}|~~)|(?:\*{1,3}|_{1,3}|~~)(?!\w)"), ""),  # emphasis
    (re.compile(r"[`|]"), " "),  # inline code, table cells
)


def markdown_words_view(text: str) -> str:
    """The text as a reader sees its words: Markdown syntax (link targets, heading and list marks, emphasis,
    table pipes, code fences) removed, the words kept."""
    for pattern, replacement in _MARKDOWN_SYNTAX:
        text = pattern.sub(replacement, text)
    return text


class QualityWordTokenizer(WordTokenizer):
    """The word tokenizer of the Gopher, C4, FineWeb and MinHash steps.

    Words come from datatrove's offline tokenizer for ``language`` (spaCy's blank pipeline for English)
    run on :func:`markdown_words_view` of the text when ``strip_markdown``: the extracted text is Markdown,
    and its syntax tokens (``#``, ``*``, ``|``, ``](url)``) would otherwise count as non-alphabetic words
    and push well-formed pages under Gopher's 80 %-alphabetic rule, more so the more structure an
    extractor keeps. Sentence spans are those of the raw text.

    Instances with the same settings are equal, so datatrove's tokenization cache (keyed by text and
    tokenizer) serves every step of a process.
    """

    def __init__(self, language: str = "en", strip_markdown: bool = True) -> None:
        super().__init__(language)
        self.strip_markdown = strip_markdown

    @property
    def inner(self) -> WordTokenizer:
        return load_word_tokenizer(self.language)

    def word_tokenize(self, text: str) -> list[str]:
        return self.inner.word_tokenize(markdown_words_view(text) if self.strip_markdown else text)

    def sent_tokenize(self, text: str) -> list[str]:
        return self.inner.sent_tokenize(markdown_words_view(text) if self.strip_markdown else text)

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        return self.inner.span_tokenize(text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QualityWordTokenizer) and (self.language, self.strip_markdown) == (
            other.language,
            other.strip_markdown,
        )

    def __hash__(self) -> int:
        return hash((QualityWordTokenizer, self.language, self.strip_markdown))

    def __repr__(self) -> str:
        return f"QualityWordTokenizer({self.language!r}, strip_markdown={self.strip_markdown})"
