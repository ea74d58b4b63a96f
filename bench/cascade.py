"""The cascade, out of fold: quality against the share of pages (and of prompt tokens) sent to a second labeler.

Usage::

    .venv/bin/python bench/cascade.py [--data FILE…] [--by site source] [--cache TRAINING.pkl.gz]
        [--cv-dir DIR] [--load-cv BY=CV.pkl.gz] [--second SPEC] [--rows-dir DIR] [--out FILE.json]
        [--shared-rows ROWS] [--load-rows ROWS…] [--tokenizer DIR] [--workers N] [--limit N]

The CPU labeler labels every page; the pages it is least sure of go to a second labeler (an LM; by default
the ``oracle``, which labels from the ground truth: the ceiling of our segmentation, so the losses below are
an upper bound of what routing fewer pages costs). For every full-text page of ``--data`` (dev, dev_hard,
dev_fundus beside the checkout) this bench records, out of fold:

- the CPU labeler's end-to-end score (ROUGE-5 F1 normalised and raw, as ``eval`` scores; declined pages
  with the pipeline's fallback, Trafilatura: what the shipped extractor outputs), the page's fold model
  being the one of the labeler's grouped cross-validation (``--by site``: 5 folds grouped by site, as
  ``research.cpu_labeler_quality quality``; ``--by source``: leave one source out). The
  cross-validations are the shipped training settings' (``TrainParams()``), cached in ``--cv-dir`` or
  read from a ``quality`` run's ``--save-cv`` (``--load-cv BY=FILE``); the training set is
  ``research.labeler_sweep``'s (``--cache``);
- the second stage's score (``--second``: an extractor spec, ``oracle`` by default, e.g.
  ``qwen=vllm,model=/models/MinerU-HTML``);
- the prompt tokens the page costs the LM (the v1.1 ``compact`` prompt of its simplified HTML under the
  real Qwen tokenizer built by ``scripts/make_tiny_models.py``; without it ``ceil(chars / 3.5)``, as the
  simplify stage estimates, and the output says so);
- the routing scores (low: routed first): ``confidence`` (today: declined pages first, then
  ``page_confidence``); ``router`` (:data:`ROUTER_FEATURES`: page summaries of the CPU labeler's block
  probabilities, labels and page-level block features, read by a small LightGBM regressor of the
  labeler's page score, itself trained out of fold on the same folds as the labeler: a page's prediction
  comes from a router that saw neither its site, or its source, nor the labeler's output on them), ranked
  alone; ``router+declined``, the same after the declined pages, which is what the cascade does with a
  ``Labels.route_score`` (``dripper.routing``: declined pages first); ``router+opinion`` (declined
  first too, plus Trafilatura's agreement with the labels among the summaries: a Trafilatura run per
  page); ``router-gain`` (declined first, trained on the second stage's gain over the CPU labeler instead
  of the CPU score); and ``ideal`` (the true gain, second − CPU). With a site-grouped pass, the routers
  are also trained leave one source out on its rows (``routers leave-one-source-out``).

Measured on the dev files (2026-12-03, ``oracle`` second stage): no learned router beat ``confidence`` at
both 30 % and 50 % of the pages on both page groups, so none ships with the labeler (the report of that
session has the curves).

It prints, per grouping and page group (hard pages: dev_hard; articles: dev + dev_fundus), the mean quality
against the share of pages routed (0, 10, …, 100 %, the group's pages routed in each router's order), then
against the share of prompt tokens routed, and the loss against the all-second-stage figure at 30 % and
50 % of the pages (in points of ROUGE-5 F1, normalised and raw) with the share of tokens those pages hold.
The passes are slow (two cores: about 20 minutes per grouping, and a leave-one-source-out
cross-validation of the labeler about 45): each grouping's rows are kept in ``--rows-dir`` and can be
given back with ``--load-rows``; ``--shared-rows`` takes the second stage's scores and the tokens of
another grouping's rows (the second pass then runs the CPU labeler only).
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import hashlib
import json
import math
import pickle
import shlex
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as `python bench/cascade.py`: the checkout's `research` package

from dripper.labelers.base import BlockLabeler  # noqa: E402
from dripper.labelers.cpu.decision import expected_f1  # noqa: E402
from dripper.labelers.cpu.features import FEATURE_NAMES, PageFeatures  # noqa: E402
from research.labeler_sweep import ARTICLE_FILES, default_data, load_training, lump_spec  # noqa: E402

GROUPS = {"hard": ("dev_hard",), "articles": ARTICLE_FILES}
SHARES = tuple(range(0, 101, 10))
LOSS_AT = (30, 50)
DEFAULT_TOKENIZER = REPO / ".cache" / "models" / "qwen-tokenizer"
ROUTERS = ("confidence", "router", "router+declined", "router+opinion", "router-gain", "ideal")
_OPINION_FEATURES = ("opinion_f1", "opinion_share", "opinion_missing")

_worker: dict = {}


# -- the learned router: page summaries of the CPU labeler's output, and a small regressor ------------------


#: Page-level block features the router reads as they are (the same value on every block of a page).
_PAGE_COLUMNS = (
    "page_link_share",
    "page_dense_share",
    "page_n_articles",
    "page_n_h1",
    "page_heading_share",
    "page_max_share",
)
#: Block features the router reads as their character-weighted mean over the selected (main) blocks.
_MAIN_COLUMNS = ("link_share", "sentence_punct_share", "letter_share", "dense")

ROUTER_FEATURES: tuple[str, ...] = (
    "page_confidence",
    "best_probability",
    "declined",
    "expected_precision",
    "expected_recall",
    "selected_char_share",
    "expected_main_share",
    "unsure_char_share",
    "doubt_char_share",
    "mean_entropy",
    "log_main_chars",
    "log_blocks",
    "log_chars",
    "selected_runs",
    "largest_run_share",
    "first_selected_position",
    "last_selected_position",
    *_PAGE_COLUMNS,
    *(f"main_{name}" for name in _MAIN_COLUMNS),
)


def router_features(
    probabilities: np.ndarray, features: PageFeatures, main: Sequence[bool], declined: bool
) -> np.ndarray:
    """The :data:`ROUTER_FEATURES` of one page: its blocks' probabilities and features, the labels the
    labeler gave (``main``) and whether its gates declined the page."""
    p = np.asarray(probabilities, dtype=np.float64)
    chars = np.asarray(features.chars, dtype=np.float64)
    taken = np.asarray(main, dtype=bool)
    total = float(chars.sum())
    weight = total or 1.0
    selected = float(chars[taken].sum())
    expected_true = float((p * chars).sum())
    hit = float((p[taken] * chars[taken]).sum())
    positions = np.flatnonzero(taken)
    n = max(p.shape[0] - 1, 1)
    # Runs of consecutive main blocks, and the characters of the largest.
    starts = taken & ~np.concatenate(([False], taken[:-1]))
    run_of = np.cumsum(starts) * taken
    runs = int(starts.sum())
    largest = float(np.bincount(run_of, weights=chars)[1:].max()) if runs else 0.0
    clipped = np.clip(p, 1e-6, 1 - 1e-6)
    entropy = -(clipped * np.log2(clipped) + (1 - clipped) * np.log2(1 - clipped))
    row = [
        expected_f1(p, chars, taken),
        float(p[chars > 0].max()) if (chars > 0).any() else 0.0,
        1.0 if declined else 0.0,
        hit / selected if selected else 0.0,
        hit / expected_true if expected_true else 0.0,
        selected / weight,
        expected_true / weight,
        float(chars[(p > 0.2) & (p < 0.8)].sum()) / weight,
        float(chars[(p > 0.05) & (p < 0.95)].sum()) / weight,
        float((entropy * chars).sum()) / weight,
        float(np.log1p(selected)),
        float(np.log1p(p.shape[0])),
        float(np.log1p(total)),
        float(runs),
        largest / selected if selected else 0.0,
        float(positions[0]) / n if positions.size else 1.0,
        float(positions[-1]) / n if positions.size else 1.0,
    ]
    values = features.values
    if values.shape[0]:
        row += [float(values[0, FEATURE_NAMES.index(name)]) for name in _PAGE_COLUMNS]
    else:
        row += [0.0] * len(_PAGE_COLUMNS)
    for name in _MAIN_COLUMNS:
        column = values[:, FEATURE_NAMES.index(name)].astype(np.float64) if values.shape[0] else np.zeros(0)
        row.append(float((column[taken] * chars[taken]).sum()) / selected if selected else 0.0)
    return np.asarray(row, dtype=np.float64)


#: The router's LightGBM settings: small trees, strongly regularised (a few thousand pages to learn from).
ROUTER_PARAMS: dict = {
    "objective": "cross_entropy",
    "learning_rate": 0.03,
    "num_leaves": 7,
    "min_data_in_leaf": 30,
    "feature_fraction": 0.8,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 5.0,
    "num_threads": 2,
    "seed": 0,
    "deterministic": True,
    "force_row_wise": True,
    "verbose": -1,
}
ROUTER_ROUNDS = 300


def fit_router(rows: np.ndarray, scores: np.ndarray, rounds: int = ROUTER_ROUNDS):
    """A LightGBM booster of the labeler's page ``scores`` in [0, 1] from page ``rows``
    (:func:`router_features`); its ``predict`` gives the predicted score."""
    import lightgbm

    target = np.clip(np.asarray(scores, dtype=np.float64), 0.0, 1.0)
    dataset = lightgbm.Dataset(np.asarray(rows, dtype=np.float32), target)
    return lightgbm.train(ROUTER_PARAMS, dataset, num_boost_round=rounds)


# -- the per-page pass ---------------------------------------------------------------------------------


def _init_worker(
    cvs: dict,
    fold_keys: dict,
    second: str | None,
    tokenizer: str | None,
    opinion: bool,
    cpu_only: bool = False,
) -> None:
    _worker.update(cvs=cvs, fold_keys=fold_keys, labelers={}, second=None, renderer=None, opinion=None)
    _worker["cpu_only"] = cpu_only  # the second stage and the tokens come from another grouping's rows
    if second is not None:
        _worker["second"] = _second_extractor(second)
    if tokenizer is not None:
        from transformers import AutoTokenizer

        from dripper.labelers.lm_prompts import PromptRenderer
        from dripper.prompt import answer_format

        _worker["renderer"] = PromptRenderer(
            AutoTokenizer.from_pretrained(tokenizer), answer_format("compact")
        )
    if opinion:
        from dripper.labelers.trafilatura import TrafilaturaLabeler

        _worker["opinion"] = TrafilaturaLabeler()


def _second_extractor(spec: str):
    """The pipeline of an extractor spec (``oracle``, ``qwen=vllm,model=…``)."""
    from dripper.config.extractor import parse_extractor
    from dripper.labelers import build_labeler
    from dripper.pipeline import ExtractOptions, Extractor

    parsed = parse_extractor(spec)
    return Extractor(
        build_labeler(parsed.labeler, **parsed.options), ExtractOptions(fallback=parsed.fallback)
    )


def _fold(by: str, key: str) -> int:
    """The fold whose model saw no page of this page's group (-1: no fold holds the group; any model)."""
    return _worker["fold_keys"][by].get(key, -1)


