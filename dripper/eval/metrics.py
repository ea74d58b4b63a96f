"""Extraction-quality metrics: ROUGE-5 F1 on jieba tokens (the WebMainBench metric) and snippet scoring.

The ROUGE computation follows MinerU-HTML's ``calc_rouge_n_score`` exactly
(docs/upstream.md#the-rouge-metric): the raw, unstripped strings are tokenised with ``jieba.lcut``
(accurate mode, HMM on), whitespace characters stay as tokens, nothing is lowercased, and 5-gram multisets
are intersected. A side with fewer than five tokens has no 5-grams and scores 0.0 unless both sides strip
to empty.

Because the ground truths mix plain text and Markdown, :func:`normalize_markdown` strips Markdown markup and
collapses whitespace so that a second, "normalised" figure measures content rather than formatting.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from dripper.markdown_text import normalize_markdown

DEFAULT_N = 5

NGramCounts = Counter[tuple[str, ...]]

_jieba_lock = threading.Lock()
_jieba_ready = False


def _jieba():
    """Return the ``jieba`` module, silenced and initialised once per process.

    ``import jieba`` costs ~0.2 s and building its prefix dictionary ~0.6 s with four lines of stderr
    chatter; doing it lazily keeps ``import dripper.eval.metrics`` free and the output of the CLI clean.
    """
    global _jieba_ready
    import jieba

    if not _jieba_ready:
        with _jieba_lock:
            if not _jieba_ready:
                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba_ready = True
    return jieba


def tokenize(text: str) -> list[str]:
    """Tokenise ``text`` with ``jieba.lcut`` exactly as WebMainBench does.

    Args:
        text: Any string; it is *not* stripped or lowercased.

    Returns:
        The tokens, with one token per whitespace character (``" "``, ``"\\n"``).
    """
    if not text:
        return []
    return _jieba().lcut(text)


def ngram_counts(tokens: Sequence[str], n: int = DEFAULT_N) -> NGramCounts:
    """Count the contiguous ``n``-token tuples of ``tokens`` (empty when ``len(tokens) < n``)."""
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


@dataclass(frozen=True, slots=True)
class RougeScore:
    """ROUGE-N precision, recall and F1 of one prediction against one reference."""

    precision: float
    recall: float
    f1: float


@dataclass(frozen=True, slots=True)
class PreparedReference:
    """A reference text with its n-grams computed once, reusable against many predictions.

    Attributes:
        text: The reference as given.
        is_blank: Whether ``text.strip()`` is empty (the "both empty → 1.0" rule needs it).
        ngrams: Its n-gram multiset.
    """

    text: str
    is_blank: bool
    ngrams: NGramCounts


def prepare_reference(text: str, n: int = DEFAULT_N) -> PreparedReference:
    """Tokenise a reference once so that several extractors can be scored against it cheaply."""
    return PreparedReference(text=text, is_blank=not text.strip(), ngrams=ngram_counts(tokenize(text), n))


def rouge_n(prediction: str, reference: str | PreparedReference, n: int = DEFAULT_N) -> RougeScore:
    """ROUGE-N of ``prediction`` against ``reference`` on jieba tokens (docs/upstream.md#the-rouge-metric).

    Args:
        prediction: The extractor's output (Markdown or text), not stripped.
        reference: The ground truth, or a :class:`PreparedReference` built with the same ``n``.
        n: The n-gram order; the benchmark uses 5.

    Returns:
        Precision, recall and F1. Both sides blank → 1.0; exactly one blank → 0.0; a side with fewer than
        ``n`` tokens contributes no n-grams, so the score is 0.0.
    """
    ref = reference if isinstance(reference, PreparedReference) else prepare_reference(reference, n)
    pred_blank = not prediction.strip()
    if pred_blank and ref.is_blank:
        return RougeScore(1.0, 1.0, 1.0)
    if pred_blank or ref.is_blank:
        return RougeScore(0.0, 0.0, 0.0)
    pred_ngrams = ngram_counts(tokenize(prediction), n)
    overlap = sum(min(count, pred_ngrams[gram]) for gram, count in ref.ngrams.items() if gram in pred_ngrams)
    precision = overlap / max(sum(pred_ngrams.values()), 1)
    recall = overlap / max(sum(ref.ngrams.values()), 1)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return RougeScore(precision, recall, f1)


@dataclass(frozen=True, slots=True)
class SnippetCounts:
    """Snippet outcomes of one page (or a sum of pages).

    Attributes:
        true_positives: ``with`` snippets found in the extraction.
        false_negatives: ``with`` snippets missing from it.
        false_positives: ``without`` snippets found in it.
        true_negatives: ``without`` snippets correctly absent.
    """

    true_positives: int = 0
    false_negatives: int = 0
    false_positives: int = 0
    true_negatives: int = 0

    def __add__(self, other: SnippetCounts) -> SnippetCounts:
        return SnippetCounts(
            self.true_positives + other.true_positives,
            self.false_negatives + other.false_negatives,
            self.false_positives + other.false_positives,
            self.true_negatives + other.true_negatives,
        )

    @property
    def total(self) -> int:
        return self.true_positives + self.false_negatives + self.false_positives + self.true_negatives

    def precision_recall_f1(self) -> tuple[float, float, float]:
        """Micro precision, recall and F1 of these counts (0.0 where a denominator is zero)."""
        tp, fp, fn = self.true_positives, self.false_positives, self.false_negatives
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return precision, recall, f1


def score_snippets(
    prediction: str, with_snippets: Sequence[str], without_snippets: Sequence[str]
) -> SnippetCounts:
    """Count which snippets occur in ``prediction``.

    Both the prediction and each snippet go through :func:`normalize_markdown` first, so Markdown emphasis,
    list markers and line wrapping do not hide a match. Snippets that normalise to nothing are ignored.

    Args:
        prediction: The extractor's output.
        with_snippets: Strings that must appear in a correct extraction.
        without_snippets: Strings that must not appear.

    Returns:
        The page's :class:`SnippetCounts`.
    """
    haystack = normalize_markdown(prediction)
    tp = fn = fp = tn = 0
    for snippet in with_snippets:
        needle = normalize_markdown(snippet)
        if not needle:
            continue
        if needle in haystack:
            tp += 1
        else:
            fn += 1
    for snippet in without_snippets:
        needle = normalize_markdown(snippet)
        if not needle:
            continue
        if needle in haystack:
            fp += 1
        else:
            tn += 1
    return SnippetCounts(tp, fn, fp, tn)


@dataclass(frozen=True, slots=True)
class PreparedGroundTruth:
    """Everything about one page's ground truth that scoring needs, computed once per page.

    Attributes:
        raw: The raw reference, or ``None`` for a snippet-only page.
        normalized: The reference after :func:`normalize_markdown`, or ``None``.
        with_snippets: Snippets that must appear.
        without_snippets: Snippets that must not appear.
    """

    raw: PreparedReference | None
    normalized: PreparedReference | None
    with_snippets: tuple[str, ...] = ()
    without_snippets: tuple[str, ...] = ()

    @property
    def has_snippets(self) -> bool:
        return bool(self.with_snippets or self.without_snippets)


def prepare_ground_truth(
    text: str | None,
    with_snippets: Sequence[str] = (),
    without_snippets: Sequence[str] = (),
    n: int = DEFAULT_N,
) -> PreparedGroundTruth:
    """Tokenise a page's ground truth (raw and normalised) once for repeated scoring."""
    if text is None:
        return PreparedGroundTruth(None, None, tuple(with_snippets), tuple(without_snippets))
    return PreparedGroundTruth(
        raw=prepare_reference(text, n),
        normalized=prepare_reference(normalize_markdown(text), n),
        with_snippets=tuple(with_snippets),
        without_snippets=tuple(without_snippets),
    )


def score_page(
    prediction: str,
    ground_truth: str | PreparedGroundTruth | None,
    with_snippets: Sequence[str] = (),
    without_snippets: Sequence[str] = (),
    n: int = DEFAULT_N,
) -> dict[str, float | int]:
    """Score one page's extraction.

    Args:
        prediction: The extractor's Markdown/text output ('' when it failed).
        ground_truth: The reference text (``None`` for snippet-only pages) or a :class:`PreparedGroundTruth`,
            in which case the snippet arguments are ignored in favour of the prepared ones.
        with_snippets: Strings that must appear.
        without_snippets: Strings that must not appear.
        n: The ROUGE order.

    Returns:
        A flat dict. Full-text pages get ``rouge_p``, ``rouge_r``, ``rouge_f1`` (raw) and ``rouge_f1_norm``;
        pages with snippets get ``snip_tp``, ``snip_fn``, ``snip_fp``, ``snip_tn`` and the page's own
        ``snip_f1``. A page can have both.
    """
    if isinstance(ground_truth, PreparedGroundTruth):
        prepared = ground_truth
    else:
        prepared = prepare_ground_truth(ground_truth, with_snippets, without_snippets, n)
    scores: dict[str, float | int] = {}
    if prepared.raw is not None and prepared.normalized is not None:
        raw = rouge_n(prediction, prepared.raw, n)
        scores["rouge_p"] = raw.precision
        scores["rouge_r"] = raw.recall
        scores["rouge_f1"] = raw.f1
        scores["rouge_f1_norm"] = rouge_n(normalize_markdown(prediction), prepared.normalized, n).f1
    if prepared.has_snippets:
        counts = score_snippets(prediction, prepared.with_snippets, prepared.without_snippets)
        scores["snip_tp"] = counts.true_positives
        scores["snip_fn"] = counts.false_negatives
        scores["snip_fp"] = counts.false_positives
        scores["snip_tn"] = counts.true_negatives
        scores["snip_f1"] = counts.precision_recall_f1()[2]
    return scores
