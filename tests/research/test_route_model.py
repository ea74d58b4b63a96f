"""``research.route_model``: the inputs a learned cascade router reads, from block probabilities and
Trafilatura's text."""

from __future__ import annotations

import numpy as np
import pytest

from research import route_model
from tests.research.pages import page_features


def test_block_shares_count_each_word_as_often_as_trafilatura_kept_it():
    shares = route_model.trafilatura_block_shares(
        ["Main text here", "main main", "Menu Login", "", "---"], "main TEXT here, and more"
    )
    assert shares.tolist() == [1.0, 0.5, 0.0, -1.0, -1.0]


def test_agreement_of_a_selection_with_trafilatura():
    chars = np.array([10, 500, 400, 90])
    probabilities = np.array([0.02, 0.99, 0.98, 0.01])  # selects blocks 1 and 2
    same = dict(
        zip(
            route_model.AGREEMENT_NAMES,
            route_model.agreement_features(np.array([0.0, 1.0, 0.9, 0.1]), probabilities, chars),
            strict=True,
        )
    )
    assert same["trafilatura_f1"] == 1.0 and same["trafilatura_agreement"] == 1.0
    assert same["trafilatura_char_share"] == pytest.approx(0.9)
    assert same["trafilatura_empty"] == 0.0
    # Trafilatura kept only the last block: no overlap with the selection, nothing agrees but block 0.
    other = dict(
        zip(
            route_model.AGREEMENT_NAMES,
            route_model.agreement_features(np.array([0.0, 0.0, 0.2, 1.0]), probabilities, chars),
            strict=True,
        )
    )
    assert other["trafilatura_f1"] == 0.0
    assert other["trafilatura_agreement"] == pytest.approx(10 / 1000)
    assert other["trafilatura_mean_probability"] == pytest.approx(0.01)
    nothing = route_model.agreement_features(np.full(4, -1.0), probabilities, chars)
    assert nothing[-1] == 1.0 and nothing[0] == 0.0


def test_route_features_name_every_value_and_read_the_stage_disagreement():
    features = page_features([10, 500, 400, 10])
    stage2 = np.array([0.02, 0.99, 0.98, 0.01])
    agree = route_model.route_features(stage2, stage2, features, declined=False)
    apart = route_model.route_features(np.array([0.5, 0.5, 0.5, 0.5]), stage2, features, declined=True)
    assert len(agree) == len(apart) == len(route_model.ROUTE_NAMES)
    named = dict(zip(route_model.ROUTE_NAMES, apart, strict=True))
    assert dict(zip(route_model.ROUTE_NAMES, agree, strict=True))["stage_disagreement"] == 0.0
    assert named["stage_disagreement"] == pytest.approx(
        (0.48 * 10 + 0.49 * 500 + 0.48 * 400 + 0.49 * 10) / 920
    )
    assert named["stage1_expected_f1"] < named["expected_f1"]
    assert named["declined"] == 1.0


def test_without_the_cache_it_says_which_runs_make_it(tmp_path):
    with pytest.raises(
        SystemExit, match=r"scores_f\.jsonl: run `python -m research\.cpu_seq_quality prepare`"
    ):
        route_model.main(["--cache", str(tmp_path)])