def _labeler(by: str, fold: int):
    from dripper.labelers.cpu.model import CpuLabeler

    cache = _worker["labelers"]
    if (by, fold) not in cache:
        cv = _worker["cvs"][by]
        cache[(by, fold)] = CpuLabeler(model=cv.models[max(fold, 0)])
    return cache[(by, fold)]


class _Given(BlockLabeler):
    """A labeler answering with labels computed beforehand (the CPU labeler's, recorded once)."""

    name = "cpu"

    def __init__(self) -> None:
        super().__init__()
        self.answers: dict = {}

    def label_batch(self, requests):
        return [self.answers[request.page.doc_id] for request in requests]


def _given_pipeline():
    """One pipeline per worker around a :class:`_Given` labeler (the fallback built once)."""
    from dripper.pipeline import ExtractOptions, Extractor

    if "given" not in _worker:
        _worker["given"] = Extractor(_Given(), ExtractOptions())
    return _worker["given"]


def _prompt_tokens(simplified) -> tuple[int, bool]:
    """(prompt tokens, counted with the real tokenizer) of one simplified page."""
    from dripper.prompt import build_prompt

    try:
        from dripper.prompt import CHARS_PER_TOKEN
    except ImportError:  # older checkouts kept it in the simplify stage
        from dripper.stages.simplify import CHARS_PER_TOKEN

    if simplified is None:
        return 0, _worker["renderer"] is not None
    renderer = _worker["renderer"]
    if renderer is None:
        return math.ceil(len(build_prompt(simplified.simplified_html)) / CHARS_PER_TOKEN), False
    return len(renderer.encode(renderer.render(simplified.simplified_html))), True


