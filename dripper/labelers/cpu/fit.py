"""Fitting the CPU labeler's trees: hyper-parameters, block and page weights, one stage (optionally bagged
by site), and the export of LightGBM or scikit-learn trees to the model's own :class:`TreeEnsemble`.

:mod:`~dripper.labelers.cpu.train` cross-validates and trains the two-stage model with these;
:mod:`~dripper.labelers.cpu.training_set` makes the pages they are fitted on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dripper.labelers.cpu.decision import check_settings
from dripper.labelers.cpu.features import FEATURE_NAMES, context_features
from dripper.labelers.cpu.model import TreeEnsemble
from dripper.labelers.cpu.training_set import PageExample

__all__ = [
    "TrainParams",
    "average_ensembles",
    "block_weights",
    "ensemble_from_lightgbm",
    "ensemble_from_sklearn",
    "fit_ensemble",
    "fit_lightgbm",
    "fit_stage",
    "page_multipliers",
]


@dataclass(frozen=True)
class TrainParams:
    """Hyper-parameters of both stages (LightGBM names; the scikit-learn backend maps them).

    The defaults are the shipped model's settings: ``dripper train-labeler`` without options trains it, and
    the studies (``research.cpu_labeler_quality quality``, ``research.labeler_sweep``) measure it unless
    told otherwise.

    Attributes:
        rounds: Boosting rounds per stage.
        learning_rate: Shrinkage.
        num_leaves: Leaves per tree.
        max_depth: Depth limit per tree (the run-time cost of a tree is its depth).
        min_data_in_leaf: Fewest blocks per leaf.
        feature_fraction: Share of features tried per tree (LightGBM only).
        bagging_fraction: Share of blocks drawn per round (LightGBM only).
        lambda_l2: L2 regularisation of leaf values.
        max_bin: Histogram bins per feature.
        source_balance: Pages of a larger group (source, and WCXB's page type) weigh less: each page's
            weight is scaled by the group's page count to the power ``-source_balance`` (0: every page
            the same; 0.5: a group weighs as the square root of its size), so that one large collection
            of articles does not drown the rarer page types.
        char_weight: How much of a page's weight is spread by characters (the rest evenly over its
            blocks): the metric counts text, so long blocks matter more, but headings still count.
        snippet_weight: A snippet page's weight (its few labelled blocks) against a full-text page's;
            0 leaves snippet pages out of the fits (they still get folds and out-of-fold scores).
        two_stage: Train the second (context) stage.
        threads: Threads per fit.
        backend: ``lightgbm``, ``sklearn`` or ``auto`` (LightGBM when installed).
        bags: Ensembles per stage, each fitted on a random ``bag_sites`` share of the training sites and
            averaged (in log-odds): less dependence on which sites happened to be in the training data.
        bag_sites: Share of the sites each bag is fitted on (with ``bags > 1``).
        threshold: The model's decision threshold (a block is main at or above it; ``decision="threshold"``).
        min_confidence: The model declines pages where no block reaches this probability.
        min_page_confidence: The model also declines pages whose labels' expected F1 under its
            probabilities is below this (0: no such gate).
        decision: The model's decision rule (``threshold`` or ``expected_f1``: each page's selection of
            blocks with the highest expected F1; ``decision.py``). The trees do not depend on it.
        ignore_features: First-stage feature names (space-separated) the trees may not split on: their
            columns are held constant in both stages' training matrices. For ablations over one cached
            training set ("which of two new features costs a new collection?") without rebuilding it.
    """

    rounds: int = 150
    learning_rate: float = 0.1
    num_leaves: int = 31
    max_depth: int = 7
    min_data_in_leaf: int = 50
    feature_fraction: float = 0.5
    bagging_fraction: float = 0.5
    lambda_l2: float = 1.0
    max_bin: int = 63
    char_weight: float = 0.5
    snippet_weight: float = 1.0
    source_balance: float = 0.5
    two_stage: bool = True
    threads: int = 2
    backend: str = "auto"
    bags: int = 1
    bag_sites: float = 0.8
    threshold: float = 0.4
    min_confidence: float = 0.85
    decision: str = "expected_f1"
    min_page_confidence: float = 0.85
    ignore_features: str = ""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.ignore_features.split()) - set(FEATURE_NAMES))
        if unknown:
            raise ValueError(f"ignore_features: unknown feature names {unknown}")
        if self.rounds < 1:
            raise ValueError(f"rounds {self.rounds}: need at least 1")
        if self.snippet_weight < 0:
            raise ValueError(f"snippet_weight {self.snippet_weight}: need >= 0")
        if self.bags < 1 or not 0.0 < self.bag_sites <= 1.0:
            raise ValueError(
                f"bags {self.bags}, bag_sites {self.bag_sites}: need bags >= 1, bag_sites in (0, 1]"
            )
        check_settings(**self.decision_settings())

    def decision_settings(self) -> dict:
        """The model's decision fields (:class:`CpuModel` keyword arguments)."""
        return {
            "threshold": self.threshold,
            "min_confidence": self.min_confidence,
            "decision": self.decision,
            "min_page_confidence": self.min_page_confidence,
        }

    def resolved_backend(self) -> str:
        if self.backend != "auto":
            return self.backend
        try:
            import lightgbm  # noqa: F401
        except ImportError:
            return "sklearn"
        return "lightgbm"


