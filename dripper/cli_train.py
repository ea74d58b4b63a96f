"""``dripper train-labeler``: train the CPU labeler's model from pages with ground truth.

``dripper.cli`` adds it to the ``dripper`` command; the handler imports the training code only when the
command runs (training needs the ``cpu-train`` extra, LightGBM or scikit-learn; extraction needs neither).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TRAIN_DESCRIPTION = """Train the CPU labeler (two-stage gradient-boosted trees over block features).

Every full-text page of --data is simplified and labelled by the oracle (its ground truth aligned to its
blocks); a snippet-only page is labelled where its snippets fall (a block holding a must-appear snippet is
main, one holding a must-not-appear snippet is other, the rest unlabelled; --snippet-weight). The command
cross-validates with folds grouped by site, reports out-of-fold scores per source and page type, trains on
all pages and writes a JSON model file that records the versions, parameters, training data (with sha256)
and the cross-validated scores.

With --kind cpu_seq it trains the block-sequence labeler instead: every page's blocks get hashed text and
markup tokens, the trees above are cross-validated by site for out-of-fold logits, and a bidirectional GRU
over the page's blocks is trained on them with torch (one thread by default: deterministic), written as a
.npz file that the cpu_seq labeler evaluates with numpy.
"""

TRAIN_EPILOG = """examples:
  # the shipped model (the bundled sample pages are held out so that the tests measure unseen pages)
  dripper train-labeler --data ../shared/data/dev.jsonl.gz ../shared/data/dev_hard.jsonl.gz \\
      ../shared/data/dev_fundus.jsonl.gz --output dripper/resources/cpu_labeler/model.json.gz \\
      --exclude-pages data/sample/pages.jsonl.gz --workers 1 --threads 1 --no-cv
  # (its settings are the defaults: --bags 1 --decision expected_f1 --threshold 0.4 --min-confidence 0.85
  #  --min-page-confidence 0.85)
  # use it
  dripper extract --input pages.jsonl.gz --output out.jsonl --labeler cpu
  # the block-sequence labeler (a BiGRU over the trees' scores; torch, the cpu-train extra)
  dripper train-labeler --kind cpu_seq --data pages.jsonl.gz more.jsonl.gz --output my_seq.npz \\
      --exclude-pages data/sample/pages.jsonl.gz --threads 1
  dripper extract --input pages.jsonl.gz --output out.jsonl --labeler cpu_seq --labeler-option model=my_seq.npz
"""


def add_train_labeler_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``train-labeler`` to the ``dripper`` command's subparsers (``parser.add_subparsers()``)."""
    parser = subparsers.add_parser(
        "train-labeler",
        help="train the CPU labeler's model from pages with ground truth",
        description=TRAIN_DESCRIPTION,
        epilog=TRAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--data",
        nargs="+",
        required=True,
        help="JSONL(.gz) files of {id, html, url, ground_truth_text} records",
    )
    parser.add_argument(
        "--output", required=True, help="model file to write (.json.gz or .json; cpu_seq: .npz)"
    )
    parser.add_argument(
        "--kind",
        default="cpu",
        choices=("cpu", "cpu_seq"),
        help="cpu: the two-stage trees (default); cpu_seq: the block-sequence network stacked on them",
    )
    parser.add_argument(
        "--epochs", type=int, default=None, help="cpu_seq: passes over the training windows (default 3)"
    )
    parser.add_argument(
        "--folds", type=int, default=5, help="cross-validation folds, grouped by site (default 5, at least 3)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the folds and the learner (default 0)")
    parser.add_argument(
        "--no-cv", action="store_true", help="skip the cross-validated report (fewer fits; same model)"
    )
    parser.add_argument(
        "--exclude-pages",
        nargs="*",
        default=[],
        metavar="FILE",
        help="JSONL(.gz) files whose record ids are left out of training (e.g. data/sample/pages.jsonl.gz)",
    )
    parser.add_argument(
        "--exclude-source",
        action="append",
        default=[],
        metavar="SOURCE",
        help="leave this collection's pages (the records' source) out of training (repeatable; cpu only)",
    )
    parser.add_argument("--workers", type=int, default=2, help="processes for building the training set")
    parser.add_argument("--threads", type=int, default=2, help="threads per model fit")
    parser.add_argument("--rounds", type=int, default=None, help="boosting rounds per stage (default 150)")
    parser.add_argument(
        "--bags",
        type=int,
        default=None,
        help="ensembles per stage, each on a random 80%% of the sites, averaged (default 1)",
    )
    parser.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "lightgbm", "sklearn"),
        help="learner (auto: LightGBM if installed)",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="read at most N records per file (for trials)"
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="the threshold rule's cut: blocks at or above this probability are main (given without "
        "--decision, it selects that rule; default 0.4)",
    )
    parser.add_argument(
        "--min-confidence",
        type=float,
        default=None,
        help="pages where no block reaches this probability go to the fallback (default 0.85)",
    )
    parser.add_argument(
        "--min-page-confidence",
        type=float,
        default=None,
        help="pages whose labels' expected F1 under the model is below this go to the fallback too "
        "(default 0.85; 0: off)",
    )
    parser.add_argument(
        "--decision",
        default=None,
        metavar="RULE",
        help="how block probabilities become labels: threshold, or expected_f1 (each page's cut with the "
        "highest expected F1; the default)",
    )
    parser.add_argument(
        "--snippet-weight",
        type=float,
        default=None,
        help="weight of a snippet-only page (its few blocks the snippets label) against a full-text page "
        "(default 1; 0: not trained on)",
    )
    parser.add_argument("--report", default=None, help="also write the training report as JSON here")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.set_defaults(handler=run_train_labeler)
    return parser