def _char_f1(main: np.ndarray, other: np.ndarray, chars: np.ndarray) -> float:
    both = float(chars[main & other].sum())
    size = float(chars[main].sum() + chars[other].sum())
    return 2.0 * both / size if size else 1.0


def page_rows(pages: list, files: list[str], sites: list[str], sources: list[str]) -> list[dict]:
    """One row per page: scores of the CPU labeler (per grouping) and of the second stage, router features,
    prompt tokens (see the module docstring)."""
    from dripper.eval.metrics import prepare_ground_truth, score_page
    from dripper.labelers.base import LabelRequest
    from dripper.labelers.cpu.decision import finish_labels
    from dripper.labelers.cpu.features import page_features
    from dripper.pipeline import ExtractOptions, Extractor, prepare_page
    from dripper.types import Page

    rows = []
    for page, file, site, source in zip(pages, files, sites, sources, strict=True):
        core = Page(doc_id=page.id, html=page.html, url=page.url, ground_truth=page.ground_truth)
        prepared = prepare_page(core)
        simplified = prepared.simplified if prepared.problem is None else None
        truth = prepare_ground_truth(page.ground_truth)
        tokens, real = _prompt_tokens(prepared.simplified) if not _worker.get("cpu_only") else (0, False)
        row = {
            "id": page.id,
            "file": file,
            "source": source,
            "site": site,
            "page_type": page.page_type,
            "tokens": tokens,
            "real_tokens": real,
            "problem": prepared.problem,
        }
        opinion = None
        if simplified is not None and _worker["opinion"] is not None:
            try:
                (answer,) = _worker["opinion"].label_batch([LabelRequest(core, simplified, prepared.text)])
                if answer.main is not None and len(answer.main) == simplified.n_blocks:
                    opinion = np.asarray(answer.main, dtype=bool)
            except Exception:  # noqa: BLE001 - Trafilatura failing on a page is a missing opinion
                opinion = None
        item = (core, prepared.simplified, prepared.problem)
        for by in _worker["cvs"]:
            key = site if by == "site" else source
            labeler = _labeler(by, _fold(by, key))
            entry: dict = {"fold": _fold(by, key)}
            if simplified is not None:
                request = LabelRequest(core, simplified, prepared.text)
                (labels,) = labeler.label_batch([request])
                given = _given_pipeline()
                given.labeler.answers = {core.doc_id: labels}
                (result,) = given.extract_simplified([item])
                features = page_features(simplified)
                (p,) = labeler.model.probabilities([features])
                main = np.asarray(
                    finish_labels(p, features.chars, labeler.threshold, decision=labeler.decision), dtype=bool
                )
                chars = np.asarray(features.chars, dtype=np.float64)
                entry["page_confidence"] = labels.page_confidence
                entry["declined"] = labels.main is None
                entry["features"] = router_features(p, features, main, labels.main is None).tolist()
                entry["opinion"] = (
                    [_char_f1(main, opinion, chars), float(chars[opinion].sum()) / (chars.sum() or 1.0), 0.0]
                    if opinion is not None
                    else [0.0, 0.0, 1.0]
                )
            else:
                (result,) = Extractor(labeler, ExtractOptions()).extract_simplified([item])
                entry.update(page_confidence=None, declined=True, features=None, opinion=None)
            scores = score_page(result.markdown, truth)
            entry["norm"], entry["raw"] = scores["rouge_f1_norm"], scores["rouge_f1"]
            entry["extractor"] = result.extractor
            row.setdefault("cpu", {})[by] = entry
        if _worker["second"] is not None:
            (result,) = _worker["second"].extract_simplified([item])
            scores = score_page(result.markdown, truth)
            row["second"] = {"norm": scores["rouge_f1_norm"], "raw": scores["rouge_f1"]}
        rows.append(row)
    return rows


