"""Training pages for the CPU labeler: dev-format records → block features and ``oracle`` labels.

Each full-text page is simplified, its blocks get :func:`~dripper_core.labelers.cpu.features.page_features`
and the ``oracle`` alignment of its ground truth as labels. Snippet-only pages are not used for training:
their ground truth names a few strings that must (not) appear, so every block the snippets miss would be
labelled "other" whatever it is.

Pages are grouped by *site* for cross-validation (the URL's registrable domain, else the page's canonical
or ``og:url`` host, else the host most of its absolute links point to, else the page itself): pages of one
site share a template, and a model tested on a site it was trained on is judged too kindly.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from dripper_core.labelers.cpu.decision import check_settings
from dripper_core.labelers.cpu.features import PageFeatures, context_features, page_features
from dripper_core.labelers.cpu.model import CpuModel, TreeEnsemble
from dripper_core.labelers.oracle import align_blocks

__all__ = ["PageExample", "TrainingSet", "build_training_set", "iter_records", "site_of"]

_CANONICAL = re.compile(
    r"""<link[^>]+rel=["']?canonical["']?[^>]*href=["']([^"']+)"""
    r"""|<meta[^>]+property=["']og:url["'][^>]*content=["']([^"']+)"""
    r"""|<link[^>]+href=["']([^"']+)["'][^>]*rel=["']?canonical""",
    re.IGNORECASE,
)
_ABSOLUTE_LINK = re.compile(r"""href=["'](https?://[^"'/?#]+)""", re.IGNORECASE)
MIN_ORACLE_RECALL = 0.5
"""Pages whose main blocks (per the oracle) hold less of their ground truth than this are not trained on."""
_SECOND_LEVEL = frozenset({"co", "com", "org", "net", "ac", "gov", "edu", "ne", "or", "go"})


@dataclass(slots=True)
class PageExample:
    """One training page: its blocks' features and oracle labels.

    Attributes:
        doc_id: The record's ``id``.
        source: The record's ``source`` (collection).
        page_type: The record's ``page_type`` (dev_hard's WCXB pages), or ``None``.
        site: The group key for cross-validation (see :func:`site_of`).
        features: The blocks' features.
        labels: ``(n_blocks,)`` bool, the oracle's main/other.
    """

    doc_id: str
    source: str
    page_type: str | None
    site: str
    features: PageFeatures
    labels: np.ndarray

    @property
    def n_blocks(self) -> int:
        return self.features.n_blocks


@dataclass
class TrainingSet:
    """The pages used for training and what was read to make them.

    Attributes:
        pages: The usable pages, in file order.
        files: Per input file: ``path`` (as given), ``sha256``, ``records``, ``used``.
        skipped: Pages not used, counted by reason.
    """

    pages: list[PageExample]
    files: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)

    def summary(self) -> dict:
        """Counts for the model's metadata: pages and blocks per source, files, skipped pages by reason."""
        per_source: Counter = Counter(page.source for page in self.pages)
        return {
            "files": self.files,
            "pages": len(self.pages),
            "blocks": int(sum(page.n_blocks for page in self.pages)),
            "main_blocks": int(sum(int(page.labels.sum()) for page in self.pages)),
            "sites": len({page.site for page in self.pages}),
            "pages_per_source": dict(sorted(per_source.items())),
            "skipped": dict(self.skipped),
        }


def iter_records(path: str | Path) -> Iterator[dict]:
    """The JSON records of a dev-format JSONL file (plain or gzip): the project's one reader
    (:func:`dripper_core.io.jsonl.iter_json_records`), which names the file and line of any damage."""
    from dripper_core.io.jsonl import iter_json_records

    yield from iter_json_records(path)


def _registrable(host: str) -> str:
    host = host.lower().split(":")[0].removeprefix("www.")
    labels = host.split(".")
    if len(labels) >= 3 and labels[-2] in _SECOND_LEVEL and len(labels[-1]) == 2:
        return ".".join(labels[-3:])
    return ".".join(labels[-2:])


def site_of(record: dict) -> str:
    """The record's site (for grouping): registrable domain of its URL, canonical URL or usual link host."""
    url = record.get("url")
    host = urlsplit(url).netloc if url else ""
    html = record.get("html") or ""
    if not host:
        match = _CANONICAL.search(html)
        if match:
            host = urlsplit(next(group for group in match.groups() if group)).netloc
    if not host:
        hosts = Counter(urlsplit(link).netloc for link in _ABSOLUTE_LINK.findall(html[:300_000]))
        if hosts:
            host = hosts.most_common(1)[0][0]
    if host and "web.archive.org" not in host:
        return _registrable(host)
    return f"page:{record.get('source')}:{record.get('id')}"


