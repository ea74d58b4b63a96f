"""The CPU labeler's model: two gradient-boosted tree ensembles, stored as JSON and evaluated with numpy.

Stage 1 scores each block from its own features (:func:`~dripper.labelers.cpu.features.page_features`);
stage 2 rescores it from the same features plus the stage-1 scores of its neighbours and containers
(:func:`~dripper.labelers.cpu.features.context_features`). The model's decision rule turns the stage-2
probabilities into labels (``decision.py``: a threshold, or each page's expected-F1 cut); two gates leave a
page to the fallback instead: no block sure enough (``min_confidence``), or labels whose expected F1 under
the model's own probabilities is too low (``min_page_confidence``).

The ensembles are trained with LightGBM (or scikit-learn's ``HistGradientBoostingClassifier``;
``fit.py``) and exported as plain arrays (split feature, threshold, children, leaf values) into a
gzip-compressed JSON file: no pickle (nothing executes on load), no learning library at run time, and the
file records its format version, the package version, the training data and the cross-validated scores.
:meth:`TreeEnsemble.decision_function` walks all trees of a chunk of rows at once (one numpy step per tree
level); measured faster than LightGBM's own predictor and treelite's GTIL on these trees (an earlier measurement, not in the docs today).
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from dripper.labelers.base import BlockLabeler, LabelRequest, Labels, register_labeler
from dripper.labelers.cpu.blend import TrafilaturaOpinion, check_weight
from dripper.labelers.cpu.decision import check_settings, finish_labels, gate_labels
from dripper.labelers.cpu.features import (
    CONTEXT_FEATURE_NAMES,
    FEATURE_NAMES,
    PageFeatures,
    context_features,
    page_features,
)

__all__ = ["FORMAT", "CpuLabeler", "CpuModel", "TreeEnsemble", "default_model_path", "load_model"]

FORMAT = "dripper-cpu-labeler"
FORMAT_VERSION = 1
DEFAULT_MODEL = "model.json.gz"


#: Rows walked together: a (rows, trees) int32 matrix of 256 x 450 trees is 460 KB, within L2 cache.
_ROW_CHUNK = 256


class _WalkLayout(NamedTuple):
    """:class:`TreeEnsemble`'s nodes as :meth:`TreeEnsemble._walk_layout` lays them out."""

    roots: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    value: np.ndarray


class _WalkBuffers:
    """The ``(rows, trees)`` matrices of one walk, allocated once and reused for every chunk of rows."""

    def __init__(self, rows: int, trees: int) -> None:
        shape = (rows, trees)
        self.node, self.index = np.empty(shape, np.int32), np.empty(shape, np.int32)
        self.seen, self.threshold = np.empty(shape, np.float32), np.empty(shape, np.float32)
        self.right = np.empty(shape, np.bool_)

    def first(self, rows: int) -> tuple[np.ndarray, ...]:
        """Views of the first ``rows`` rows: node, feature index, feature value, threshold, goes right."""
        return tuple(a[:rows] for a in (self.node, self.index, self.seen, self.threshold, self.right))


