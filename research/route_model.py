"""Would a learned page-loss model route the cascade better than the labeler's expected F1?

Usage::

    OMP_NUM_THREADS=1 .venv/bin/python -m research.route_model [--cache DIR] [--tag _f] [--target gain] \
        [--trafilatura] [--data FILE…]

It reads ``research.cpu_seq_quality``'s cache (``prepare``'s pages and site folds, the ``cpu`` trees'
out-of-fold block probabilities, ``score``'s per-page scores). For every page with oracle labels it computes,
from the out-of-fold probabilities alone, the page summaries the labeler could compute at run time
(:func:`research.page_gate.page_summary`, plus how far the two tree stages disagree), and fits a small
LightGBM regressor of the page's loss (``gain``: oracle − cpu, what routing to the LM could win; or
``loss``: 1 − cpu, which needs no oracle) on the other site folds' pages: every prediction comes from a
regressor that saw none of the page's sites, with the labeler's own folds.

``--trafilatura`` adds a second opinion: each page is simplified again and run through the Trafilatura
fallback, each block is scored by the share of its words found in Trafilatura's text
(:func:`trafilatura_block_shares`), and the router also reads how far the labeler's selection agrees with
Trafilatura's (:func:`agreement_features`); the shares are cached (``trafilatura_shares.pkl.gz``, about
2.5 minutes on one core for the three dev sets).

It prints the routing curve on each file (share routed → normalised ROUGE and the loss against the
oracle on every page) for: expected F1 (today's router), the learned model with declined pages first (what
:mod:`dripper.routing` does with a ``route_score``), the learned model alone, and the ideal router.
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from research.cpu_seq_quality import DEFAULT_CACHE, load_cached
from research.page_gate import SUMMARY_NAMES, held_out_predictions, page_summary

__all__ = [
    "AGREEMENT_NAMES",
    "ROUTE_NAMES",
    "agreement_features",
    "main",
    "route_features",
    "trafilatura_block_shares",
]

#: The router's inputs: the fallback gate's page summaries, the stage disagreement, and whether the
#: labeler declined the page.
ROUTE_NAMES = (*SUMMARY_NAMES, "stage_disagreement", "stage1_expected_f1", "declined")

#: With ``--trafilatura``: character F1 and agreement of the selection with Trafilatura's blocks, the
#: share of the page's text Trafilatura keeps, the mean probability of its blocks, whether it kept nothing.
AGREEMENT_NAMES = (
    "trafilatura_f1",
    "trafilatura_agreement",
    "trafilatura_char_share",
    "trafilatura_mean_probability",
    "trafilatura_empty",
)

_SHARES = (0.1, 0.2, 0.3, 0.4, 0.5)
_WORD = re.compile(r"\w+")


def route_features(stage1: np.ndarray, stage2: np.ndarray, features, declined: bool) -> list[float]:
    """The :data:`ROUTE_NAMES` of one page from its two tree stages' block probabilities."""
    from dripper.labelers.cpu.decision import expected_f1, expected_f1_main

    chars = features.chars.astype(np.float64)
    weight = chars.sum() or 1.0
    main = expected_f1_main(stage2, chars)
    return [
        *page_summary(stage2, features),
        float((np.abs(stage1 - stage2) * chars).sum() / weight),
        expected_f1(stage1, chars, main),
        float(declined),
    ]


def trafilatura_block_shares(block_texts: list[str], trafilatura_text: str) -> np.ndarray:
    """Per block, the share of its words (a multiset) found in Trafilatura's text; -1 for a block without
    words."""
    found = Counter(word.lower() for word in _WORD.findall(trafilatura_text))
    shares = []
    for text in block_texts:
        words = Counter(word.lower() for word in _WORD.findall(text))
        total = sum(words.values())
        shares.append(sum(min(n, found[w]) for w, n in words.items()) / total if total else -1.0)
    return np.array(shares, dtype=np.float64)


def agreement_features(shares: np.ndarray, probabilities: np.ndarray, chars: np.ndarray) -> list[float]:
    """The :data:`AGREEMENT_NAMES` of a page: its blocks' Trafilatura shares against the labeler's
    expected-F1 selection from ``probabilities``."""
    from dripper.labelers.cpu.decision import expected_f1_main

    c = np.asarray(chars, dtype=np.float64)
    main = expected_f1_main(probabilities, c)
    kept = shares >= 0.5
    both, selected, theirs = c[main & kept].sum(), c[main].sum(), c[kept].sum()
    total = c.sum() or 1.0
    return [
        2 * both / (selected + theirs) if selected + theirs else 0.0,
        float(c[main == kept].sum() / total),
        float(theirs / total),
        float((probabilities * c)[kept].sum() / theirs) if theirs else 0.0,
        float(not kept.any()),
    ]