def _second_in_process(spec: str, pages: list, rows: list[dict], batch: int = 64) -> None:
    """Score an LM second stage in this process (one engine, batched), adding ``second`` to ``rows``."""
    from dripper.eval.metrics import score_page
    from dripper.types import Page

    extractor = _second_extractor(spec)
    try:
        for start in range(0, len(pages), batch):
            chunk = pages[start : start + batch]
            core = [Page(doc_id=p.id, html=p.html, url=p.url, ground_truth=p.ground_truth) for p in chunk]
            for page, row, result in zip(chunk, rows[start:], extractor.extract_batch(core), strict=False):
                scores = score_page(result.markdown, page.ground_truth)
                row["second"] = {"norm": scores["rouge_f1_norm"], "raw": scores["rouge_f1"]}
    finally:
        extractor.close()


# -- cross-validations and the pass, cached -------------------------------------------------------------


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cross_validation(by: str, training, args, key: str):
    """The labeler's cross-validation grouped ``by`` (``--load-cv``, else ``--cv-dir``'s, else fitted)."""
    from dripper.labelers.cpu.fit import TrainParams
    from dripper.labelers.cpu.train import cross_validate

    given = dict(args.load_cv).get(by)
    if given:
        with gzip.open(given, "rb") as handle:
            cv = pickle.load(handle)  # noqa: S301 - a quality run's own --save-cv file
        if len(cv.probabilities) != len(training.pages) or cv.by != by:
            raise SystemExit(f"{given}: not a {by}-grouped cross-validation of these training pages")
        return cv
    path = args.cv_dir / f"cv-{by}-{key}.pkl.gz" if args.cv_dir else None
    if path is not None and path.exists():
        print(f"cross-validation ({by}) from {path}", file=sys.stderr)
        with gzip.open(path, "rb") as handle:
            return pickle.load(handle)  # noqa: S301 - our own cache
    started = time.perf_counter()
    cv = cross_validate(
        training.pages, TrainParams(threads=args.threads), folds=args.folds, seed=args.seed, by=by
    )
    print(f"cross-validated ({by}) in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wb") as handle:
            pickle.dump(cv, handle)
    return cv


