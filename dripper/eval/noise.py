"""Seeds and noise in the ablation report: an arm's runs (one per seed) rolled into one mean with its spread,
and the rule that reads a difference between two arms against both sources of noise.

**Across seeds.** An arm's score is the mean over its seeds; its seed noise is the standard deviation of the
seeds' scores (``sd``, n − 1 in the denominator) over ``sqrt(n)``: the standard error of that mean as a
model of the training run's randomness (initialisation, data order).

**Across items.** Every score carries lm-eval's standard error over the benchmark's items (a mean over
benchmarks carries ``sqrt(Σ SE²)/n``). The seeds of an arm are scored on the same items, so their item
errors do not average out: an arm's item SE is the mean of its seeds' SEs.

**The rule.** A difference ``a − b`` is read against ``noise = sqrt(item_a² + item_b² + sd_a²/n_a +
sd_b²/n_b)`` (the two sources taken as independent): ``|difference| / noise`` within 1 reads as noise, above 2
as beyond noise (worth a larger run), between as suggestive. With one seed on either side the seed term is
not measured and the reading says so. The same rule reads the early signal (the reference loss, whose item
term is the standard error over the reference's windows; lower is better). It is a stated rule of thumb, not
a significance test: two or three seeds estimate ``sd`` loosely.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["NOISE_RULE", "aggregate_curve", "aggregate_scores", "compare", "spread"]

NOISE_RULE = (
    "An arm's score is the mean over its seeds. Its noise has two parts: the spread across seeds (standard "
    "deviation sd over n seeds, giving sd/sqrt(n)) and lm-eval's standard error over the benchmark's items "
    "(SE; a mean over benchmarks carries sqrt(Σ SE²)/n; seeds are scored on the same items, so an arm's item "
    "SE is its seeds' mean SE). A difference a − b is read against noise = sqrt(SE_a² + SE_b² + sd_a²/n_a + "
    "sd_b²/n_b): |difference|/noise within 1 is noise, above 2 is beyond noise (worth a larger run), between "
    "is suggestive. With one seed on either side the seed term is not measured and the reading says so. A "
    "rule of thumb, not a significance test: a few seeds estimate sd loosely."
)


def spread(values: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    """``(mean, sd, n)`` of the known values (``sd`` with n − 1; ``None`` under two values)."""
    known = [float(v) for v in values if v is not None]
    if not known:
        return None, None, 0
    mean = sum(known) / len(known)
    if len(known) < 2:
        return mean, None, len(known)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in known) / (len(known) - 1)), len(known)


def _mean_known(values: Sequence[float | None]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return sum(known) / len(known) if known and len(known) == len(values) else None


def aggregate_scores(summaries: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """One arm's final scores over its seeds: each figure the mean over seeds, its item SE the seeds' mean SE,
    and its seed spread (``…_seed_sd``, ``seeds``). One summary comes back as it is, with ``seeds: 1``."""
    summaries = [s for s in summaries if s]
    if not summaries:
        return None
    first = summaries[0]
    out = dict(first)
    out["seeds"] = len(summaries)
    out["mean"], out["mean_seed_sd"], _ = spread([s.get("mean") for s in summaries])
    out["mean_stderr"] = _mean_known([s.get("mean_stderr") for s in summaries])
    for key in ("categories",):
        values, errors, sds = {}, {}, {}
        for category in first.get(key) or {}:
            values[category], sds[category], _ = spread([(s.get(key) or {}).get(category) for s in summaries])
            errors[category] = _mean_known([(s.get(f"{key}_stderr") or {}).get(category) for s in summaries])
        out[key], out[f"{key}_stderr"], out[f"{key}_seed_sd"] = values, errors, sds
    tasks = {}
    for task, row in (first.get("tasks") or {}).items():
        rows = [(s.get("tasks") or {}).get(task) or {} for s in summaries]
        score, sd, _ = spread([r.get("score") for r in rows])
        tasks[task] = {
            **row,
            "score": score,
            "stderr": _mean_known([r.get("stderr") for r in rows]),
            "seed_sd": sd,
        }
    out["tasks"] = tasks
    if any(s.get("reference_loss") is not None for s in summaries):
        out["reference_loss"], out["reference_loss_seed_sd"], _ = spread(
            [s.get("reference_loss") for s in summaries]
        )
        out["reference_loss_stderr"] = _mean_known([s.get("reference_loss_stderr") for s in summaries])
    return out


def aggregate_curve(curves: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Checkpoint points of several seeds merged by step: each point's mean score and reference loss as the
    mean over the seeds that have it, with their spread (``mean_seed_sd``, ``reference_loss_seed_sd``,
    ``seeds``)."""
    by_step: dict[Any, list[dict[str, Any]]] = {}
    for curve in curves:
        for point in curve:
            by_step.setdefault(point.get("step"), []).append(point)
    merged = []
    for points in by_step.values():
        first = points[0]
        mean, sd, n = spread([p.get("mean") for p in points])
        reference, reference_sd, _ = spread([p.get("reference_loss") for p in points])
        merged.append(
            {
                **first,
                "mean": mean,
                "mean_stderr": _mean_known([p.get("mean_stderr") for p in points]),
                "mean_seed_sd": sd,
                "reference_loss": reference,
                "reference_loss_stderr": _mean_known([p.get("reference_loss_stderr") for p in points]),
                "reference_loss_seed_sd": reference_sd,
                "seeds": n,
            }
        )
    return sorted(merged, key=lambda p: (p["tokens"] is None, p["tokens"] or 0, p["step"] or 0))


