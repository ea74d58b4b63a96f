"""Is a change to the CPU labeler's training a real gain? Block-level out-of-fold scores, paired over pages.

Usage::

    .venv/bin/python -m research.labeler_sweep [--data FILE…] [--by site|source] [--lump-sources NAME=A,B…]
        [--cache TRAINING.pkl.gz] [--base KEY=VALUE…] [--variant NAME:KEY=VALUE,KEY=VALUE…]
        [--scores-out SCORES.jsonl] [--previous EARLIER_SCORES.jsonl] [--resamples R]

A ``quality`` run of ``research.cpu_labeler_quality`` extracts and scores every page with ROUGE beside three
baselines (8 minutes on two cores); most questions about training (a hyper-parameter, a weighting, a second-
stage feature) are answered faster at block level: each page's character F1 of the blocks the model selects
(its decision rule: the expected-F1 cut in the shipped settings) against the ``oracle`` labels the model is
trained on. This runs the same grouped cross-validation as ``quality`` for the base settings (the shipped
model's, ``--base`` overrides them) and each ``--variant`` (TrainParams fields over the base), on one
training set built once and kept in ``--cache`` (rebuilt when the data files or the feature code change),
and prints per file group (each file, and the article files together) and per source and page type the
mean F1 of each, then each variant's lead over the base with a 95% paired-bootstrap interval over the
pages (``dripper.eval.paired``; ``*``: beyond noise). That interval is the noise of which pages were drawn; the
training's own randomness (LightGBM's row and feature sampling) is another: ``--seeds N`` cross-validates
every run under N learner seeds on the same folds, prints each seed's means and their range, and compares
the runs on each page's mean over the seeds.

A change to the code (a feature, the second stage's context) is compared across checkouts:
``--scores-out`` writes every page's scores; run this study in the other checkout with ``--previous`` that
file, and its base is compared page for page with the earlier run's (as ``previous:NAME``). Which of
several new features carries a change is answered on one cache: ``--variant NAME:ignore_features=A`` (names
space-separated) fits the same matrix with those columns held constant, so the trees never split on them.

Snippet-only pages (partially labelled) are trained on as the settings say (``snippet_weight``) but have no
block-level score: they are in no row of the tables.

Block-level F1 is not the page's ROUGE (the fallback, the Markdown and the ground truth's own form are
not in it): confirm a change found here with ``python -m research.cpu_labeler_quality quality`` before
shipping it.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import pickle
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]

ARTICLE_FILES = ("dev", "dev_fundus")  # the article files, also reported as one set
# What the cached training set depends on besides the data: the code that simplifies, featurises, labels.
_FEATURE_CODE = ("dripper/labelers/cpu", "dripper/simplify", "dripper/labelers/oracle.py")


def default_data() -> list[Path]:
    """The shared dev files present beside the checkout (dev, dev_hard, dev_fundus), else the bundled sample."""
    shared = REPO.parent / "shared" / "data"
    files = [shared / f"{name}.jsonl.gz" for name in ("dev", "dev_hard", "dev_fundus")]
    present = [path for path in files if path.exists()]
    return present or [REPO / "data" / "sample" / "pages.jsonl.gz"]


def _code_digest() -> str:
    digest = hashlib.sha256()
    for entry in _FEATURE_CODE:
        path = REPO / entry
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(file.relative_to(REPO).as_posix().encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def load_training(data: Sequence[Path], cache: Path | None, workers: int, limit: int | None):
    """The training set of ``data`` (with each page's file name), from ``cache`` when it was built from the
    same files (sha256), limit and feature code, else built and written there."""
    from dripper.labelers.cpu.training_set import build_training_set, file_sha256

    key = {
        "files": [file_sha256(Path(path)) for path in data],
        "limit": limit,
        "code": _code_digest(),
    }
    if cache is not None and cache.exists():
        with gzip.open(cache, "rb") as handle:
            stored = pickle.load(handle)  # noqa: S301 (our own cache)
        if stored["key"] == key:
            print(f"training set from {cache}", file=sys.stderr)
            return stored["training"], stored["files_of"]
        print(f"{cache} is stale (data or feature code changed): rebuilding", file=sys.stderr)
    training = build_training_set(data, workers=workers, limit=limit, progress=True)
    files_of = [
        Path(entry["path"]).name.split(".")[0] for entry in training.files for _ in range(entry["used"])
    ]
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(cache, "wb") as handle:
            pickle.dump({"key": key, "training": training, "files_of": files_of}, handle)
    return training, files_of


def page_scores(pages, probabilities, params) -> list[float]:
    """Each page's block F1 (``train.page_scores``) under the decision rule of ``params`` (a
    :class:`TrainParams`)."""
    from dripper.labelers.cpu.decision import finish_labels
    from dripper.labelers.cpu.train import page_scores as block_scores

    scores = []
    for page, p in zip(pages, probabilities, strict=True):
        selected = finish_labels(p, page.features.chars, params.threshold, decision=params.decision)
        scores.append(block_scores(page, p, selected=selected)["f1"])
    return scores


def _groups(pages, files_of: Sequence[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for page, file in zip(pages, files_of, strict=True):
        keys = [f"file={file}", f"source={page.source}"]
        if file in ARTICLE_FILES:
            keys.append("articles")
        if page.page_type and page.source != "fundus":
            keys.append(f"page_type={page.page_type}")
        for key in keys:
            groups.setdefault(key, []).append(page.doc_id)
    order = lambda key: (not key.startswith("file="), key != "articles", key)  # noqa: E731
    return dict(sorted(groups.items(), key=lambda item: order(item[0])))


def format_table(scores: dict[str, dict[str, float]], groups: dict[str, list[str]]) -> str:
    """Mean block F1 of every run (columns) per page group (rows)."""
    names = list(scores)
    lines = [f"{'pages':34} {'n':>5}  " + "  ".join(f"{name:>12}" for name in names)]
    for group, ids in groups.items():
        means = [np.mean([scores[name][i] for i in ids if i in scores[name]]) for name in names]
        lines.append(f"{group:34} {len(ids):>5}  " + "  ".join(f"{mean:>12.4f}" for mean in means))
    return "\n".join(lines)


def format_seed_spread(seed_means: dict[str, list[dict[str, float]]], groups: dict[str, list[str]]) -> str:
    """Per run and file group, the mean block F1 under each learner seed and their range: how much a
    figure moves with the training's own randomness alone (the same folds, the same pages)."""
    lines = ["== the same runs per learner seed (training noise): means, and max - min =="]
    for name, per_seed in seed_means.items():
        for group in groups:
            if group.startswith(("source=", "page_")):
                continue
            means = [run[group] for run in per_seed]
            lines.append(
                f"{name:24} {group:20} "
                + " ".join(f"{mean:.4f}" for mean in means)
                + f"   range {max(means) - min(means):.4f}"
            )
    return "\n".join(lines)