def collect_rows(args) -> tuple[list[dict], dict]:
    """Every full-text page's row (see :func:`page_rows`), one pass per grouping, each kept in
    ``--rows-dir`` (reused when computed before on the same data, code and second stage) or given by
    ``--load-rows``; the groupings' rows are joined page by page."""
    lumped = {source: name for name, sources in args.lump_sources for source in sources}
    key = _digest(
        [str(p) for p in args.data],
        args.limit,
        _training_code_digest(),
        args.folds,
        args.seed,
        args.lump_sources,
    )
    info: dict = {"cv_key": key, "rows": {}}
    per_grouping: dict[str, list[dict]] = {}
    for path in args.load_rows:
        rows = _read_rows(path)
        found = [by for by in ("site", "source") if by in rows[0]["cpu"]]
        print(f"page rows ({', '.join(found)}) from {path} (--load-rows: not checked)", file=sys.stderr)
        for by in found:
            per_grouping.setdefault(by, rows)
            info["rows"][by] = str(path)
    for by in args.by:
        if by in per_grouping:
            continue
        rows_key = _digest(key, by, args.second, args.opinion, str(args.tokenizer), _router_code())
        path = args.rows_dir / f"rows-{by}-{rows_key}.jsonl.gz" if args.rows_dir else None
        info["rows"][by] = str(path)
        if path is not None and path.exists():
            print(f"page rows ({by}) from {path}", file=sys.stderr)
            per_grouping[by] = _read_rows(path)
            continue
        per_grouping[by] = _grouping_rows(args, by, key, lumped)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(path, "wt", encoding="utf-8") as handle:
                for row in per_grouping[by]:
                    handle.write(json.dumps(row) + "\n")
            print(f"page rows ({by}) written to {path}", file=sys.stderr)
    first, *others = [per_grouping[by] for by in args.by]
    for by, rows in zip(args.by[1:], others, strict=True):
        index = {(row["file"], row["id"]): row for row in rows}
        for row in first:
            row["cpu"][by] = index[(row["file"], row["id"])]["cpu"][by]
    return first, info