@dataclass
class TreeEnsemble:
    """A binary-classification tree ensemble as flat node arrays (all trees concatenated).

    A sample goes left at a node when ``x[feature] <= threshold`` (NaN is read as 0, as LightGBM does for
    features trained without missing values; the features never produce NaN). Features are float32, as
    the learners saw them. Leaves are their own
    children, so ``depth`` steps take every sample to its leaf.

    Attributes:
        baseline: Raw score added to the sum of the leaf values.
        roots: Index of each tree's root node.
        feature, threshold, value: Per node (``value`` is the leaf value, 0 for split nodes).
        children: ``2 * n_nodes`` entries: ``children[2 * i]`` is node ``i``'s left child, ``[2 * i + 1]``
            its right child.
        depth: The deepest leaf's depth.
    """

    baseline: float
    roots: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    children: np.ndarray
    value: np.ndarray
    depth: int
    _layout: _WalkLayout | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def n_trees(self) -> int:
        return int(self.roots.shape[0])

    @property
    def n_nodes(self) -> int:
        return int(self.feature.shape[0])

    def decision_function(self, features: np.ndarray) -> np.ndarray:
        """Raw scores (log-odds) of ``features`` ``(n_samples, n_features)``, read as float32.

        All trees of a chunk of rows are walked at once, one numpy step per tree level, on the layout of
        :meth:`_walk_layout`; every buffer is allocated once per call and reused (``out=``), so a step is
        a handful of passes over a ``(rows, trees)`` matrix that stays in cache. The leaf values are summed
        in tree order, so the scores are the same floats as a walk over the stored arrays.
        """
        x = np.nan_to_num(np.ascontiguousarray(features, dtype=np.float32), nan=0.0)
        n, width = x.shape
        if n == 0 or self.n_trees == 0:
            return np.full(n, self.baseline)
        layout = self._walk_layout()
        chunk = min(n, _ROW_CHUNK)
        buffers = _WalkBuffers(chunk, self.n_trees)
        row_offsets = (np.arange(chunk, dtype=np.int32) * width)[:, None]
        scores = np.empty(n)
        for start in range(0, n, chunk):
            rows = x[start : start + chunk]
            size = rows.shape[0]
            flat = rows.ravel()
            node, index, seen, threshold, right = buffers.first(size)
            node[...] = layout.roots
            for _ in range(self.depth):
                # mode="clip": the indices are valid by construction; clipping skips numpy's bounds checks.
                np.take(layout.feature, node, out=index, mode="clip")
                index += row_offsets[:size]
                np.take(flat, index, out=seen, mode="clip")
                np.take(layout.threshold, node, out=threshold, mode="clip")
                np.greater(seen, threshold, out=right)
                np.take(layout.left, node, out=node, mode="clip")
                node += right
            scores[start : start + size] = layout.value.take(node).sum(axis=1)
        return scores + self.baseline

    def _walk_layout(self) -> _WalkLayout:
        """The nodes renumbered for the walk: each split's right child right after its left child.

        A step is then ``node = left[node] + (x[feature[node]] > threshold[node])``, with no lookup of the
        right child. A leaf is its own left child with an infinite threshold, so it stays where it is.
        Thresholds are float32 (half the memory traffic): for a float32 ``x``, ``x <= t`` equals
        ``x <= t32`` where ``t32`` is the largest float32 not above ``t`` (rounding ``t`` to float32 and
        stepping down where it rounded up keeps every split).
        """
        if self._layout is not None:
            return self._layout
        children = self.children.reshape(-1, 2)
        is_leaf = children[:, 0] == np.arange(self.n_nodes)
        new_of = np.full(self.n_nodes, -1, dtype=np.int64)
        order: list[int] = []  # old index of each new node

        def place(old: int) -> None:
            new_of[old] = len(order)
            order.append(old)

        for root in self.roots.tolist():
            place(root)
            queue = [root]
            while queue:  # both children of a split are placed together, left first
                old = queue.pop()
                if not is_leaf[old]:
                    left, right = children[old].tolist()
                    place(left)
                    place(right)
                    queue += (left, right)
        old = np.asarray(order, dtype=np.int64)
        threshold = self.threshold[old].astype(np.float32)
        rounded_up = threshold.astype(np.float64) > self.threshold[old]
        threshold[rounded_up] = np.nextafter(threshold[rounded_up], np.float32(-np.inf))
        leaf = is_leaf[old]
        threshold[leaf] = np.inf
        left = np.where(leaf, np.arange(old.size), new_of[children[old, 0]])
        self._layout = _WalkLayout(
            roots=new_of[self.roots].astype(np.int32),
            feature=np.where(leaf, 0, self.feature[old]).astype(np.int32),
            threshold=threshold,
            left=left.astype(np.int32),
            value=self.value[old],
        )
        return self._layout

    def predict_proba(self, features: np.ndarray) -> np.ndarray:
        """Probabilities of the positive class."""
        return 1.0 / (1.0 + np.exp(-self.decision_function(features)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "depth": self.depth,
            "roots": self.roots.tolist(),
            "feature": self.feature.tolist(),
            "threshold": self.threshold.tolist(),
            "children": self.children.tolist(),
            "value": self.value.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TreeEnsemble:
        ensemble = cls(
            baseline=float(data["baseline"]),
            roots=np.asarray(data["roots"], dtype=np.intp),
            feature=np.asarray(data["feature"], dtype=np.intp),
            threshold=np.asarray(data["threshold"], dtype=np.float64),
            children=np.asarray(data["children"], dtype=np.intp),
            value=np.asarray(data["value"], dtype=np.float64),
            depth=int(data["depth"]),
        )
        ensemble.validate()
        return ensemble

    def validate(self, n_features: int | None = None) -> None:
        """Check that the arrays describe trees (raises ``ValueError`` naming what is wrong)."""
        n_nodes = self.n_nodes
        for name, size in (("threshold", n_nodes), ("value", n_nodes), ("children", 2 * n_nodes)):
            if getattr(self, name).shape != (size,):
                raise ValueError(f"tree ensemble: {name} has {getattr(self, name).shape} entries, not {size}")
        for name in ("roots", "children"):
            array = getattr(self, name)
            if array.size and (array.min() < 0 or array.max() >= n_nodes):
                raise ValueError(f"tree ensemble: {name} points outside the {n_nodes} nodes")
        if self.feature.size and self.feature.min() < 0:
            raise ValueError("tree ensemble: negative feature index")
        if n_features is not None and self.feature.size and self.feature.max() >= n_features:
            raise ValueError(f"tree ensemble uses feature {self.feature.max()} of {n_features}")
        if self.depth < 0 or self.depth > 64:
            raise ValueError(f"tree ensemble: depth {self.depth} out of range")


@dataclass
class CpuModel:
    """The two stages, the decision threshold and the record of how the model was made.

    Attributes:
        stage1: Ensemble over :data:`FEATURE_NAMES`.
        stage2: Ensemble over ``FEATURE_NAMES + CONTEXT_FEATURE_NAMES``, or ``None`` (stage 1 decides).
        threshold: Probability at or above which a block is main (``decision="threshold"``).
        min_confidence: Pages where no block reaches this probability are left to the fallback.
        metadata: Format, versions, training data, parameters, cross-validated scores.
        decision: How probabilities become labels (:data:`~dripper.labelers.cpu.decision.DECISIONS`).
        min_page_confidence: Pages whose labels' expected F1 under the model's probabilities is below
            this are left to the fallback too (0: no such gate).
    """

    stage1: TreeEnsemble
    stage2: TreeEnsemble | None
    threshold: float = 0.5
    min_confidence: float = 0.7
    metadata: dict[str, Any] = field(default_factory=dict)
    decision: str = "threshold"
    min_page_confidence: float = 0.0

    def _staged(self, pages: Sequence[PageFeatures]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Stage-1 and stage-2 logits of all blocks of ``pages`` stacked, and the page split points; ``None``
        without blocks. Without a stage 2, stage 1's logits stand for both."""
        sizes = [page.n_blocks for page in pages]
        if not sum(sizes):
            return None
        splits = np.cumsum(sizes)[:-1]
        stacked = np.concatenate([page.values for page in pages])
        first = self.stage1.decision_function(stacked)
        if self.stage2 is None:
            return first, first, splits
        probability = 1.0 / (1.0 + np.exp(-first))
        context = np.concatenate(
            [context_features(page, p) for page, p in zip(pages, np.split(probability, splits), strict=True)]
        )
        return first, self.stage2.decision_function(np.concatenate([stacked, context], axis=1)), splits

    def probabilities(self, pages: Sequence[PageFeatures]) -> list[np.ndarray]:
        """Main-content probability of every block of every page (one batched pass per stage)."""
        staged = self._staged(pages)
        if staged is None:
            return [np.zeros(0) for _ in pages]
        _, second, splits = staged
        return np.split(1.0 / (1.0 + np.exp(-second)), splits)

    def stage_logits(self, pages: Sequence[PageFeatures]) -> list[np.ndarray]:
        """Per page, ``(n_blocks, 2)`` float32: the stage-1 and stage-2 logits of its blocks (what
        :meth:`probabilities` reads stage 2's of), for a model stacked on the trees."""
        staged = self._staged(pages)
        if staged is None:
            return [np.zeros((page.n_blocks, 2), np.float32) for page in pages]
        first, second, splits = staged
        return np.split(np.stack([first, second], axis=1).astype(np.float32), splits)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "feature_names": list(FEATURE_NAMES),
            "context_feature_names": list(CONTEXT_FEATURE_NAMES),
            "threshold": self.threshold,
            "min_confidence": self.min_confidence,
            "decision": self.decision,
            "min_page_confidence": self.min_page_confidence,
            "metadata": self.metadata,
            "stage1": self.stage1.to_dict(),
            "stage2": self.stage2.to_dict() if self.stage2 is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "model") -> CpuModel:
        if data.get("format") != FORMAT:
            raise ValueError(f"{where}: not a CPU labeler model (format {data.get('format')!r})")
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{where}: model format version {data.get('format_version')} but this code reads "
                f"{FORMAT_VERSION}; retrain it with `dripper train-labeler`"
            )
        if tuple(data.get("feature_names", ())) != FEATURE_NAMES or tuple(
            data.get("context_feature_names", ())
        ) != (CONTEXT_FEATURE_NAMES):
            raise ValueError(
                f"{where}: the model was trained on other features than this code computes; "
                "retrain it with `dripper train-labeler`"
            )
        stage1 = TreeEnsemble.from_dict(data["stage1"])
        stage1.validate(len(FEATURE_NAMES))
        stage2 = None
        if data.get("stage2") is not None:
            stage2 = TreeEnsemble.from_dict(data["stage2"])
            stage2.validate(len(FEATURE_NAMES) + len(CONTEXT_FEATURE_NAMES))
        # Files written before the rule and the page gate were named used the threshold and no page gate.
        try:
            settings = {
                "threshold": float(data.get("threshold", 0.5)),
                "min_confidence": float(data.get("min_confidence", 0.0)),
                "min_page_confidence": float(data.get("min_page_confidence", 0.0)),
                "decision": str(data.get("decision", "threshold")),
            }
            check_settings(**settings)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
        return cls(stage1, stage2, metadata=dict(data.get("metadata") or {}), **settings)

    def save(self, path: str | Path) -> Path:
        """Write the model as JSON (gzip-compressed when ``path`` ends in ``.gz``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)
        if path.suffix == ".gz":
            # mtime=0: the same model gives the same bytes.
            with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as out:
                out.write(text.encode("utf-8"))
        else:
            path.write_text(text, encoding="utf-8")
        return path


def default_model_path() -> Path:
    """The model shipped in the package (``dripper/resources/cpu_labeler/model.json.gz``)."""
    return Path(str(resources.files("dripper") / "resources" / "cpu_labeler" / DEFAULT_MODEL))


def load_model(path: str | Path | None = None) -> CpuModel:
    """Load a model file (default: the shipped one).

    Raises:
        FileNotFoundError: no such file (with how to make one).
        ValueError: the file is not a model this code can use.
    """
    path = Path(path) if path is not None else default_model_path()
    if not path.exists():
        raise FileNotFoundError(
            f"CPU labeler model {path} does not exist; train one with "
            "`dripper train-labeler --data PAGES.jsonl.gz --output MODEL.json.gz`"
        )
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a JSON model file ({error})") from error
    return CpuModel.from_dict(data, where=str(path))


@lru_cache(maxsize=4)
def _cached_model(path: str) -> CpuModel:
    return load_model(path)


@register_labeler("cpu")
class CpuLabeler(BlockLabeler):
    """Labels blocks with the shipped gradient-boosted tree model; no GPU, no download.

    Args:
        model: A model file path or a loaded :class:`CpuModel` (default: the shipped model).
        threshold: Override the model's decision threshold; given without ``decision``, it also selects
            the threshold rule (a threshold asked for is a threshold used).
        min_confidence: When no block of a page reaches this probability, the labeler declines the page
            (``Labels.failed``, reason ``low confidence``) and the pipeline's fallback (Trafilatura by
            default) extracts it: on such pages the model is usually wrong. ``0`` labels every page.
        min_page_confidence: The labeler also declines a page (same reason) when the expected F1 of its
            labels under the model's probabilities is below this: the model is unsure of much of the
            page, as on a kind of page it was not trained on. ``0`` turns this gate off.
        decision: Override the model's decision rule: ``threshold`` or ``expected_f1`` (each page's
            selection of blocks that maximises its expected F1; see ``decision.py``).
        trafilatura_weight: With w > 0, pages that pass the gates are labelled from ``(1 - w) · p + w · t``,
            ``t`` being Trafilatura's extraction projected onto the blocks (``blend.py``): a second opinion
            at the cost of a Trafilatura run per page. ``0`` (default): the model alone.

    ``Labels.confidence`` holds each block's probability of being main, ``Labels.page_confidence`` the
    expected character F1 of the page's labels under those probabilities (the model's own estimate of
    how well it did; given on declined pages too, for the labels it would have given). :attr:`seconds`
    adds up the wall time spent in ``features``, ``trees`` (both stages) and ``second_opinion`` (Trafilatura
    and the blend, with ``trafilatura_weight``) over the labeler's life.
    """

    name = "cpu"

    def __init__(
        self,
        model: str | Path | CpuModel | None = None,
        threshold: float | None = None,
        min_confidence: float | None = None,
        decision: str | None = None,
        min_page_confidence: float | None = None,
        trafilatura_weight: float | None = None,
    ) -> None:
        super().__init__()
        if isinstance(model, CpuModel):
            self.model = model
        else:
            path = Path(model) if model is not None else default_model_path()
            self.model = _cached_model(str(path.resolve()))
        self.threshold = float(self.model.threshold if threshold is None else threshold)
        self.min_confidence = float(self.model.min_confidence if min_confidence is None else min_confidence)
        self.min_page_confidence = float(
            self.model.min_page_confidence if min_page_confidence is None else min_page_confidence
        )
        if decision is None:
            decision = "threshold" if threshold is not None else self.model.decision
        self.decision = str(decision)
        check_settings(self.threshold, self.min_confidence, self.min_page_confidence, self.decision)
        self.trafilatura_weight = check_weight(trafilatura_weight)
        self._opinion = TrafilaturaOpinion(self.trafilatura_weight) if self.trafilatura_weight else None
        self.seconds = {"features": 0.0, "trees": 0.0, "second_opinion": 0.0}

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        # The model path is not checked here: on a cluster it may exist on the workers only.
        check_settings(
            options.get("threshold"),
            options.get("min_confidence"),
            options.get("min_page_confidence"),
            options.get("decision"),
        )
        check_weight(options.get("trafilatura_weight"))

    def label_batch(self, requests: Sequence[LabelRequest]) -> list[Labels]:
        results: list[Labels | None] = [None] * len(requests)
        ready: list[tuple[int, PageFeatures]] = []
        started = time.perf_counter()
        for index, request in enumerate(requests):
            try:
                ready.append((index, page_features(request.simplified)))
            except Exception as error:  # one page's odd DOM goes to the fallback, not the batch
                results[index] = Labels.failed(f"cpu features failed: {type(error).__name__}: {error}"[:300])
        featured = time.perf_counter()
        probabilities = self.model.probabilities([features for _, features in ready])
        self.seconds["features"] += featured - started
        self.seconds["trees"] += time.perf_counter() - featured
        for (index, features), p in zip(ready, probabilities, strict=True):
            results[index] = gate_labels(
                p,
                features.chars,
                self.threshold,
                self.decision,
                self.min_confidence,
                self.min_page_confidence,
            )
        if self._opinion is not None:
            opinion_started = time.perf_counter()
            self._second_opinion(requests, ready, probabilities, results)
            self.seconds["second_opinion"] += time.perf_counter() - opinion_started
        return [result for result in results if result is not None]

    def _second_opinion(self, requests, ready, probabilities, results: list) -> None:
        """Relabel the pages that passed the gates from the model's and Trafilatura's blended view."""
        kept = [
            (index, features, p)
            for (index, features), p in zip(ready, probabilities, strict=True)
            if results[index].main is not None
        ]
        blended = self._opinion.blend([requests[index] for index, _, _ in kept], [p for _, _, p in kept])
        for (index, features, _), q in zip(kept, blended, strict=True):
            main = finish_labels(q, features.chars, self.threshold, decision=self.decision)
            results[index] = replace(results[index], main=main)