def compare(
    a: float,
    a_stderr: float | None,
    b: float,
    b_stderr: float | None,
    *,
    a_seed_sd: float | None = None,
    a_seeds: int = 1,
    b_seed_sd: float | None = None,
    b_seeds: int = 1,
    lower_is_better: bool = False,
) -> dict[str, Any]:
    """``a − b`` read against the noise of :data:`NOISE_RULE`.

    Returns ``difference``, ``item_stderr`` (``sqrt(se_a² + se_b²)``), ``seed_stderr`` (``sqrt(sd_a²/n_a +
    sd_b²/n_b)``, ``None`` with one seed on a side), ``combined_stderr`` (both), ``ratio``, ``verdict``
    (``"> 2 SE"``, ``"> 1 SE"``, ``"within 1 SE"`` or ``"no standard error"``) and ``reading`` (a sentence).
    """
    difference = a - b
    item = math.sqrt(a_stderr**2 + b_stderr**2) if a_stderr is not None and b_stderr is not None else None
    seed = None
    if a_seed_sd is not None and b_seed_sd is not None and a_seeds >= 2 and b_seeds >= 2:
        seed = math.sqrt(a_seed_sd**2 / a_seeds + b_seed_sd**2 / b_seeds)
    parts = [x for x in (item, seed) if x is not None]
    if not parts:
        return {"difference": difference, "item_stderr": None, "seed_stderr": None, "combined_stderr": None,
                "ratio": None, "verdict": "no standard error",
                "reading": "no standard error on either side: not read"}  # fmt: skip
    combined = math.sqrt(sum(x**2 for x in parts))
    ratio = abs(difference) / combined if combined > 0 else math.inf
    verdict = "> 2 SE" if ratio > 2 else "> 1 SE" if ratio > 1 else "within 1 SE"
    if difference == 0:
        better = "equal"
    else:
        a_better = (difference < 0) if lower_is_better else (difference > 0)
        better = "the first better" if a_better else "the second better"
    meaning = {"> 2 SE": "beyond noise", "> 1 SE": "suggestive, not beyond noise", "within 1 SE": "noise"}[
        verdict
    ]
    reading = f"{meaning} ({ratio:.1f}× the noise; {better})"
    if seed is None:
        reading += "; seed noise not measured (one seed)"
    return {"difference": difference, "item_stderr": item, "seed_stderr": seed, "combined_stderr": combined,
            "ratio": ratio, "verdict": verdict, "reading": reading}  # fmt: skip