def train_params(args: argparse.Namespace):
    """The :class:`TrainParams` of parsed ``train-labeler`` options: those left unset take its defaults (the
    shipped settings, named once, there); ``--threshold`` without ``--decision`` selects the threshold rule
    (a threshold asked for is a threshold used, as in ``CpuLabeler``). Raises ``ValueError`` on a bad value."""
    from dripper.labelers.cpu.fit import TrainParams

    names = (
        "rounds",
        "bags",
        "threshold",
        "min_confidence",
        "min_page_confidence",
        "decision",
        "snippet_weight",
    )
    overrides = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if args.threshold is not None and args.decision is None:
        overrides["decision"] = "threshold"
    return TrainParams(threads=args.threads, backend=args.backend, **overrides)


def run_train_seq_labeler(args: argparse.Namespace, excluded: set[str]) -> int:
    """``--kind cpu_seq``: the network over the trees (``dripper.labelers.cpu_seq.command``)."""
    from dataclasses import replace

    from dripper.labelers.cpu_seq.command import train_seq_labeler
    from dripper.labelers.cpu_seq.train import SeqTrainParams

    for name in ("rounds", "bags", "snippet_weight"):
        if getattr(args, name) is not None:
            print(f"error: --{name.replace('_', '-')} is a cpu option, not cpu_seq's", file=sys.stderr)
            return 2
    names = ("threshold", "decision", "min_confidence", "min_page_confidence")
    settings = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if args.threshold is not None and args.decision is None:
        settings["decision"] = "threshold"
    params = SeqTrainParams() if args.epochs is None else replace(SeqTrainParams(), epochs=args.epochs)
    try:
        train_seq_labeler(
            args.data,
            args.output,
            folds=args.folds,
            seed=args.seed,
            params=params,
            threads=args.threads,
            exclude_ids=excluded,
            limit=args.limit,
            settings=settings,
            quiet=args.quiet,
        )
    except ImportError as error:
        print(f"error: {error}; pip install 'dripper-platform[cpu-train]' (torch, LightGBM)", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def run_train_labeler(args: argparse.Namespace) -> int:
    from dripper.labelers.cpu.train import train_labeler
    from dripper.labelers.cpu.training_set import iter_records

    if args.folds < 3:
        print(f"error: --folds {args.folds}: need at least 3", file=sys.stderr)
        return 2
    missing = [path for path in [*args.data, *args.exclude_pages] if not Path(path).exists()]
    if missing:
        print(f"error: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    excluded = {str(record.get("id")) for path in args.exclude_pages for record in iter_records(path)}
    if args.kind == "cpu_seq":
        if args.exclude_source:
            print("error: --exclude-source: cpu only (give cpu_seq --exclude-pages)", file=sys.stderr)
            return 2
        return run_train_seq_labeler(args, excluded)
    try:
        params = train_params(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        _, report = train_labeler(
            args.data,
            args.output,
            folds=args.folds,
            seed=args.seed,
            params=params,
            workers=args.workers,
            cross_validation=not args.no_cv,
            exclude_ids=excluded,
            limit=args.limit,
            quiet=args.quiet,
            exclude_sources=args.exclude_source,
        )
    except ImportError as error:
        print(
            f"error: {error}; pip install 'dripper-platform[cpu-train]' (LightGBM or scikit-learn)",
            file=sys.stderr,
        )
        return 2
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0
