"""Fitting one stage: tree exports score as the learners do, bags average, page weights balance groups,
snippet pages train only their labelled blocks."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dripper.labelers.cpu.features import PageFeatures
from dripper.labelers.cpu.fit import (
    TrainParams,
    average_ensembles,
    ensemble_from_sklearn,
    fit_ensemble,
    fit_lightgbm,
    fit_stage,
    page_multipliers,
)
from dripper.labelers.cpu.training_set import PageExample
from tests.labelers.cpu import fake_page, toy_data


def test_sklearn_export_matches_decision_function():
    from sklearn.ensemble import HistGradientBoostingClassifier

    x, y, _ = toy_data()
    classifier = HistGradientBoostingClassifier(max_iter=15, max_leaf_nodes=15, random_state=0).fit(x, y)
    ensemble = ensemble_from_sklearn(classifier)
    assert np.allclose(ensemble.decision_function(x), classifier.decision_function(x), atol=1e-9)


def test_lightgbm_export_matches_raw_scores():
    pytest.importorskip("lightgbm")
    x, y, w = toy_data()
    params = TrainParams(rounds=12, num_leaves=7, min_data_in_leaf=5, threads=1, backend="lightgbm")
    ensemble = fit_ensemble(x, y, w, params, seed=0)
    booster = fit_lightgbm(x, y, w, params, seed=0)
    assert np.allclose(ensemble.decision_function(x), booster.predict(x, raw_score=True), atol=1e-9)


def test_averaged_ensembles_score_the_mean_of_their_members():
    x, y, w = toy_data()
    members = [
        fit_ensemble(x[part], y[part], w[part], TrainParams(rounds=4 + seed, backend="sklearn"), seed=seed)
        for seed, part in enumerate((slice(0, 400), slice(200, 600), slice(100, 500)))
    ]
    averaged = average_ensembles(members)
    assert averaged.n_trees == sum(member.n_trees for member in members)
    expected = np.mean([member.decision_function(x) for member in members], axis=0)
    assert np.allclose(averaged.decision_function(x), expected, atol=1e-9)
    averaged.validate(x.shape[1])


def test_page_multipliers_balance_groups():
    pages = [fake_page(f"a{i}", "big", f"s{i}", 3) for i in range(16)] + [fake_page("b", "small", "t", 3)]
    pages[0].page_type = "forum"  # its own group: source and page type
    indexes = list(range(len(pages)))
    weights = page_multipliers(pages, indexes, 0.5)
    assert weights.mean() == pytest.approx(1.0)
    # 15 pages of "big", one "big:forum", one "small": a page weighs 1/sqrt(its group's size)
    assert weights[1] / weights[16] == pytest.approx(1 / np.sqrt(15))
    assert weights[0] == pytest.approx(weights[16])
    assert np.allclose(page_multipliers(pages, indexes, 0.0), 1.0)


def _toy_pages(n_pages: int = 12, n_blocks: int = 50) -> list[PageExample]:
    x, y, _ = toy_data(n_pages * n_blocks)
    pages = []
    for index in range(n_pages):
        rows = slice(index * n_blocks, (index + 1) * n_blocks)
        features = PageFeatures(
            x[rows],
            np.full(n_blocks, 40.0, np.float32),
            np.zeros((n_blocks, 1), np.int32),
            np.zeros(n_blocks, np.int32),
        )
        pages.append(PageExample(f"p{index}", "full", None, f"s{index}", features, y[rows].copy()))
    return pages


def _snippet_page(page: PageExample, known: np.ndarray) -> PageExample:
    return PageExample("snip", "snippets", None, "snip", page.features, page.labels & known, known)


def test_snippet_pages_train_only_their_labelled_blocks():
    params = TrainParams(rounds=8, num_leaves=7, min_data_in_leaf=5, threads=1, backend="sklearn", bags=1)
    probe = toy_data(200, seed=1)[0]
    full = _toy_pages()
    known = np.zeros(50, bool)
    known[:6] = True
    partial = _snippet_page(_toy_pages(1)[0], known)

    def scores(pages, **changes):
        settings = replace(params, **changes)
        return fit_stage(pages, range(len(pages)), settings, seed=0).decision_function(probe)

    with_page = scores([*full, partial])
    # Weight 0: exactly the trees of the full pages alone.
    assert np.array_equal(scores([*full, partial], snippet_weight=0.0), scores(full))
    assert not np.array_equal(with_page, scores(full))
    # The unlabelled blocks' labels are never read; the labelled ones are.
    unlabelled_flipped = _snippet_page(partial, known)
    unlabelled_flipped.labels = np.where(known, partial.labels, ~partial.labels)
    assert np.array_equal(scores([*full, unlabelled_flipped]), with_page)
    labelled_flipped = _snippet_page(partial, known)
    labelled_flipped.labels = np.where(known, ~partial.labels, partial.labels) & known
    assert not np.array_equal(scores([*full, labelled_flipped]), with_page)
    with pytest.raises(ValueError, match="snippet_weight"):
        TrainParams(snippet_weight=-1)


def _split_features(ensemble) -> set[int]:
    """The features the ensemble's internal nodes split on (a leaf is its own child)."""
    nodes = np.arange(len(ensemble.feature))
    internal = ensemble.children[0::2] != nodes
    return set(ensemble.feature[internal].tolist())


def test_ignored_features_are_never_split_on():
    from dripper.labelers.cpu.features import FEATURE_NAMES

    params = TrainParams(rounds=8, num_leaves=7, min_data_in_leaf=5, threads=1, backend="sklearn", bags=1)
    pages = _toy_pages()
    # The toy rule reads columns 0, 1 and 2: the trees use column 0 unless it is ignored.
    assert 0 in _split_features(fit_stage(pages, range(len(pages)), params, seed=0))
    ignoring = replace(params, ignore_features=f"{FEATURE_NAMES[0]} {FEATURE_NAMES[3]}")
    used = _split_features(fit_stage(pages, range(len(pages)), ignoring, seed=0))
    assert used and not used & {0, 3}
    assert pages[0].features.values[:, 0].any()  # the cached pages are left as they were
    with pytest.raises(ValueError, match="unknown feature names"):
        TrainParams(ignore_features="no_such_feature")
