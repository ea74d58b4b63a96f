"""Cross-validating and training the CPU labeler: grouped K-fold out-of-fold scores of the two-stage
model, the model fitted on every page, block-level score reports, and the ``dripper train-labeler``
command (:func:`train_labeler`).

The training pages come from :mod:`~dripper.labelers.cpu.training_set`, each stage's trees from
:mod:`~dripper.labelers.cpu.fit`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from dripper.labelers.cpu.features import context_features
from dripper.labelers.cpu.fit import TrainParams, fit_stage
from dripper.labelers.cpu.model import CpuModel, TreeEnsemble
from dripper.labelers.cpu.training_set import PageExample, assign_folds, build_training_set

__all__ = [
    "CrossValidation",
    "cross_validate",
    "fit_model",
    "format_scores",
    "page_scores",
    "score_report",
    "train_labeler",
]


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


def _training(fold_of_training: np.ndarray, held_out: int) -> np.ndarray:
    """The pages that train the models without fold ``held_out`` (``-1``: a page that trains none)."""
    return (fold_of_training != held_out) & (fold_of_training >= 0)


def cross_validate(
    pages: Sequence[PageExample],
    params: TrainParams,
    folds: int = 5,
    seed: int = 0,
    by: str = "site",
    quiet: bool = False,
    learner_seed: int | None = None,
    trainable: Sequence[bool] | None = None,
) -> CrossValidation:
    """Grouped K-fold cross-validation of the two-stage model.

    ``trainable`` (one flag per page) keeps pages out of every fold's training while they are still scored
    out of fold: what a model trained without a collection does on it and on the others.

    ``seed`` draws the folds and, unless ``learner_seed`` is given, seeds the learner: the same folds under
    other learner seeds measure how much a figure owes to the training's own randomness (LightGBM's row
    and feature sampling).

    Stage 2 must be trained on stage-1 probabilities of pages the stage-1 model did not see. For outer fold
    ``f`` those come from models trained without ``f`` and the page's own fold ``g``; the model without
    ``{f, g}`` serves both outer folds, so K·(K−1)/2 + K stage-1 fits and K stage-2 fits suffice.
    """
    fold_of = assign_folds(pages, folds, seed, by)
    seed = seed if learner_seed is None else learner_seed
    k = int(fold_of.max()) + 1
    if params.two_stage and k < 3:
        raise ValueError(f"cross-validating the two-stage model needs at least 3 folds, got {k}")
    members = [np.flatnonzero(fold_of == fold) for fold in range(k)]
    everything = np.arange(len(pages))
    if trainable is not None:  # a fold's training pages: outside the fold and trainable
        fold_of_training = np.where(np.asarray(trainable, dtype=bool), fold_of, -1)
    else:
        fold_of_training = fold_of
    without: dict[frozenset, TreeEnsemble] = {}
    for f in range(k):
        _log(f"fold {f + 1}/{k}: stage 1 ({len(members[f])} pages held out)", quiet)
        without[frozenset([f])] = fit_stage(pages, everything[_training(fold_of_training, f)], params, seed)
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
                keep = everything[_training(fold_of_training, f) & (fold_of_training != g)]
                without[pair] = fit_stage(pages, keep, params, seed)
            inner.update(_predict(without[pair], pages, members[g]))
        _log(f"fold {f + 1}/{k}: stage 2", quiet)
        training = everything[_training(fold_of_training, f)]
        stage2 = fit_stage(pages, training, params, seed, inner)
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
    stage1 = fit_stage(pages, everything, params, seed)
    decision = params.decision_settings()
    if not params.two_stage:
        return CpuModel(stage1, None, **decision)
    if stage1_oof is None:
        fold_of = assign_folds(pages, folds, seed, "site")
        oof: dict[int, np.ndarray] = {}
        for f in range(int(fold_of.max()) + 1):
            _log(f"stage 1 without fold {f + 1}/{folds} (for stage 2)", quiet)
            ensemble = fit_stage(pages, everything[fold_of != f], params, seed)
            oof.update(_predict(ensemble, pages, np.flatnonzero(fold_of == f)))
        stage1_oof = [oof[i] for i in everything]
    _log("stage 2 on all pages", quiet)
    stage2 = fit_stage(pages, everything, params, seed, dict(enumerate(stage1_oof)))
    return CpuModel(stage1, stage2, **decision)


# -- block-level scores -----------------------------------------------------------------------------------


def page_scores(
    page: PageExample,
    probabilities: np.ndarray | None,
    threshold: float = 0.5,
    selected: np.ndarray | None = None,
) -> dict[str, float]:
    """Character-weighted precision, recall and F1 of the predicted main blocks against the oracle's: the
    ``selected`` blocks when given (another decision rule's), else those at or above ``threshold``."""
    chars = page.features.chars.astype(np.float64)
    predicted = np.asarray(selected, dtype=bool) if selected is not None else probabilities >= threshold
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
    """Mean page scores (see :func:`page_scores`) overall, per source and per WCXB page type, over the
    fully labelled pages (a snippet page has no block-level score)."""
    groups: dict[str, list[dict[str, float]]] = {}
    for page, p in zip(pages, probabilities, strict=True):
        if page.partial:
            continue
        scores = page_scores(page, p, threshold)
        for key in report_groups(page):
            groups.setdefault(key, []).append(scores)
    return {
        key: {"pages": len(rows), **{name: float(np.mean([row[name] for row in rows])) for name in rows[0]}}
        for key, rows in sorted(groups.items(), key=lambda item: report_order(item[0]))
    }


def report_groups(page: PageExample) -> list[str]:
    """The report rows a page counts in: ``all``, its source and (WCXB) its page type."""
    keys = ["all", f"source={page.source}"]
    if page.page_type:
        keys.append(f"page_type={page.page_type}")
    return keys


def report_order(key: str) -> tuple[bool, str]:
    """Sort key of report rows: ``all`` first, then by name."""
    return key != "all", key


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
    exclude_sources: Iterable[str] = (),
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
        exclude_sources: Collections (records' ``source``) not to train on; named in the metadata.
        quiet: No progress lines on stderr.

    Returns:
        The model and its report (also stored in the model's metadata).
    """
    params = params or TrainParams()
    exclude_ids = set(exclude_ids)
    _log(f"building the training set from {', '.join(map(str, data))}", quiet)
    exclude_sources = sorted(set(exclude_sources))
    training = build_training_set(
        data,
        workers=workers,
        exclude_ids=exclude_ids,
        limit=limit,
        progress=not quiet,
        exclude_sources=exclude_sources,
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
        "excluded_sources": exclude_sources,
        "labels": "oracle alignment of ground_truth_text (dripper.labelers.oracle, default options)",
        **report,
    }
    path = model.save(output)
    _log(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)", quiet)
    return model, report