def _read_rows(path: Path) -> list[dict]:
    """A rows file; files of the first version kept each grouping's entry at ``row[by]`` (over the page's
    ``site`` name, which they lost): moved to ``row["cpu"][by]``."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    for row in rows:
        if "cpu" not in row:
            row["cpu"] = {}
            for by in ("site", "source"):
                if isinstance(row.get(by), dict):
                    row["cpu"][by] = row.pop(by)
            row.setdefault("site", None)
            if not isinstance(row.get("source"), str):
                row["source"] = None
    return rows


def _grouping_rows(args, by: str, key: str, lumped: dict[str, str]) -> list[dict]:
    """The per-page pass (:func:`page_rows`) with the fold models of the ``by`` cross-validation."""
    from dripper.eval.datasets import read_pages
    from dripper.labelers.cpu.training_set import site_of

    training, _ = load_training(args.data, args.cache, args.workers, args.limit)
    for page in training.pages:
        page.source = lumped.get(page.source, page.source)
    cv = cross_validation(by, training, args, key)
    fold_keys = {
        by: {
            page.site if by == "site" else page.source: int(fold)
            for page, fold in zip(training.pages, cv.fold_of, strict=True)
        }
    }
    del training
    pages, files, sites, sources = [], [], [], []
    for path in args.data:
        for page in read_pages(path, limit=args.limit):
            if not page.has_full_text:
                continue
            pages.append(page)
            files.append(path.name.split(".")[0])
            sites.append(site_of({"id": page.id, "url": page.url, "html": page.html, "source": page.source}))
            sources.append(lumped.get(page.source, page.source))
    shared = None
    if args.shared_rows is not None:  # the second stage, the tokens: as another grouping's pass found them
        shared = {(row["file"], row["id"]): row for row in _read_rows(args.shared_rows)}
    second_here = _is_cheap(args.second) and shared is None
    tokenizer = str(args.tokenizer) if args.tokenizer and Path(args.tokenizer).exists() else None
    if shared is None and tokenizer is None:
        print(f"no tokenizer at {args.tokenizer}: prompt tokens estimated as chars / 3.5", file=sys.stderr)
    spans = [(start, start + args.chunk) for start in range(0, len(pages), args.chunk)]
    rows: list[dict] = []
    started = time.perf_counter()
    with ProcessPoolExecutor(
        max_workers=args.workers,
        initializer=_init_worker,
        initargs=(
            {by: cv},
            fold_keys,
            args.second if second_here else None,
            tokenizer if shared is None else None,
            args.opinion and shared is None,
            shared is not None,
        ),
    ) as pool:
        jobs = [pool.submit(page_rows, pages[a:b], files[a:b], sites[a:b], sources[a:b]) for a, b in spans]
        for done, job in enumerate(jobs, 1):
            rows += job.result()
            if done % 20 == 0 or done == len(jobs):
                print(
                    f"  {by}: {len(rows)}/{len(pages)} pages, {time.perf_counter() - started:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    if shared is not None:
        for row in rows:
            other = shared[(row["file"], row["id"])]
            row.update(second=other["second"], tokens=other["tokens"], real_tokens=other["real_tokens"])
    elif not second_here:
        _second_in_process(args.second, pages, rows)
    return rows


def _training_code_digest() -> str:
    """What the labeler's cross-validation depends on in the code: ``labeler_sweep``'s feature code, less
    the router (which this bench trains on top of the fold models, and may change between runs)."""
    digest = hashlib.sha256()
    for entry in ("dripper/labelers/cpu", "dripper/simplify", "dripper/labelers/oracle.py"):
        path = REPO / entry
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if file.name not in ("router.py", "model.py"):
                digest.update(file.relative_to(REPO).as_posix().encode())
                digest.update(file.read_bytes())
    return digest.hexdigest()


def _is_cheap(spec: str) -> bool:
    """Whether the second stage runs in the worker processes (no LM engine to share)."""
    from dripper.config.extractor import parse_extractor

    return not parse_extractor(spec).is_lm


def _router_code() -> str:
    """The router's page summaries are computed in the pass: this file is part of the rows' key."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


# -- routers and curves ------------------------------------------------------------------------------------


def learned_scores(
    rows: list[dict], by: str, opinion: bool = False, target: str = "norm", router_by: str = "fold"
) -> np.ndarray:
    """Out-of-fold router predictions of each page's CPU score: the router for a page is trained on the
    pages of the other folds of the labeler's ``by`` cross-validation (pages of a group no fold held: on
    a fold drawn from their group's name)."""
    usable = np.array([row["cpu"][by]["features"] is not None for row in rows])
    x = np.array([_router_row(row, by, opinion) for row in rows])
    if target == "gain":  # the oracle's (second stage's) gain over the CPU labeler, mapped onto [0, 1]
        y = np.array([(1.0 - (row["second"]["norm"] - row["cpu"][by]["norm"])) / 2.0 for row in rows])
    else:
        y = np.array([row["cpu"][by][target] for row in rows])
    folds = np.array([_router_fold(row, by) if router_by == "fold" else row["source"] for row in rows])
    predicted = np.zeros(len(rows))
    for fold in np.unique(folds):
        held = folds == fold
        train = ~held & usable
        if not train.any():
            continue
        router = fit_router(x[train], y[train])
        predicted[held] = router.predict(x[held].astype(np.float32))
    predicted[~usable] = -1.0  # no simplified page: the CPU labeler gave the fallback's output
    return predicted


def _names(opinion: bool) -> tuple[str, ...]:
    return ROUTER_FEATURES + (_OPINION_FEATURES if opinion else ())


def _router_row(row: dict, by: str, opinion: bool) -> list[float]:
    entry = row["cpu"][by]
    width = len(_names(opinion))
    if entry["features"] is None:
        return [0.0] * width
    return entry["features"] + ((entry["opinion"] or [0.0, 0.0, 1.0]) if opinion else [])


