"""Is one extractor ahead of another by more than noise? A paired bootstrap over pages.

Two extractors scored on the same pages differ by the mean of their per-page differences; how much of that
is the luck of which pages were drawn is measured by resampling the pages (with replacement) and recomputing
the difference on each resample: the 2.5 and 97.5 percentiles of those differences are a 95% interval. The
pairing matters: a page that is hard for both counts in both means on every resample, so only the
differences vary. Snippet F1 is a micro F1 over the summed snippet counts; it is recomputed from the
resampled counts the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Lead", "paired_leads", "format_leads"]

METRICS = ("rouge_f1", "rouge_f1_norm", "snippet_f1")


@dataclass(frozen=True, slots=True)
class Lead:
    """How far ``row`` is ahead of ``baseline`` on one metric over one page set.

    Attributes:
        group: The page set's name.
        row: The extractor compared.
        baseline: The extractor it is compared with.
        metric: ``rouge_f1``, ``rouge_f1_norm``, ``snippet_f1`` or another per-page score.
        pages: Pages scored by both on this metric.
        difference: ``row``'s figure minus ``baseline``'s.
        low, high: The 95% interval of the difference over the bootstrap resamples.
    """

    group: str
    row: str
    baseline: str
    metric: str
    pages: int
    difference: float
    low: float
    high: float

    @property
    def beyond_noise(self) -> bool:
        """The whole interval is on one side of zero."""
        return self.low > 0 or self.high < 0


def _snippet_f1(counts: np.ndarray) -> np.ndarray:
    """Micro F1 of summed ``(tp, fn, fp)`` counts, along the last axis."""
    tp, fn, fp = counts[..., 0], counts[..., 1], counts[..., 2]
    denominator = 2 * tp + fn + fp
    return np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)


def paired_leads(
    scores: Mapping[str, Mapping[str, Mapping[str, float]]],
    row: str,
    groups: Mapping[str, Sequence[str]],
    baselines: Sequence[str] | None = None,
    resamples: int = 2000,
    seed: int = 0,
    metrics: Sequence[str] = METRICS,
) -> list[Lead]:
    """Paired bootstrap intervals of ``row``'s lead over every other row.

    Args:
        scores: ``scores[row][page_id]``: that page's scores (``rouge_f1``, ``rouge_f1_norm`` for full-text
            pages; ``snip_tp``, ``snip_fn``, ``snip_fp`` for snippet pages), as the benchmarks write them.
        row: The extractor whose lead is measured.
        groups: Page sets by name (page ids); each is resampled on its own.
        baselines: The rows to compare with (default: every other row of ``scores``).
        resamples: Bootstrap resamples.
        seed: Seed of the resampling (the same resamples for every baseline and metric).
        metrics: The per-page scores compared (any key of ``scores``' page dicts; ``snippet_f1`` is the
            micro F1 of the snippet counts).

    Returns:
        One :class:`Lead` per group, baseline and metric with at least one page scored by both.
    """
    rng = np.random.default_rng(seed)
    leads = []
    for group, ids in groups.items():
        for baseline in baselines if baselines is not None else sorted(set(scores) - {row}):
            mine, theirs = scores[row], scores[baseline]
            for metric in metrics:
                if metric == "snippet_f1":
                    keys = ("snip_tp", "snip_fn", "snip_fp")
                    shared = [i for i in ids if keys[0] in mine.get(i, {}) and keys[0] in theirs.get(i, {})]
                    if not shared:
                        continue
                    a = np.array([[mine[i][k] for k in keys] for i in shared], dtype=np.float64)
                    b = np.array([[theirs[i][k] for k in keys] for i in shared], dtype=np.float64)
                    draws = rng.integers(0, len(shared), size=(resamples, len(shared)))
                    difference = float(_snippet_f1(a.sum(0)) - _snippet_f1(b.sum(0)))
                    spread = _snippet_f1(a[draws].sum(1)) - _snippet_f1(b[draws].sum(1))
                else:
                    shared = [i for i in ids if metric in mine.get(i, {}) and metric in theirs.get(i, {})]
                    if not shared:
                        continue
                    deltas = np.array([mine[i][metric] - theirs[i][metric] for i in shared])
                    draws = rng.integers(0, len(shared), size=(resamples, len(shared)))
                    difference = float(deltas.mean())
                    spread = deltas[draws].mean(axis=1)
                low, high = np.percentile(spread, [2.5, 97.5])
                leads.append(
                    Lead(group, row, baseline, metric, len(shared), difference, float(low), float(high))
                )
    return leads


def format_leads(leads: Sequence[Lead], places: int = 3, show_row: bool = False) -> str:
    """A table of the leads; ``*`` marks an interval that excludes zero.

    Args:
        leads: The leads, in the order printed.
        places: Decimal places of the differences.
        show_row: Name the extractor ahead (``ROW over BASELINE``) instead of the baseline alone, for
            tables comparing several rows.
    """
    who = "row over baseline" if show_row else "baseline"
    width = 40 if show_row else 28
    lines = [
        f"== lead over each {who.split()[-1]}: difference [95% paired-bootstrap interval]; * beyond noise ==",
        f"{'pages':24} {who:{width}} {'metric':14} {'n':>5}  lead",
    ]
    for lead in leads:
        mark = "*" if lead.beyond_noise else " "
        name = f"{lead.row} over {lead.baseline}" if show_row else lead.baseline
        lines.append(
            f"{lead.group:24} {name:{width}} {lead.metric:14} {lead.pages:>5}  "
            f"{lead.difference:+.{places}f} [{lead.low:+.{places}f}, {lead.high:+.{places}f}] {mark}"
        )
    return "\n".join(lines)