def block_weights(page: PageExample, char_weight: float) -> np.ndarray:
    """Training weight of each block of ``page``: every page weighs the same in total (the benchmark is a
    mean over pages), spread over its labelled text blocks by characters (``char_weight``) and evenly (the
    rest); unlabelled blocks of a snippet page weigh nothing."""
    chars = page.features.chars.astype(np.float64)
    if page.known is not None:
        chars = np.where(page.known, chars, 0.0)
    has_text = chars > 0
    n_text = max(int(has_text.sum()), 1)
    total = float(chars.sum()) or 1.0
    weights = char_weight * chars / total + (1.0 - char_weight) * has_text / n_text
    return weights * _WEIGHT_SCALE


_WEIGHT_SCALE = 100.0  # about the blocks of a page: weights of order 1 keep LightGBM's hessian floors sane


def weight_group(page: PageExample) -> str:
    """The group whose size sets a page's weight (``source_balance``): its source, and page type if any."""
    return f"{page.source}:{page.page_type}" if page.page_type else page.source


def page_multipliers(pages: Sequence[PageExample], indexes: Sequence[int], balance: float) -> np.ndarray:
    """Weight of each page of ``pages[indexes]``: its group's size to the power ``-balance``, scaled so
    that the weights average 1 (see ``TrainParams.source_balance``)."""
    groups = Counter(weight_group(pages[i]) for i in indexes)
    raw = np.array([groups[weight_group(pages[i])] ** -balance for i in indexes], dtype=np.float64)
    return raw * (len(raw) / raw.sum()) if len(raw) else raw


