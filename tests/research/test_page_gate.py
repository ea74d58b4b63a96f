"""``research.page_gate``: the page summaries a learned gate would read, from block probabilities."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dripper.labelers.cpu.features import FEATURE_NAMES, PageFeatures
from research import page_gate

REPO = Path(__file__).resolve().parents[2]


def _features(chars: list[int]) -> PageFeatures:
    n = len(chars)
    values = np.zeros((n, len(FEATURE_NAMES)), np.float32)
    values[:, FEATURE_NAMES.index("page_link_share")] = 0.25
    return PageFeatures(
        values, np.array(chars, np.float32), np.zeros((n, 1), np.int32), np.zeros(n, np.int32)
    )


def test_summaries_of_a_confident_page_and_a_doubtful_one():
    names = page_gate.SUMMARY_NAMES
    sure = dict(
        zip(
            names,
            page_gate.page_summary(np.array([0.02, 0.99, 0.98, 0.01]), _features([10, 500, 400, 10])),
            strict=True,
        )
    )
    assert sure["expected_f1"] > 0.95
    assert sure["selected_char_share"] == pytest.approx(900 / 920)
    assert sure["unsure_char_share"] == 0.0
    assert sure["selected_runs"] == 1.0
    assert (sure["first_selected_position"], sure["last_selected_position"]) == (
        pytest.approx(1 / 3),
        pytest.approx(2 / 3),
    )
    assert sure["page_link_share"] == 0.25
    # Two separate runs of middling blocks: lower expected F1, all its text unsure.
    doubt = dict(
        zip(
            names,
            page_gate.page_summary(np.array([0.6, 0.1, 0.55, 0.1]), _features([300, 50, 300, 50])),
            strict=True,
        )
    )
    assert doubt["expected_f1"] < sure["expected_f1"]
    assert doubt["unsure_char_share"] == pytest.approx(600 / 700)
    assert doubt["selected_runs"] == 2.0