def _trafilatura_shares(paths: list[Path], cache: Path) -> dict[str, np.ndarray]:
    """Per page id, :func:`trafilatura_block_shares` of its blocks (cached in ``cache``)."""
    if cache.exists():
        return load_cached(cache)
    import lxml.html

    from dripper.eval.datasets import read_pages
    from dripper.fallback import build_fallback
    from dripper.pipeline import prepare_page
    from dripper.types import Page

    fallback = build_fallback("trafilatura")
    shares: dict[str, np.ndarray] = {}
    for path in paths:
        for bench in read_pages(path):
            page = Page(doc_id=bench.id, html=bench.html, url=bench.url)
            prepared = prepare_page(page)
            if prepared.simplified is None:
                continue
            try:
                html = fallback.main_html(bench.html, bench.url)
            except Exception:  # noqa: BLE001 - a page Trafilatura cannot take keeps nothing
                html = ""
            text = lxml.html.fromstring(html).text_content() if html.strip() else ""
            shares[bench.id] = trafilatura_block_shares([b.text for b in prepared.simplified.blocks], text)
        print(f"{path.name}: Trafilatura shares of {len(shares)} pages so far", file=sys.stderr, flush=True)
    with gzip.open(cache, "wb", compresslevel=1) as handle:
        pickle.dump(shares, handle, protocol=pickle.HIGHEST_PROTOCOL)
    return shares


def _curve(own: np.ndarray, oracle: np.ndarray, order: np.ndarray) -> list[str]:
    cells = []
    for share in _SHARES:
        mixed = own.copy()
        routed = order[: int(round(share * len(own)))]
        mixed[routed] = oracle[routed]
        cells.append(f"{mixed.mean():.3f} ({mixed.mean() - oracle.mean():+.3f})")
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.route_model", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--tag", default="_f", help="the scores file's tag (scores{TAG}.jsonl)")
    parser.add_argument("--target", choices=("gain", "loss"), default="gain")
    parser.add_argument("--trafilatura", action="store_true", help="add Trafilatura agreement inputs")
    parser.add_argument("--data", type=Path, nargs="+", default=None, help="with --trafilatura: the dev sets")
    args = parser.parse_args(argv)
    needed = [args.cache / name for name in ("set.pkl.gz", "trees_cv.pkl.gz", f"scores{args.tag}.jsonl")]
    missing = [str(path) for path in needed if not path.exists()]
    if missing:
        raise SystemExit(
            f"missing {', '.join(missing)}: run `python -m research.cpu_seq_quality prepare`, `oof --tag "
            f"{args.tag}` and `score --tag {args.tag}` first (their cache: {args.cache})"
        )
    shares = None
    if args.trafilatura:
        from research.labeler_sweep import default_data

        shares = _trafilatura_shares(args.data or default_data(), args.cache / "trafilatura_shares.pkl.gz")

    sequence_set = load_cached(args.cache / "set.pkl.gz")
    trees = load_cached(args.cache / "trees_cv.pkl.gz")
    records = {}
    with (args.cache / f"scores{args.tag}.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if "rouge_f1_norm" in record.get("oracle", {}) and "rouge_f1_norm" in record["cpu"]:
                records[record["id"]] = record
    rows, files, own, oracle, folds, declined, confidence, agreement = [], [], [], [], [], [], [], []
    for k, page in enumerate(sequence_set.pages):
        record = records.get(page.doc_id)
        if record is None:
            continue
        cpu = record["cpu"]
        row = route_features(trees["stage1"][k], trees["stage2"][k], page.features, cpu["declined"])
        if shares is not None:
            theirs = shares.get(page.doc_id)
            if theirs is None or len(theirs) != page.n_blocks:
                theirs = np.full(page.n_blocks, -1.0)
            row += agreement_features(theirs, trees["stage2"][k], page.features.chars)
            agreement.append(row[len(ROUTE_NAMES)])
        rows.append(row)
        files.append(record["file"])
        own.append(cpu["rouge_f1_norm"])
        oracle.append(record["oracle"]["rouge_f1_norm"])
        folds.append(int(trees["fold_of"][k]))
        declined.append(cpu["declined"])
        confidence.append(cpu["page_confidence"] or 0.0)
    x, files = np.array(rows), np.array(files)
    own, oracle, folds = np.array(own), np.array(oracle), np.array(folds)
    declined, confidence = np.array(declined), np.array(confidence)
    target = oracle - own if args.target == "gain" else 1.0 - own
    predicted = held_out_predictions(
        x,
        target,
        folds,
        rounds=200,
        num_threads=1,
        feature_fraction=0.8,
        bagging_fraction=0.8,
        bagging_freq=1,
    )
    inputs = ", with Trafilatura agreement" if shares is not None else ""
    print(
        f"{len(own)} pages with oracle labels; target {args.target}{inputs}; site-grouped out-of-fold router"
    )
    print("| file | router | " + " | ".join(f"{s:.0%}" for s in _SHARES) + " |")
    print("|---" * (len(_SHARES) + 2) + "|")
    for file in ("dev", "dev_fundus", "dev_hard"):
        mine = files == file
        if not mine.any():
            continue
        o, s = own[mine], oracle[mine]
        orders = {
            "expected F1 (declined first)": np.lexsort((confidence[mine], ~declined[mine])),
            "learned (declined first)": np.lexsort((-predicted[mine], ~declined[mine])),
            "learned alone": np.argsort(-predicted[mine], kind="stable"),
        }
        if shares is not None:
            lower = np.minimum(confidence, np.array(agreement))[mine]
            orders["min(expected F1, Trafilatura F1)"] = np.lexsort((lower, ~declined[mine]))
        orders["ideal"] = np.argsort(-(s - o), kind="stable")
        for name, order in orders.items():
            print(f"| {file} ({mine.sum()}) | {name} | " + " | ".join(_curve(o, s, order)) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