def _stack(
    pages: Sequence[PageExample], indexes: Sequence[int], params: TrainParams, stage1: dict | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training matrix, labels and weights of the text blocks of ``pages[indexes]`` (stage 2 when
    ``stage1`` maps page index → stage-1 probabilities)."""
    matrices, labels, weights = [], [], []
    if params.snippet_weight == 0:  # as if they were not there (the same weights as without them)
        indexes = [i for i in indexes if not pages[i].partial]
    multipliers = page_multipliers(pages, indexes, params.source_balance)
    for index, multiplier in zip(indexes, multipliers, strict=True):
        page = pages[index]
        keep = page.features.chars > 0
        if page.known is not None:
            keep &= page.known
            multiplier *= params.snippet_weight
        if not keep.any():
            continue
        values = page.features.values
        if stage1 is not None:
            values = np.concatenate([values, context_features(page.features, stage1[index])], axis=1)
        matrices.append(values[keep])
        labels.append(page.labels[keep])
        weights.append(block_weights(page, params.char_weight)[keep] * multiplier)
    matrix = np.concatenate(matrices)
    ignored = [FEATURE_NAMES.index(name) for name in params.ignore_features.split()]
    if ignored:  # a constant column is never split on (stage 2 repeats stage 1's columns first)
        matrix[:, ignored] = 0.0
    return matrix, np.concatenate(labels), np.concatenate(weights)


def fit_lightgbm(
    features: np.ndarray, labels: np.ndarray, weights: np.ndarray, params: TrainParams, seed: int
):
    """Train a LightGBM booster (deterministic for a seed); :func:`fit_ensemble` exports it."""
    import lightgbm

    dataset = lightgbm.Dataset(
        features,
        labels.astype(np.float64),
        weight=weights,
        params={"max_bin": params.max_bin, "verbose": -1},
    )
    return lightgbm.train(
        {
            "objective": "binary",
            "learning_rate": params.learning_rate,
            "num_leaves": params.num_leaves,
            "max_depth": params.max_depth,
            "min_data_in_leaf": params.min_data_in_leaf,
            "feature_fraction": params.feature_fraction,
            "bagging_fraction": params.bagging_fraction,
            "bagging_freq": 1 if params.bagging_fraction < 1.0 else 0,
            "lambda_l2": params.lambda_l2,
            "max_bin": params.max_bin,
            "num_threads": params.threads,
            "seed": seed,
            "deterministic": True,
            "force_row_wise": True,
            "verbose": -1,
        },
        dataset,
        num_boost_round=params.rounds,
    )


def fit_ensemble(
    features: np.ndarray, labels: np.ndarray, weights: np.ndarray, params: TrainParams, seed: int
) -> TreeEnsemble:
    """Fit one gradient-boosted ensemble and export it as a :class:`TreeEnsemble`."""
    if params.resolved_backend() == "lightgbm":
        return ensemble_from_lightgbm(fit_lightgbm(features, labels, weights, params, seed))
    from sklearn.ensemble import HistGradientBoostingClassifier

    classifier = HistGradientBoostingClassifier(
        max_iter=params.rounds,
        learning_rate=params.learning_rate,
        max_leaf_nodes=params.num_leaves,
        max_depth=params.max_depth,
        min_samples_leaf=params.min_data_in_leaf,
        l2_regularization=params.lambda_l2,
        max_bins=min(params.max_bin, 255),
        early_stopping=False,
        random_state=seed,
    )
    classifier.fit(features, labels, sample_weight=weights)
    return ensemble_from_sklearn(classifier)


def fit_stage(
    pages: Sequence[PageExample],
    indexes: Sequence[int],
    params: TrainParams,
    seed: int,
    stage1: dict | None = None,
) -> TreeEnsemble:
    """One stage fitted on ``pages[indexes]``: a single ensemble, or ``params.bags`` site bags averaged."""
    if params.bags == 1:
        return fit_ensemble(*_stack(pages, indexes, params, stage1), params, seed)
    sites = sorted({pages[i].site for i in indexes})
    members = []
    for bag in range(params.bags):
        rng = np.random.default_rng([seed, bag])
        chosen = set(rng.choice(sites, size=max(1, round(params.bag_sites * len(sites))), replace=False))
        subset = [i for i in indexes if pages[i].site in chosen]
        members.append(fit_ensemble(*_stack(pages, subset, params, stage1), params, seed + bag))
    return average_ensembles(members)


def average_ensembles(members: Sequence[TreeEnsemble]) -> TreeEnsemble:
    """One ensemble whose raw score is the mean of ``members``' (their trees side by side)."""
    scale = 1.0 / len(members)
    offsets = np.cumsum([0] + [member.n_nodes for member in members[:-1]])
    return TreeEnsemble(
        baseline=float(np.mean([member.baseline for member in members])),
        roots=np.concatenate(
            [member.roots + offset for member, offset in zip(members, offsets, strict=True)]
        ),
        feature=np.concatenate([member.feature for member in members]),
        threshold=np.concatenate([member.threshold for member in members]),
        children=np.concatenate(
            [member.children + offset for member, offset in zip(members, offsets, strict=True)]
        ),
        value=np.concatenate([member.value for member in members]) * scale,
        depth=max(member.depth for member in members),
    )


class _Nodes:
    def __init__(self) -> None:
        self.feature: list[int] = []
        self.threshold: list[float] = []
        self.children: list[int] = []
        self.value: list[float] = []
        self.roots: list[int] = []
        self.depth = 0

    def add(self, feature: int, threshold: float, value: float) -> int:
        index = len(self.feature)
        self.feature.append(feature)
        self.threshold.append(threshold)
        self.children.extend((index, index))
        self.value.append(value)
        return index

    def ensemble(self, baseline: float) -> TreeEnsemble:
        return TreeEnsemble(
            baseline=baseline,
            roots=np.array(self.roots, dtype=np.intp),
            feature=np.array(self.feature, dtype=np.intp),
            threshold=np.array(self.threshold, dtype=np.float64),
            children=np.array(self.children, dtype=np.intp),
            value=np.array(self.value, dtype=np.float64),
            depth=self.depth,
        )


def ensemble_from_lightgbm(booster) -> TreeEnsemble:
    """A LightGBM binary booster's trees as a :class:`TreeEnsemble` (raw scores identical)."""
    nodes = _Nodes()

    def add(node: dict, depth: int) -> int:
        if "leaf_value" in node:
            nodes.depth = max(nodes.depth, depth)
            return nodes.add(0, 0.0, float(node["leaf_value"]))
        if node.get("decision_type") != "<=":
            raise ValueError(f"unsupported LightGBM split {node.get('decision_type')!r} (categorical?)")
        index = nodes.add(int(node["split_feature"]), float(node["threshold"]), 0.0)
        left = add(node["left_child"], depth + 1)
        right = add(node["right_child"], depth + 1)
        nodes.children[2 * index : 2 * index + 2] = (left, right)
        return index

    for tree in booster.dump_model()["tree_info"]:
        nodes.roots.append(add(tree["tree_structure"], 0))
    return nodes.ensemble(0.0)


def ensemble_from_sklearn(classifier) -> TreeEnsemble:
    """A fitted binary ``HistGradientBoostingClassifier`` as a :class:`TreeEnsemble` (raw scores identical).

    Reads the estimator's fitted predictors (``_predictors``, ``_baseline_prediction``): private
    attributes, pinned by a test that compares the scores with ``decision_function``.
    """
    nodes = _Nodes()
    for predictors in classifier._predictors:
        (predictor,) = predictors
        tree = predictor.nodes
        if tree["is_categorical"].any():
            raise ValueError("categorical splits are not supported")
        offset = len(nodes.feature)
        for node in tree:
            if node["is_leaf"]:
                nodes.add(0, 0.0, float(node["value"]))
            else:
                index = nodes.add(int(node["feature_idx"]), float(node["num_threshold"]), 0.0)
                nodes.children[2 * index : 2 * index + 2] = (
                    offset + int(node["left"]),
                    offset + int(node["right"]),
                )
        nodes.roots.append(offset)
        nodes.depth = max(nodes.depth, int(tree["depth"].max()))
    return nodes.ensemble(float(np.ravel(classifier._baseline_prediction)[0]))