def _router_fold(row: dict, by: str) -> str:
    fold = row["cpu"][by]["fold"]
    if fold >= 0:
        return f"f{fold}"
    key = (row["site"] if by == "site" else row["source"]) or row["id"]  # first-version rows: no site
    return f"u{int(hashlib.sha256(key.encode()).hexdigest(), 16) % 5}"


def route_orders(
    rows: list[dict], by: str, routers: Sequence[str], router_by: str = "fold"
) -> dict[str, np.ndarray]:
    """Per router, a routing score per page (low: routed first). The learned routers are trained on the
    labeler's folds (``router_by="fold"``) or leave one source out (``"source"``)."""

    def learned(**options) -> np.ndarray:
        return learned_scores(rows, by, router_by=router_by, **options)

    cpu = np.array([row["cpu"][by]["norm"] for row in rows])
    second = np.array([row["second"]["norm"] for row in rows])
    declined = np.array([bool(row["cpu"][by]["declined"]) for row in rows])
    confidence = np.array([row["cpu"][by]["page_confidence"] or 0.0 for row in rows])
    scores: dict[str, np.ndarray] = {}
    for name in routers:
        if name == "confidence":
            scores[name] = confidence - 2.0 * declined  # declined pages first, then by page confidence
        elif name == "ideal":
            scores[name] = cpu - second
        elif name == "router":
            scores[name] = learned() + 1e-6 * confidence  # ties: by page confidence
        elif name == "router+declined":  # what the cascade does with a route score (dripper.routing)
            scores[name] = scores.get("router", learned() + 1e-6 * confidence) - 2.0 * declined
        elif name == "router-gain":  # trained on the second stage's gain instead of the CPU score
            scores[name] = learned(target="gain") + 1e-6 * confidence - 2.0 * declined
        elif name == "router+opinion":
            scores[name] = learned(opinion=True) + 1e-6 * confidence - 2.0 * declined
    return scores


def curve(cpu, second, score, tokens, shares=SHARES, by_tokens=False) -> list[dict]:
    """Mean quality when the lowest-``score`` pages are routed, at each share of pages (or of tokens)."""
    order = np.argsort(score, kind="stable")
    n = len(order)
    total_tokens = float(tokens.sum()) or 1.0
    cumulative = np.cumsum(tokens[order])
    points = []
    for share in shares:
        if by_tokens:
            k = int(np.searchsorted(cumulative, share / 100 * total_tokens + 1e-9, side="right"))
        else:
            k = round(share / 100 * n)
        routed = np.zeros(n, dtype=bool)
        routed[order[:k]] = True
        quality = np.where(routed, second, cpu)
        points.append(
            {
                "share": share,
                "pages": k / n if n else 0.0,
                "tokens": float(tokens[routed].sum()) / total_tokens,
                "quality": float(quality.mean()) if n else 0.0,
            }
        )
    return points


def measure(rows: list[dict], by: str, routers: Sequence[str], router_by: str = "fold") -> dict:
    """Curves per page group and router, for the normalised and the raw score."""
    scores = route_orders(rows, by, routers, router_by)
    files = np.array([row["file"] for row in rows])
    tokens = np.array([row["tokens"] for row in rows], dtype=np.float64)
    report: dict = {}
    groups = dict(GROUPS)
    known = {file for members in GROUPS.values() for file in members}
    groups.update({file: (file,) for file in sorted(set(files.tolist()) - known)})  # e.g. the sample
    for group, members in groups.items():
        mine = np.isin(files, members)
        if not mine.any():
            continue
        entry = report.setdefault(group, {"pages": int(mine.sum()), "metrics": {}})
        for metric in ("norm", "raw"):
            cpu = np.array([row["cpu"][by][metric] for row in rows])[mine]
            second = np.array([row["second"][metric] for row in rows])[mine]
            per_router = {}
            for name in routers:
                # The ideal router knows this metric's gain; the others rank the same way for both metrics.
                score = cpu - second if name == "ideal" else scores[name][mine]
                per_router[name] = {
                    "pages": curve(cpu, second, score, tokens[mine]),
                    "tokens": curve(cpu, second, score, tokens[mine], by_tokens=True),
                }
            entry["metrics"][metric] = {
                "cpu": float(cpu.mean()),
                "second": float(second.mean()),
                "routers": per_router,
            }
    return report