def _example(record: dict) -> PageExample | str:
    """The page's :class:`PageExample`, or why it cannot be used."""
    from dripper_core.simplify import simplify_html

    ground_truth = record.get("ground_truth_text")
    if not ground_truth or not ground_truth.strip():
        return "no full-text ground truth"
    html = record.get("html")
    if not isinstance(html, str) or not html.strip():
        return "no html"
    try:
        simplified = simplify_html(html, str(record.get("id")), record.get("url"))
    except Exception as error:  # a page the simplifier rejects is a page the labeler never sees
        return f"simplify failed: {type(error).__name__}"
    if simplified.n_blocks == 0:
        return "no blocks"
    alignment = align_blocks(ground_truth, [block.text for block in simplified.blocks])
    if not any(alignment.main):
        return "oracle found no main block"
    if alignment.ground_truth_recall < MIN_ORACLE_RECALL:
        # The ground truth is mostly not in the page's blocks (a challenge page, another version of the
        # page): its labels would teach noise.
        return "oracle covers too little of the ground truth"
    return PageExample(
        doc_id=str(record.get("id")),
        source=str(record.get("source") or "unknown"),
        page_type=record.get("page_type"),
        site=site_of(record),
        features=page_features(simplified),
        labels=np.array(alignment.main, dtype=bool),
    )


def _examples(records: list[dict]) -> list[PageExample | str]:
    return [_example(record) for record in records]


def _batches(records: Iterable[dict], size: int) -> Iterator[list[dict]]:
    batch: list[dict] = []
    for record in records:
        batch.append(record)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def build_training_set(
    paths: Sequence[str | Path],
    workers: int = 1,
    exclude_ids: Iterable[str] = (),
    limit: int | None = None,
    progress: bool = False,
) -> TrainingSet:
    """Simplify, label (``oracle``) and featurise the full-text pages of dev-format files.

    Args:
        paths: JSONL(.gz) files of ``{id, html, url, ground_truth_text, source, page_type…}`` records.
        workers: Processes to use (1: this process).
        exclude_ids: Record ids to leave out (e.g. the bundled sample pages, kept for an honest test).
        limit: Read at most this many records per file.
        progress: Print a line per file to stderr.

    Returns:
        The :class:`TrainingSet`, pages in file order.
    """
    import sys

    excluded = set(exclude_ids)
    training = TrainingSet(pages=[])
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"training data {path} does not exist")
        records = []
        for record in iter_records(path):
            if limit is not None and len(records) >= limit:
                break
            if str(record.get("id")) in excluded:
                training.skipped["excluded id"] += 1
                continue
            records.append(record)
        if workers > 1:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                results = [item for batch in pool.map(_examples, _batches(records, 16)) for item in batch]
        else:
            results = _examples(records)
        used = 0
        for result in results:
            if isinstance(result, str):
                training.skipped[result] += 1
            else:
                training.pages.append(result)
                used += 1
        training.files.append(
            {"path": str(path), "sha256": _file_sha256(path), "records": len(records), "used": used}
        )
        if progress:
            print(f"{path}: {len(records)} records, {used} used", file=sys.stderr)
    return training


# -- folds ------------------------------------------------------------------------------------------------

GROUPINGS = ("site", "page", "source")


def assign_folds(pages: Sequence[PageExample], folds: int, seed: int = 0, by: str = "site") -> np.ndarray:
    """Fold number of every page; pages of one group (site, page or source) share a fold.

    ``by="source"`` gives one fold per source (leave-one-source-out; ``folds`` is ignored). Otherwise the
    groups of each source are dealt, largest first (ties in a seeded random order), to the fold holding the
    fewest of that source's blocks, so every fold has a share of every source.
    """
    if by not in GROUPINGS:
        raise ValueError(f"grouping {by!r}: choose one of {GROUPINGS}")
    if by == "source":
        sources = sorted({page.source for page in pages})
        return np.array([sources.index(page.source) for page in pages], dtype=np.int64)
    if folds < 2:
        raise ValueError(f"need at least 2 folds, got {folds}")
    key = (lambda page: page.site) if by == "site" else (lambda page: f"{page.source}:{page.doc_id}")
    groups: dict[str, list[int]] = {}
    for index, page in enumerate(pages):
        groups.setdefault(key(page), []).append(index)
    rng = np.random.default_rng(seed)
    tiebreak = {
        name: float(value) for name, value in zip(sorted(groups), rng.random(len(groups)), strict=True)
    }
    by_source: dict[str, list[str]] = {}
    for name, members in groups.items():
        majority = Counter(pages[i].source for i in members).most_common(1)[0][0]
        by_source.setdefault(majority, []).append(name)
    fold_of = np.zeros(len(pages), dtype=np.int64)
    for source in sorted(by_source):
        load = np.zeros(folds)
        names = sorted(
            by_source[source],
            key=lambda name: (-sum(pages[i].n_blocks for i in groups[name]), tiebreak[name]),
        )
        for name in names:
            fold = int(np.argmin(load))
            for index in groups[name]:
                fold_of[index] = fold
            load[fold] += sum(pages[i].n_blocks for i in groups[name])
    return fold_of


