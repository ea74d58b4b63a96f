"""The paired bootstrap of dripper.eval.paired: leads, their intervals, snippet micro F1."""

from __future__ import annotations

import numpy as np
import pytest

from dripper.eval.paired import format_leads, paired_leads


def _scores(values: list[float], norm_shift: float = 0.0) -> dict[str, dict]:
    return {f"p{i}": {"rouge_f1": v, "rouge_f1_norm": v + norm_shift} for i, v in enumerate(values)}


def test_a_consistent_lead_is_beyond_noise_and_a_tie_is_not() -> None:
    rng = np.random.default_rng(1)
    base = rng.uniform(0.3, 0.9, size=200).tolist()
    scores = {
        "ours": _scores([v + 0.05 for v in base]),
        "same": _scores(base[:]),
        "noisy": _scores([v + 0.05 + rng.normal(0, 0.3) for v in base]),
    }
    ids = {"all": list(_scores(base))}
    leads = {(lead.baseline, lead.metric): lead for lead in paired_leads(scores, "noisy", ids)}
    # Against "same", "noisy" is ahead by about 0.05 on average but with a spread of 0.3 per page: the
    # interval is wide (about ±0.04) yet must hold the true lead.
    noisy = leads["same", "rouge_f1"]
    assert noisy.low < 0.05 < noisy.high
    assert noisy.high - noisy.low > 0.05
    exact = {(lead.baseline, lead.metric): lead for lead in paired_leads(scores, "ours", ids)}
    steady = exact["same", "rouge_f1"]
    assert steady.difference == pytest.approx(0.05)
    assert steady.low == pytest.approx(0.05) and steady.high == pytest.approx(0.05)
    assert steady.beyond_noise
    assert steady.pages == 200


def test_pages_missing_a_score_are_left_out_of_the_pairs() -> None:
    scores = {"a": _scores([0.5, 0.6, 0.7]), "b": _scores([0.4, 0.6])}
    (raw, norm) = paired_leads(scores, "a", {"all": ["p0", "p1", "p2"]})
    assert raw.pages == 2 and raw.difference == pytest.approx(0.05)
    # Differences 0.1 and 0.0: a resample of both pages can be all of one, so the interval is [0, 0.1].
    assert raw.low == pytest.approx(0.0) and raw.high == pytest.approx(0.1)
    assert not raw.beyond_noise


def test_snippet_f1_is_a_micro_f1_of_the_summed_counts() -> None:
    def snip(tp: int, fn: int, fp: int) -> dict:
        return {"snip_tp": tp, "snip_fn": fn, "snip_fp": fp, "snip_tn": 0}

    scores = {
        "a": {"p0": snip(8, 2, 0), "p1": snip(0, 0, 0)},
        "b": {"p0": snip(4, 6, 0), "p1": snip(0, 0, 2)},
    }
    (lead,) = paired_leads(scores, "a", {"all": ["p0", "p1"]})
    # a: 2*8 / (16 + 2) = 0.889; b: 2*4 / (8 + 6 + 2) = 0.5
    assert lead.metric == "snippet_f1"
    assert lead.difference == pytest.approx(16 / 18 - 8 / 16)
    assert "snippet_f1" in format_leads([lead])
