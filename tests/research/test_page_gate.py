"""``research.page_gate``: the page summaries a learned gate would read, from block probabilities, and the held-out regressor it (and ``research.route_model``) fits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from research import page_gate
from tests.research.pages import page_features

REPO = Path(__file__).resolve().parents[2]


def test_summaries_of_a_confident_page_and_a_doubtful_one():
    names = page_gate.SUMMARY_NAMES
    sure = dict(
        zip(
            names,
            page_gate.page_summary(np.array([0.02, 0.99, 0.98, 0.01]), page_features([10, 500, 400, 10])),
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
            page_gate.page_summary(np.array([0.6, 0.1, 0.55, 0.1]), page_features([300, 50, 300, 50])),
            strict=True,
        )
    )
    assert doubt["expected_f1"] < sure["expected_f1"]
    assert doubt["unsure_char_share"] == pytest.approx(600 / 700)
    assert doubt["selected_runs"] == 2.0


def test_held_out_predictions_never_see_the_groups_own_rows():
    pytest.importorskip("lightgbm")
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(4), 60)
    # The target is the group's own offset plus a signal in x: a regressor that saw a group's rows would
    # learn its offset; one fitted on the other groups cannot.
    signal = rng.normal(size=groups.size)
    x = np.stack([signal, rng.normal(size=groups.size)], axis=1)
    y = signal + 3.0 * (groups == 3)
    predicted = page_gate.held_out_predictions(x, y, groups, num_threads=1)
    assert np.corrcoef(predicted[groups == 3], signal[groups == 3])[0, 1] > 0.8
    assert float((y - predicted)[groups == 3].mean()) > 2.0  # group 3's offset never learned