# -- fitting ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainParams:
    """Hyper-parameters of both stages (LightGBM names; the scikit-learn backend maps them).

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
    source_balance: float = 0.5
    two_stage: bool = True
    threads: int = 2
    backend: str = "auto"
    bags: int = 3
    bag_sites: float = 0.8
    threshold: float = 0.5
    min_confidence: float = 0.7
    decision: str = "threshold"
    min_page_confidence: float = 0.0

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds {self.rounds}: need at least 1")
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
    mean over pages), spread over its text blocks by characters (``char_weight``) and evenly (the rest)."""
    chars = page.features.chars.astype(np.float64)
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
    multipliers = page_multipliers(pages, indexes, params.source_balance)
    for index, multiplier in zip(indexes, multipliers, strict=True):
        page = pages[index]
        keep = page.features.chars > 0
        values = page.features.values
        if stage1 is not None:
            values = np.concatenate([values, context_features(page.features, stage1[index])], axis=1)
        matrices.append(values[keep])
        labels.append(page.labels[keep])
        weights.append(block_weights(page, params.char_weight)[keep] * multiplier)
    return np.concatenate(matrices), np.concatenate(labels), np.concatenate(weights)


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


def _fit(
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


# -- cross-validation and training ------------------------------------------------------------------------


@dataclass
class CrossValidation:
    """Out-of-fold results.

    Attributes:
        fold_of: Fold of every training page.
        models: The model of each fold (trained without that fold's pages).
        probabilities: Per training page, the probabilities its fold's model gives its blocks.
        stage1: Per training page, the stage-1 probabilities of its fold's stage-1 model.
        by: The grouping (``site``, ``page`` or ``source``).
        sources: For ``by="source"``, the source of each fold.
    """

    fold_of: np.ndarray
    models: list[CpuModel]
    probabilities: list[np.ndarray]
    stage1: list[np.ndarray]
    by: str
    sources: list[str] = field(default_factory=list)

    def model_for(self, site: str, source: str, pages: Sequence[PageExample]) -> CpuModel:
        """The fold model that saw neither this site nor (``by="source"``) this source."""
        if self.by == "source":
            if source in self.sources:
                return self.models[self.sources.index(source)]
            return self.models[int(np.argmin([sum(p.source == s for p in pages) for s in self.sources]))]
        for page, fold in zip(pages, self.fold_of, strict=True):
            if page.site == site:
                return self.models[int(fold)]
        return self.models[0]


def _log(message: str, quiet: bool) -> None:
    if not quiet:
        import sys
        import time

        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _predict(ensemble: TreeEnsemble, pages: Sequence[PageExample], indexes: Iterable[int]) -> dict:
    indexes = list(indexes)
    if not indexes:
        return {}
    stacked = np.concatenate([pages[i].features.values for i in indexes])
    probabilities = ensemble.predict_proba(stacked)
    splits = np.cumsum([pages[i].n_blocks for i in indexes])[:-1]
    return dict(zip(indexes, np.split(probabilities, splits), strict=True))


def cross_validate(
    pages: Sequence[PageExample],
    params: TrainParams,
    folds: int = 5,
    seed: int = 0,
    by: str = "site",
    quiet: bool = False,
) -> CrossValidation:
    """Grouped K-fold cross-validation of the two-stage model.

    Stage 2 must be trained on stage-1 probabilities of pages the stage-1 model did not see. For outer fold
    ``f`` those come from models trained without ``f`` and the page's own fold ``g``; the model without
    ``{f, g}`` serves both outer folds, so K·(K−1)/2 + K stage-1 fits and K stage-2 fits suffice.
    """
    fold_of = assign_folds(pages, folds, seed, by)
    k = int(fold_of.max()) + 1
    if params.two_stage and k < 3:
        raise ValueError(f"cross-validating the two-stage model needs at least 3 folds, got {k}")
    members = [np.flatnonzero(fold_of == fold) for fold in range(k)]
    everything = np.arange(len(pages))
    without: dict[frozenset, TreeEnsemble] = {}
    for f in range(k):
        _log(f"fold {f + 1}/{k}: stage 1 ({len(members[f])} pages held out)", quiet)
        without[frozenset([f])] = _fit(pages, everything[fold_of != f], params, seed)
    stage1_test: dict[int, np.ndarray] = {}
    for f in range(k):
        stage1_test.update(_predict(without[frozenset([f])], pages, members[f]))
    models: list[CpuModel] = []
    probabilities: dict[int, np.ndarray] = {}
    for f in range(k):
        stage1 = without[frozenset([f])]
        if not params.two_stage:
            models.append(CpuModel(stage1, None, **params.decision_settings()))
            probabilities.update({i: stage1_test[i] for i in members[f]})
            continue
        inner: dict[int, np.ndarray] = {}
        for g in range(k):
            if g == f:
                continue
            pair = frozenset([f, g])
            if pair not in without:
                _log(f"stage 1 without folds {f + 1} and {g + 1}", quiet)
                keep = everything[(fold_of != f) & (fold_of != g)]
                without[pair] = _fit(pages, keep, params, seed)
            inner.update(_predict(without[pair], pages, members[g]))
        _log(f"fold {f + 1}/{k}: stage 2", quiet)
        training = everything[fold_of != f]
        stage2 = _fit(pages, training, params, seed, inner)
        model = CpuModel(stage1, stage2, **params.decision_settings())
        models.append(model)
        for index in members[f]:
            page = pages[index]
            context = context_features(page.features, stage1_test[index])
            probabilities[index] = stage2.predict_proba(
                np.concatenate([page.features.values, context], axis=1)
            )
    sources = sorted({page.source for page in pages}) if by == "source" else []
    return CrossValidation(
        fold_of=fold_of,
        models=models,
        probabilities=[probabilities[i] for i in range(len(pages))],
        stage1=[stage1_test[i] for i in range(len(pages))],
        by=by,
        sources=sources,
    )


def fit_model(
    pages: Sequence[PageExample],
    params: TrainParams,
    folds: int = 5,
    seed: int = 0,
    stage1_oof: Sequence[np.ndarray] | None = None,
    quiet: bool = False,
) -> CpuModel:
    """The model trained on all ``pages``.

    Stage 2 is trained on out-of-fold stage-1 probabilities: ``stage1_oof`` when given (from
    :func:`cross_validate`), else computed here with ``folds`` site-grouped folds.
    """
    everything = np.arange(len(pages))
    _log(f"stage 1 on all {len(pages)} pages", quiet)
    stage1 = _fit(pages, everything, params, seed)
    decision = params.decision_settings()
    if not params.two_stage:
        return CpuModel(stage1, None, **decision)
    if stage1_oof is None:
        fold_of = assign_folds(pages, folds, seed, "site")
        oof: dict[int, np.ndarray] = {}
        for f in range(int(fold_of.max()) + 1):
            _log(f"stage 1 without fold {f + 1}/{folds} (for stage 2)", quiet)
            ensemble = _fit(pages, everything[fold_of != f], params, seed)
            oof.update(_predict(ensemble, pages, np.flatnonzero(fold_of == f)))
        stage1_oof = [oof[i] for i in everything]
    _log("stage 2 on all pages", quiet)
    stage2 = _fit(pages, everything, params, seed, dict(enumerate(stage1_oof)))
    return CpuModel(stage1, stage2, **decision)


# -- block-level scores -----------------------------------------------------------------------------------


def page_scores(page: PageExample, probabilities: np.ndarray, threshold: float = 0.5) -> dict[str, float]:
    """Character-weighted precision, recall and F1 of the predicted main blocks against the oracle's."""
    chars = page.features.chars.astype(np.float64)
    predicted = probabilities >= threshold
    true_positive = float(chars[predicted & page.labels].sum())
    predicted_chars = float(chars[predicted].sum())
    label_chars = float(chars[page.labels].sum())
    precision = true_positive / predicted_chars if predicted_chars else float(label_chars == 0)
    recall = true_positive / label_chars if label_chars else 1.0
    f1 = 2 * true_positive / (predicted_chars + label_chars) if predicted_chars + label_chars else 1.0
    return {"precision": precision, "recall": recall, "f1": f1}


def score_report(
    pages: Sequence[PageExample], probabilities: Sequence[np.ndarray], threshold: float = 0.5
) -> dict[str, dict[str, float]]:
    """Mean page scores (see :func:`page_scores`) overall, per source and per WCXB page type."""
    groups: dict[str, list[dict[str, float]]] = {}
    for page, p in zip(pages, probabilities, strict=True):
        scores = page_scores(page, p, threshold)
        keys = ["all", f"source={page.source}"]
        if page.page_type:
            keys.append(f"page_type={page.page_type}")
        for key in keys:
            groups.setdefault(key, []).append(scores)
    return {
        key: {"pages": len(rows), **{name: float(np.mean([row[name] for row in rows])) for name in rows[0]}}
        for key, rows in sorted(groups.items(), key=lambda item: (item[0] != "all", item[0]))
    }


def format_scores(report: dict[str, dict[str, float]], title: str) -> str:
    lines = [f"== {title} ==", f"{'group':32} {'pages':>6} {'char-P':>7} {'char-R':>7} {'char-F1':>7}"]
    for key, row in report.items():
        lines.append(
            f"{key:32} {row['pages']:>6d} {row['precision']:>7.3f} {row['recall']:>7.3f} {row['f1']:>7.3f}"
        )
    return "\n".join(lines)


# -- the training command ---------------------------------------------------------------------------------


def _versions(backend: str) -> dict[str, str]:
    import platform
    from importlib import metadata

    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for name in ("dripper-platform", "lightgbm" if backend == "lightgbm" else "scikit-learn"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "unknown"
    return versions


def train_labeler(
    data: Sequence[str | Path],
    output: str | Path,
    folds: int = 5,
    seed: int = 0,
    params: TrainParams | None = None,
    workers: int = 2,
    cross_validation: bool = True,
    exclude_ids: Iterable[str] = (),
    limit: int | None = None,
    quiet: bool = False,
) -> tuple[CpuModel, dict]:
    """Build the training set, cross-validate (site-grouped), train on everything and write the model.

    Args:
        data: Dev-format JSONL(.gz) files with full-text ground truth.
        output: The model file to write (``.json.gz`` or ``.json``).
        folds: Folds of the cross-validation and of stage 2's out-of-fold stage-1 scores.
        seed: Seed of the fold assignment and the learner.
        params: Hyper-parameters (defaults: :class:`TrainParams`).
        workers: Processes for building the training set.
        cross_validation: Report out-of-fold scores (adds K·(K+1)/2 fits); without it stage 2 still
            needs K out-of-fold stage-1 fits.
        exclude_ids: Page ids not to train on.
        limit: Read at most this many records per file.
        quiet: No progress lines on stderr.

    Returns:
        The model and its report (also stored in the model's metadata).
    """
    params = params or TrainParams()
    exclude_ids = set(exclude_ids)
    _log(f"building the training set from {', '.join(map(str, data))}", quiet)
    training = build_training_set(
        data, workers=workers, exclude_ids=exclude_ids, limit=limit, progress=not quiet
    )
    pages = training.pages
    if len(pages) < max(folds, 2):
        raise ValueError(f"only {len(pages)} usable training pages; need at least {max(folds, 2)}")
    report: dict = {"training_data": training.summary()}
    stage1_oof = None
    if cross_validation:
        cv = cross_validate(pages, params, folds=folds, seed=seed, by="site", quiet=quiet)
        stage1_oof = cv.stage1
        report["cross_validation"] = {
            "grouping": "site",
            "folds": folds,
            "metric": "mean over pages of character-weighted F1 of main blocks against the oracle's labels",
            "stage1": score_report(pages, cv.stage1),
            "model": score_report(pages, cv.probabilities),
        }
        if not quiet:
            import sys

            print(
                format_scores(report["cross_validation"]["model"], "out-of-fold, site-grouped"),
                file=sys.stderr,
            )
    model = fit_model(pages, params, folds=folds, seed=seed, stage1_oof=stage1_oof, quiet=quiet)
    backend = params.resolved_backend()
    model.metadata = {
        "description": "Dripper CPU labeler: two-stage gradient-boosted trees over block features",
        "trained_with": "dripper train-labeler",
        "versions": _versions(backend),
        "backend": backend,
        "params": {**asdict(params), "backend": backend},
        "folds": folds,
        "seed": seed,
        "excluded_ids": len(exclude_ids),
        "labels": "oracle alignment of ground_truth_text (dripper_core.labelers.oracle, default options)",
        **report,
    }
    path = model.save(output)
    _log(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)", quiet)
    return model, report