def format_report(report: dict, by: str) -> str:
    lines = []
    for group, entry in report.items():
        for metric, found in entry["metrics"].items():
            all_second = found["second"]
            grouping = by if "," in by else f"{by}-grouped"
            title = (
                f"== {grouping}, {group} ({entry['pages']} pages), ROUGE-5 F1 {metric}: "
                f"all CPU {found['cpu']:.4f}, all second stage {all_second:.4f} =="
            )
            lines.append(title)
            for axis in ("pages", "tokens"):
                head = f"  {'share of ' + axis + ' routed':24}" + "".join(f"{s:>7d}%" for s in SHARES)
                lines.append(head)
                for name, curves in found["routers"].items():
                    cells = "".join(f"{point['quality']:8.4f}" for point in curves[axis])
                    lines.append(f"  {name:24}{cells}")
            lines.append("  loss vs all second stage (points), share of prompt tokens routed:")
            for name, curves in found["routers"].items():
                cells = []
                for share in LOSS_AT:
                    point = next(p for p in curves["pages"] if p["share"] == share)
                    loss = 100 * (all_second - point["quality"])
                    cells.append(f"{share}% pages: {loss:5.2f} ({point['tokens']:.0%} tokens)")
                for share in LOSS_AT:
                    point = next(p for p in curves["tokens"] if p["share"] == share)
                    cells.append(f"{share}% tokens: {100 * (all_second - point['quality']):5.2f}")
                lines.append(f"  {name:24}" + "   ".join(cells))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, nargs="+", default=default_data())
    parser.add_argument("--limit", type=int, default=None, help="pages per file")
    parser.add_argument("--by", nargs="+", choices=("site", "source"), default=["site", "source"])
    parser.add_argument(
        "--lump-sources", action="append", default=[], type=lump_spec, metavar="NAME=SOURCE,SOURCE"
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="threads per model fit")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--cache", type=Path, default=None, help="the training set (labeler_sweep's --cache)")
    parser.add_argument("--cv-dir", type=Path, default=None, help="keep the cross-validations here")
    parser.add_argument(
        "--load-cv",
        action="append",
        default=[],
        type=lambda spec: tuple(spec.split("=", 1)),
        metavar="BY=CV.pkl.gz",
        help="a quality run's --save-cv for grouping BY (site or source)",
    )
    parser.add_argument("--rows-dir", type=Path, default=None, help="keep the per-page rows here")
    parser.add_argument(
        "--load-rows", type=Path, nargs="+", default=[], help="--rows-dir files to reuse as they are"
    )
    parser.add_argument(
        "--shared-rows",
        type=Path,
        default=None,
        help="rows of another grouping: take the second stage's scores and the tokens from there (faster)",
    )
    parser.add_argument("--second", default="oracle", help="the second stage's extractor spec")
    parser.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    parser.add_argument("--no-opinion", dest="opinion", action="store_false", help="skip router+opinion")
    parser.add_argument(
        "--no-router-loso",
        dest="router_loso",
        action="store_false",
        help="skip the routers trained leave one source out on the other groupings' rows",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the curves as JSON here")
    args = parser.parse_args(argv)

    command = "bench/cascade.py " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# {stamp}: {command}")
    rows, info = collect_rows(args)
    tokens_real = all(row["real_tokens"] for row in rows)
    print(
        f"# {len(rows)} full-text pages; second stage {args.second!r}; prompt tokens "
        + (
            "counted with the Qwen tokenizer (v1.1 compact prompt)"
            if tokens_real
            else "estimated as chars / 3.5"
        )
    )
    all_routers = [name for name in ROUTERS if args.opinion or name != "router+opinion"]
    summary = {"date": stamp, "command": command, "second": args.second, "real_tokens": tokens_real, **info}
    summary["groupings"] = {}
    for by in args.by:
        routers = list(all_routers)
        if "router+opinion" in routers and not any(
            row["cpu"][by].get("opinion") and not row["cpu"][by]["opinion"][2] for row in rows
        ):
            routers.remove("router+opinion")  # a pass without Trafilatura's opinion (--shared-rows)
        report = measure(rows, by, routers)
        summary["groupings"][by] = report
        print(format_report(report, by))
        if args.router_loso and by != "source":
            # The labeler's folds stay; the routers are trained leave one source out.
            name = f"{by}-grouped labeler, routers leave-one-source-out"
            report = measure(rows, by, routers, router_by="source")
            summary["groupings"][name] = report
            print(format_report(report, name))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
