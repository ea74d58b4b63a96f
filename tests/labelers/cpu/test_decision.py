"""How block probabilities become labels: the threshold rule and each page's expected-F1 cut."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dripper.labelers.cpu.decision import expected_f1, expected_f1_main, finish_labels


def _expected_f1(selected: np.ndarray, p: np.ndarray, chars: np.ndarray) -> float:
    return 2 * float((p * chars)[selected].sum()) / (float(chars[selected].sum()) + float((p * chars).sum()))


def test_finish_labels_lets_empty_blocks_follow_their_neighbours():
    p = np.array([0.9, 0.0, 0.8, 0.1, 0.0, 0.2])
    chars = np.array([100, 0, 80, 50, 0, 10])
    assert finish_labels(p, chars, 0.5) == [True, True, True, False, False, False]
    assert finish_labels(p, chars, 0.5, decision="expected_f1") == [True, True, True, False, False, False]


def test_finish_labels_never_answers_nothing_for_a_page_with_text():
    p = np.array([0.1, 0.35, 0.3, 0.05])
    chars = np.array([10, 200, 150, 30])
    assert finish_labels(p, chars, 0.5) == [False, True, True, False]
    assert any(finish_labels(np.zeros(4), chars, 0.5, decision="expected_f1"))


def test_expected_f1_selection_is_the_best_subset():
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 9))
        p = rng.random(n) ** rng.choice([0.5, 1.0, 3.0])
        chars = rng.integers(1, 400, n).astype(np.float64)
        chosen = expected_f1_main(p, chars)
        best = max(
            _expected_f1(np.array(mask, dtype=bool), p, chars)
            for mask in itertools.product([False, True], repeat=n)
            if any(mask)
        )
        assert _expected_f1(chosen, p, chars) == pytest.approx(best, abs=1e-12)
        # A block more likely main than not is always worth taking.
        assert chosen[p > 0.5].all()


def test_expected_f1_takes_more_of_an_uncertain_page_than_a_threshold():
    chars = np.full(4, 100.0)
    unsure = np.array([0.3, 0.25, 0.2, 0.02])
    assert finish_labels(unsure, chars, 0.4) == [True, True, False, False]  # the relative fallback
    assert finish_labels(unsure, chars, 0.4, decision="expected_f1") == [True, True, True, False]
    sure = np.array([0.97, 0.95, 0.3, 0.02])
    assert finish_labels(sure, chars, 0.4, decision="expected_f1") == [True, True, False, False]
    with pytest.raises(ValueError, match="decision"):
        finish_labels(sure, chars, 0.4, decision="majority")


def test_expected_f1_scores_any_labels_and_is_what_the_cut_maximises():
    rng = np.random.default_rng(5)
    for _ in range(100):
        n = int(rng.integers(1, 7))
        p, chars = rng.random(n), rng.integers(1, 300, n).astype(np.float64)
        mask = rng.random(n) < 0.5
        assert expected_f1(p, chars, mask) == pytest.approx(_expected_f1(mask, p, chars), abs=1e-12)
        best = expected_f1(p, chars, expected_f1_main(p, chars))
        assert best >= expected_f1(p, chars, mask) - 1e-12 and 0.0 <= best <= 1.0
    sure, unsure = np.array([0.99, 0.98, 0.01]), np.array([0.6, 0.5, 0.4])
    chars = np.full(3, 100.0)
    assert expected_f1(sure, chars, [True, True, False]) > 0.98
    assert expected_f1(unsure, chars, expected_f1_main(unsure, chars)) < 0.8
    assert expected_f1(np.zeros(2), np.zeros(2), [True, False]) == 0.0
