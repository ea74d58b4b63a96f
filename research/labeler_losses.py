"""Where does the CPU labeler go wrong? Out-of-fold block errors, per group and page by page.

Usage::

    .venv/bin/python -m research.labeler_losses [--data FILE…] [--by site|source] [--lump-sources NAME=A,B…]
        [--cache TRAINING.pkl.gz] [--load-cv CV.pkl.gz] [--group KEY=VALUE] [--pages N] [--min-chars C]

"Read the losses before adding features": this cross-validates the shipped settings (``TrainParams``'
defaults; or loads the fold models' probabilities from the ``--save-cv`` of a ``python -m
research.cpu_labeler_quality quality`` run on the same data), labels each page with the expected-F1 cut, and prints

- per source and page type, the characters the labels take wrongly (false positives) and leave wrongly
  (false negatives) per page, and character precision and recall against the ``oracle`` labels;
- for the pages of ``--group`` (``page_type=product``, ``source=dragnet``…), the ``--pages`` pages with the
  most wrongly labelled characters, and each of their wrong blocks of at least ``--min-chars`` characters:
  ``FP``/``FN``, the model's probability and the start of the block's text (the page is simplified again
  to read it). Snippet-only pages list the blocks their snippets label (``source=trafilatura_eval``).

The training set is the one ``research.labeler_sweep`` builds and caches (``--cache``: the same file
serves both).
"""

from __future__ import annotations

import argparse
import gzip
import pickle
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from research.labeler_sweep import add_training_arguments, load_training, lumped_sources


def block_errors(page, probabilities: np.ndarray, threshold: float, decision: str) -> dict:
    """The page's selected blocks and its character counts of true and false positives and negatives
    (over the blocks whose label is known)."""
    from dripper.labelers.cpu.decision import finish_labels

    chars = page.features.chars.astype(np.float64)
    selected = np.asarray(
        finish_labels(probabilities, page.features.chars, threshold, decision=decision), bool
    )
    labels = page.labels.astype(bool)
    known = page.known if page.known is not None else np.ones_like(labels)
    return {
        "selected": selected,
        "wrong": known & (selected != labels),
        "tp": float(chars[known & selected & labels].sum()),
        "fp": float(chars[known & selected & ~labels].sum()),
        "fn": float(chars[known & ~selected & labels].sum()),
    }


def format_groups(pages, errors: Sequence[dict]) -> str:
    """Per group: pages, characters taken wrongly and left wrongly per page, character P and R."""
    from dripper.labelers.cpu.train import report_groups, report_order

    totals: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(4))
    for page, error in zip(pages, errors, strict=True):
        for key in report_groups(page):
            totals[key] += (error["tp"], error["fp"], error["fn"], 1)
    lines = [
        f"{'pages':32s} {'n':>5s} {'FP chars/page':>14s} {'FN chars/page':>14s} {'char-P':>7s} {'char-R':>7s}"
    ]
    for key in sorted(totals, key=report_order):
        tp, fp, fn, n = totals[key]
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / (tp + fn) if tp + fn else 1.0
        lines.append(f"{key:32s} {int(n):5d} {fp / n:14.0f} {fn / n:14.0f} {precision:7.3f} {recall:7.3f}")
    return "\n".join(lines)


def _records(paths: Sequence[Path], ids: set[str]) -> dict[str, dict]:
    from dripper.labelers.cpu.training_set import iter_records

    found = {}
    for path in paths:
        for record in iter_records(path):
            if str(record.get("id")) in ids:
                found[str(record.get("id"))] = record
    return found


def format_worst(pages, errors, probabilities, records: dict[str, dict], count: int, min_chars: int) -> str:
    """The ``count`` pages with the most wrongly labelled characters, block by block."""
    from dripper.simplify import simplify_html

    order = sorted(range(len(pages)), key=lambda at: -(errors[at]["fp"] + errors[at]["fn"]))[:count]
    lines = []
    for at in order:
        page, error, p = pages[at], errors[at], probabilities[at]
        record = records[page.doc_id]
        simplified = simplify_html(record["html"], page.doc_id, record.get("url"))
        lines.append(
            f"== {page.doc_id} {record.get('url') or ''}: {error['fp']:.0f} characters taken wrongly, "
            f"{error['fn']:.0f} left wrongly"
        )
        for index in np.flatnonzero(error["wrong"]):
            if page.features.chars[index] < min_chars:
                continue
            kind = "FP" if error["selected"][index] else "FN"
            text = " ".join(simplified.blocks[index].text.split())[:120]
            lines.append(f"  {kind} p={p[index]:.2f} {text!r}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from dripper.labelers.cpu.fit import TrainParams
    from dripper.labelers.cpu.train import cross_validate, report_groups

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_training_arguments(parser)
    parser.add_argument("--load-cv", type=Path, default=None, help="fold models of `quality --save-cv`")
    parser.add_argument(
        "--group", default=None, metavar="KEY=VALUE", help="list the worst pages of this group"
    )
    parser.add_argument("--pages", type=int, default=10, help="worst pages listed")
    parser.add_argument("--min-chars", type=int, default=30, help="shortest wrong block listed")
    args = parser.parse_args(argv)
    lumped = lumped_sources(args.lump_sources)

    params = TrainParams(threads=args.threads)  # the shipped settings
    training, _ = load_training(args.data, args.cache, args.workers, args.limit)
    pages = training.pages
    for page in pages:
        page.source = lumped.get(page.source, page.source)
    if args.load_cv:
        with gzip.open(args.load_cv, "rb") as handle:
            cv = pickle.load(handle)  # noqa: S301 (our own cache)
        shapes = [len(p) for p in cv.probabilities]
        if shapes != [page.n_blocks for page in pages]:
            parser.error(f"{args.load_cv} was not saved from a run on these pages (block counts differ)")
    else:
        cv = cross_validate(pages, params, args.folds, 0, args.by, quiet=True)
    errors = [
        block_errors(page, p, params.threshold, params.decision)
        for page, p in zip(pages, cv.probabilities, strict=True)
    ]
    full = [at for at, page in enumerate(pages) if not page.partial]
    print(f"== block errors out of fold ({args.by}-grouped; full-text pages, oracle labels) ==")
    print(format_groups([pages[at] for at in full], [errors[at] for at in full]))
    if args.group:
        chosen = [
            at for at, page in enumerate(pages) if args.group != "all" and args.group in report_groups(page)
        ]
        if not chosen:
            parser.error(f"--group {args.group}: no page of the training set is in it")
        records = _records(args.data, {pages[at].doc_id for at in chosen})
        print(
            f"\n== the {min(args.pages, len(chosen))} pages of {args.group} with the most wrong characters =="
        )
        print(
            format_worst(
                [pages[at] for at in chosen],
                [errors[at] for at in chosen],
                [cv.probabilities[at] for at in chosen],
                records,
                args.pages,
                args.min_chars,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