def leads(scores: dict[str, dict[str, float]], groups: dict[str, list[str]], base: str, resamples: int):
    """Each variant's lead over ``base``, and ``base``'s over each earlier run (``previous:…``), on the
    file groups (paired bootstrap over the pages both scored)."""
    from dripper.eval.paired import paired_leads

    per_page = {name: {i: {"block_f1": value} for i, value in run.items()} for name, run in scores.items()}
    file_groups = {group: ids for group, ids in groups.items() if not group.startswith(("source=", "page_"))}
    found = []
    for name in scores:
        if name == base:
            continue
        row, other = (base, name) if name.startswith("previous:") else (name, base)
        found += paired_leads(per_page, row, file_groups, [other], resamples, metrics=("block_f1",))
    return found


def _parse_variant(spec: str) -> tuple[str, dict[str, str]]:
    from dripper.config.settings import parse_key_values

    name, _, settings = spec.partition(":")
    if not name or not settings:
        raise argparse.ArgumentTypeError(f"--variant {spec!r}: give NAME:KEY=VALUE[,KEY=VALUE…]")
    return name, parse_key_values(settings.split(","), "--variant")


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say which training set and folds a block-level run uses (this study's and
    ``research.labeler_losses``'s)."""
    parser.add_argument("--data", type=Path, nargs="+", default=default_data())
    parser.add_argument("--limit", type=int, default=None, help="pages per file")
    parser.add_argument("--by", choices=("site", "page", "source"), default="site")
    parser.add_argument(
        "--lump-sources", action="append", default=[], type=lump_spec, metavar="NAME=SOURCE,SOURCE"
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="threads per model fit")
    parser.add_argument("--workers", type=int, default=2, help="processes building the training set")
    parser.add_argument("--cache", type=Path, default=None, help="keep the training set here (.pkl.gz)")


def lump_spec(spec: str) -> tuple[str, list[str]]:
    """A ``--lump-sources NAME=A,B`` value as ``(NAME, [A, B])`` (an argparse ``type``)."""
    name, _, sources = spec.partition("=")
    if not name or not sources:
        raise argparse.ArgumentTypeError(f"{spec!r}: --lump-sources takes NAME=SOURCE,SOURCE")
    return name, sources.split(",")


def lumped_sources(lumps: Sequence[tuple[str, list[str]]]) -> dict[str, str]:
    """Parsed ``--lump-sources`` values as {source: name} (one fold, one report row for A and B)."""
    return {source: name for name, sources in lumps for source in sources}


def main(argv: Sequence[str] | None = None) -> int:
    from dripper.config.settings import parse_key_values
    from dripper.eval.paired import format_leads
    from dripper.labelers.cpu.fit import TrainParams
    from dripper.labelers.cpu.train import cross_validate

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_training_arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help="seed of the fold assignment")
    parser.add_argument(
        "--seeds", type=int, default=1, help="learner seeds per run (0..N-1); page scores are their mean"
    )
    parser.add_argument("--base", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--variant", action="append", default=[], type=_parse_variant, metavar="NAME:K=V,…")
    parser.add_argument("--scores-out", type=Path, default=None, help="every page's scores, as JSONL")
    parser.add_argument("--previous", type=Path, default=None, help="--scores-out of an earlier run")
    parser.add_argument("--resamples", type=int, default=2000)
    args = parser.parse_args(argv)
    lumped = lumped_sources(args.lump_sources)
    # The base is the shipped model's settings (TrainParams' defaults) with --base over them.
    base_settings = {"threads": args.threads, **parse_key_values(args.base, "--base")}
    if args.seeds < 1:
        parser.error("--seeds takes a count of at least 1")
    runs = {"base": TrainParams(**base_settings)}
    for name, settings in args.variant:
        runs[name] = TrainParams(**{**base_settings, **settings})  # a bad field or value fails before any fit

    training, files_of = load_training(args.data, args.cache, args.workers, args.limit)
    pages = training.pages
    for page in pages:
        page.source = lumped.get(page.source, page.source)
    scored = [at for at, page in enumerate(pages) if not page.partial]  # snippet pages: no block score
    scored_pages = [pages[at] for at in scored]
    ids = [page.doc_id for page in scored_pages]
    scores: dict[str, dict[str, float]] = {}
    seed_means: dict[str, list[dict[str, float]]] = {}  # run -> per learner seed, group -> mean
    groups = _groups(scored_pages, [files_of[at] for at in scored])
    position = {page_id: at for at, page_id in enumerate(ids)}
    positions = {group: [position[i] for i in members] for group, members in groups.items()}
    for name, params in runs.items():
        per_seed = []
        for learner_seed in range(args.seeds):
            started = time.perf_counter()
            cv = cross_validate(
                pages, params, args.folds, args.seed, args.by, quiet=True, learner_seed=learner_seed
            )
            probabilities = [cv.probabilities[at] for at in scored]
            per_seed.append(page_scores(scored_pages, probabilities, params))
            print(
                f"{name}, learner seed {learner_seed}: cross-validated in {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
            )
        scores[name] = dict(zip(ids, np.mean(per_seed, axis=0).tolist(), strict=True))
        seed_means[name] = [
            {group: float(np.mean(np.take(run, at))) for group, at in positions.items()} for run in per_seed
        ]
    if args.previous:
        with args.previous.open(encoding="utf-8") as lines:
            for record in map(json.loads, lines):
                scores.setdefault(f"previous:{record['run']}", {})[record["id"]] = record["block_f1"]
    if args.scores_out:
        with args.scores_out.open("w", encoding="utf-8") as out:
            for name, run in scores.items():
                if not name.startswith("previous:"):
                    for page_id, value in run.items():
                        out.write(json.dumps({"run": name, "id": page_id, "block_f1": value}) + "\n")
    folds = "one fold per source" if args.by == "source" else f"{args.folds} folds"
    print(f"== mean block F1 out of fold ({args.by}-grouped, {folds}) ==")
    print(format_table(scores, groups))
    if args.seeds > 1:
        print(format_seed_spread(seed_means, groups))
    print(format_leads(leads(scores, groups, "base", args.resamples), places=4, show_row=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
