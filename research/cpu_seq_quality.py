"""How does the ``cpu_seq`` labeler score out of fold beside today's ``cpu``? ``prepare``, ``oof``, ``score``.

Usage::

    OMP_NUM_THREADS=1 .venv/bin/python -m research.cpu_seq_quality prepare [--data FILE…] [--cache DIR]
    OMP_NUM_THREADS=1 .venv/bin/python -m research.cpu_seq_quality oof [--cache DIR] [--epochs N]
    OMP_NUM_THREADS=1 .venv/bin/python -m research.cpu_seq_quality score [--cache DIR] [--out SCORES.jsonl]

``prepare`` builds the training pages with their tokens (``dripper.labelers.cpu_seq.dataset``) and runs the
``cpu`` labeler's site-grouped cross-validation on them (5 folds, ``TrainParams``' defaults, one thread):
its out-of-fold stage-1 and stage-2 probabilities are both today's ``cpu`` out of fold and the tree inputs
the network is stacked on. ``oof`` trains one network per fold on the other folds' pages and scores the held
out ones. ``score`` extracts every page with labels from each model's out-of-fold probabilities (the gates
and the Trafilatura fallback as the labelers apply them), and with the oracle's labels, scores them with the
benchmark's metric (ROUGE-5 raw and normalised, snippet F1), per file and page kind, prints the paired
leads of ``cpu_seq`` over ``cpu``, the reliability of the block probabilities and the cascade's routing
curve (the least confident share of pages relabelled by the oracle, standing in for the LM).

One caveat of the stacking, stated where the figures are: a training page's tree inputs come from the tree
model of its own fold, which saw the held-out fold's pages (the ``cpu`` stage 2 avoids this with nested
fits; here it would cost 15 more tree fits).
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["DEFAULT_CACHE", "load_cached", "main"]

DEFAULT_CACHE = Path(".cache/cpu_seq")


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _dump(value, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb", compresslevel=1) as handle:
        pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)


def load_cached(path: Path):
    with gzip.open(path, "rb") as handle:
        return pickle.load(handle)  # noqa: S301 (our own cache)


def run_prepare(args: argparse.Namespace) -> int:
    from dripper.labelers.cpu.fit import TrainParams
    from dripper.labelers.cpu.train import cross_validate, format_scores, score_report
    from dripper.labelers.cpu_seq.dataset import build_sequence_set

    _log("building the sequence set")
    sequence_set = build_sequence_set(args.data, workers=1, limit=args.limit, progress=True)
    _dump(sequence_set, args.cache / "set.pkl.gz")
    _log(f"{len(sequence_set.pages)} pages; tree cross-validation")
    cv = cross_validate(sequence_set.pages, TrainParams(threads=1), folds=args.folds, seed=0, by="site")
    _dump(
        {"fold_of": cv.fold_of, "models": cv.models, "stage1": cv.stage1, "stage2": cv.probabilities},
        args.cache / "trees_cv.pkl.gz",
    )
    print(format_scores(score_report(sequence_set.pages, cv.probabilities), "cpu out-of-fold (site)"))
    return 0


def _bucketed(tokens, buckets: int):
    from dripper.labelers.cpu_seq.tokens import BlockTokens

    return BlockTokens(
        tokens.text_ids % buckets, tokens.text_offsets, tokens.markup_ids % buckets, tokens.markup_offsets
    )


def seq_params(args: argparse.Namespace):
    """The :class:`SeqTrainParams` of the ``oof`` flags (unset ones: its defaults) and ``--net KEY=VALUE`` shapes."""
    from dataclasses import replace

    from dripper.labelers.cpu_seq.train import SeqTrainParams

    shapes = {key: int(value) for key, value in (item.split("=", 1) for item in args.net)}
    defaults = SeqTrainParams()
    return SeqTrainParams(
        config=replace(defaults.config, **shapes),
        epochs=defaults.epochs if args.epochs is None else args.epochs,
        learning_rate=defaults.learning_rate if args.lr is None else args.lr,
        weight_decay=defaults.weight_decay if args.weight_decay is None else args.weight_decay,
        dropout=defaults.dropout if args.dropout is None else args.dropout,
        batch=defaults.batch if args.batch is None else args.batch,
    )


def run_oof(args: argparse.Namespace) -> int:
    from dripper.labelers.cpu.train import format_scores, score_report
    from dripper.labelers.cpu_seq.dataset import stage_logits
    from dripper.labelers.cpu_seq.network import numeric_inputs
    from dripper.labelers.cpu_seq.train import fit_network

    sequence_set = load_cached(args.cache / "set.pkl.gz")
    trees = load_cached(args.cache / "trees_cv.pkl.gz")
    pages, tokens, logits = (
        sequence_set.pages,
        sequence_set.tokens,
        stage_logits(trees["stage1"], trees["stage2"]),
    )
    params = seq_params(args)
    fold_of = trees["fold_of"]
    oof: list = [None] * len(pages)
    started = time.perf_counter()
    for fold in range(int(fold_of.max()) + 1):
        _log(f"fold {fold + 1}: training on {int((fold_of != fold).sum())} pages")
        network = fit_network(pages, tokens, logits, np.flatnonzero(fold_of != fold), params, seed=args.seed)
        held = np.flatnonzero(fold_of == fold)
        inputs = [
            (numeric_inputs(pages[i].features, logits[i]), _bucketed(tokens[i], network.config.buckets))
            for i in held
        ]
        for i, p in zip(held, network.probabilities(inputs), strict=True):
            oof[i] = p
    _log(f"out of fold in {time.perf_counter() - started:.0f} s")
    _dump({"probabilities": oof, "params": repr(params)}, args.cache / f"seq_oof{args.tag}.pkl.gz")
    print(format_scores(score_report(pages, trees["stage2"]), "cpu out-of-fold (site)"))
    print(format_scores(score_report(pages, oof), "cpu_seq out-of-fold (site)"))
    return 0


def _fixed_labeler(answers: dict):
    """A labeler that answers each page (by doc id) with labels computed beforehand."""
    from dripper.labelers.base import BlockLabeler, Labels

    class FixedLabeler(BlockLabeler):
        name = "fixed"

        def label_batch(self, requests):
            out = []
            for request in requests:
                answer = answers.get(request.simplified.doc_id)
                if answer is None or (
                    answer.main is not None and len(answer.main) != request.simplified.n_blocks
                ):
                    answer = Labels.failed("no precomputed labels for this page")
                out.append(answer)
            return out

    return FixedLabeler()


_ROWS = ("cpu", "cpu_seq", "oracle")


def run_score(args: argparse.Namespace) -> int:
    from dripper.eval.datasets import read_pages
    from dripper.eval.metrics import prepare_ground_truth, score_page
    from dripper.labelers.base import Labels
    from dripper.labelers.cpu.decision import gate_labels
    from dripper.pipeline import ExtractOptions, Extractor, prepare_page
    from dripper.types import Page

    sequence_set = load_cached(args.cache / "set.pkl.gz")
    trees = load_cached(args.cache / "trees_cv.pkl.gz")
    seq = load_cached(args.cache / f"seq_oof{args.tag}.pkl.gz")["probabilities"]
    gate = dict(
        threshold=0.4, decision="expected_f1", min_confidence=args.min_confidence, min_page=args.min_page
    )
    answers: dict[str, dict[str, Labels]] = {row: {} for row in _ROWS}
    for k, page in enumerate(sequence_set.pages):
        chars = page.features.chars
        answers["cpu"][page.doc_id] = gate_labels(trees["stage2"][k], chars, **gate)
        answers["cpu_seq"][page.doc_id] = gate_labels(seq[k], chars, **gate)
        if not page.partial:
            answers["oracle"][page.doc_id] = Labels(main=page.labels.tolist(), page_confidence=1.0)
    extractors = {
        row: Extractor(_fixed_labeler(answers[row]), ExtractOptions(fallback="trafilatura")) for row in _ROWS
    }
    records = []
    started = time.perf_counter()
    for path in args.data:
        file = path.name.split(".")[0]
        for bench in read_pages(path, limit=args.limit):
            page = Page(doc_id=bench.id, html=bench.html, url=bench.url)
            prepared = prepare_page(page)
            prepared_gt = prepare_ground_truth(
                bench.ground_truth, bench.with_snippets, bench.without_snippets
            )
            record = {"id": bench.id, "file": file, "source": bench.source, "page_type": bench.page_type}
            for row, extractor in extractors.items():
                if row == "oracle" and bench.id not in answers["oracle"]:
                    continue
                result = extractor.extract_simplified([(page, prepared.simplified, prepared.problem)])[0]
                record[row] = score_page(result.markdown or "", prepared_gt)
                record[row]["page_confidence"] = result.stats.get("page_confidence")
                record[row]["declined"] = (result.fallback_reason or "").startswith(
                    "label_failed: low confidence"
                )
                record[row]["fallback_reason"] = result.fallback_reason
            records.append(record)
        _log(f"{path.name}: scored ({time.perf_counter() - started:.0f} s)")
    out = args.out or (args.cache / f"scores{args.tag}.jsonl")
    with out.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    print(report(records, sequence_set, trees["stage2"], seq))
    return 0


def _mean(values) -> float:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else float("nan")


def report(records: list[dict], sequence_set=None, tree_p=None, seq_p=None) -> str:
    """Tables: ROUGE per file and page kind, paired leads, routing curve, reliability."""
    lines = [
        "| set | pages | cpu raw / norm | cpu_seq raw / norm | oracle norm | lead norm [95%] |",
        "|---|---|---|---|---|---|",
    ]

    def groups():
        yield "dev", [r for r in records if r["file"] == "dev"]
        yield "dev_fundus", [r for r in records if r["file"] == "dev_fundus"]
        yield "articles (dev+fundus)", [r for r in records if r["file"] in ("dev", "dev_fundus")]
        hard = [r for r in records if r["file"] == "dev_hard"]
        yield "dev_hard", hard
        for kind in sorted({r["page_type"] or r["source"] for r in hard}):
            yield f"dev_hard {kind}", [r for r in hard if (r["page_type"] or r["source"]) == kind]

    for name, rows in groups():
        full = [r for r in rows if "rouge_f1" in r["cpu"]]
        if full:
            a = np.array([r["cpu"]["rouge_f1_norm"] for r in full])
            b = np.array([r["cpu_seq"]["rouge_f1_norm"] for r in full])
            lead = paired_bootstrap(b - a) if len(full) > 1 else (float(b.mean() - a.mean()), 0.0, 0.0)
            lines.append(
                f"| {name} | {len(full)} | {_mean(r['cpu']['rouge_f1'] for r in full):.3f} / {a.mean():.3f} | "
                f"{_mean(r['cpu_seq']['rouge_f1'] for r in full):.3f} / {b.mean():.3f} | "
                f"{_mean(r.get('oracle', {}).get('rouge_f1_norm') for r in full):.3f} | "
                f"{lead[0]:+.3f} [{lead[1]:+.3f}, {lead[2]:+.3f}] |"
            )
        snip = [r for r in rows if "snip_tp" in r["cpu"]]
        if snip:
            lines.append(
                f"| {name} snippets | {len(snip)} | F1 {_snippet_f1(snip, 'cpu'):.3f} | F1 {_snippet_f1(snip, 'cpu_seq'):.3f} | | |"
            )
    lines += ["", _routing(records)]
    if sequence_set is not None:
        lines += ["", _reliability(sequence_set, tree_p, seq_p)]
    return "\n".join(lines)


def paired_bootstrap(
    differences: np.ndarray, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean page-for-page difference and its 95% bootstrap interval over pages."""
    rng = np.random.default_rng(seed)
    means = differences[rng.integers(0, len(differences), size=(resamples, len(differences)))].mean(axis=1)
    return float(differences.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def _snippet_f1(rows: list[dict], row: str) -> float:
    tp = sum(r[row]["snip_tp"] for r in rows)
    fn = sum(r[row]["snip_fn"] for r in rows)
    fp = sum(r[row]["snip_fp"] for r in rows)
    return 2 * tp / (2 * tp + fn + fp) if tp else 0.0


def _routing(records: list[dict], shares=(0.1, 0.2, 0.3, 0.4, 0.5)) -> str:
    """Normalised ROUGE of a cascade that sends each model's least sure share of pages to the oracle
    (declined pages first, then by page confidence), per file; the loss against the oracle everywhere."""
    lines = [
        "| file | router | alone | "
        + " | ".join(f"{s:.0%} routed" for s in shares)
        + " | ideal 30% | oracle |"
    ]
    lines.append("|---" * (len(shares) + 5) + "|")
    for file in ("dev", "dev_fundus", "dev_hard"):
        rows = [r for r in records if r["file"] == file and "oracle" in r and "rouge_f1_norm" in r["oracle"]]
        if not rows:
            continue
        oracle = np.array([r["oracle"]["rouge_f1_norm"] for r in rows])
        for model in ("cpu", "cpu_seq"):
            own = np.array([r[model]["rouge_f1_norm"] for r in rows])
            score = np.array(
                [(0 if r[model]["declined"] else 1, r[model]["page_confidence"] or 0.0) for r in rows]
            )
            order = np.lexsort((score[:, 1], score[:, 0]))
            cells = []
            for share in shares:
                routed = order[: int(round(share * len(rows)))]
                mixed = own.copy()
                mixed[routed] = oracle[routed]
                cells.append(f"{mixed.mean():.3f} ({mixed.mean() - oracle.mean():+.3f})")
            gain = np.sort(oracle - own)[::-1][: int(round(0.3 * len(rows)))]
            lines.append(
                f"| {file} ({len(rows)}) | {model} | {own.mean():.3f} | "
                + " | ".join(cells)
                + f" | {own.mean() + gain.sum() / len(rows):.3f} | {oracle.mean():.3f} |"
            )
    return "\n".join(lines)


def _reliability(sequence_set, tree_p, seq_p, bins=10) -> str:
    """Block reliability: per probability bin, the character-weighted share of main blocks (labelled pages)."""
    lines = [
        "| p bin | cpu blocks | cpu main share | cpu_seq blocks | cpu_seq main share |",
        "|---|---|---|---|---|",
    ]
    stats = {}
    for name, probabilities in (("cpu", tree_p), ("cpu_seq", seq_p)):
        p_all, y_all, w_all = [], [], []
        for page, p in zip(sequence_set.pages, probabilities, strict=True):
            keep = page.features.chars > 0
            if page.known is not None:
                keep &= page.known
            p_all.append(p[keep])
            y_all.append(page.labels[keep])
            w_all.append(page.features.chars[keep])
        p, y, w = map(np.concatenate, (p_all, y_all, w_all))
        index = np.minimum((p * bins).astype(int), bins - 1)
        stats[name] = [
            (int((index == b).sum()), float((w * y)[index == b].sum() / max(w[index == b].sum(), 1)))
            for b in range(bins)
        ]
        brier = float(np.average((p - y) ** 2, weights=w))
        stats[name + "_brier"] = brier
    for b in range(bins):
        lines.append(
            f"| {b / bins:.1f}–{(b + 1) / bins:.1f} | {stats['cpu'][b][0]} | {stats['cpu'][b][1]:.3f} | "
            f"{stats['cpu_seq'][b][0]} | {stats['cpu_seq'][b][1]:.3f} |"
        )
    lines.append(f"| char-weighted Brier | | {stats['cpu_brier']:.4f} | | {stats['cpu_seq_brier']:.4f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    from research.labeler_sweep import default_data

    parser = argparse.ArgumentParser(
        prog="python -m research.cpu_seq_quality", description=__doc__.split("\n")[0]
    )
    modes = parser.add_subparsers(dest="mode", required=True)
    prepare = modes.add_parser("prepare")
    prepare.add_argument("--data", type=Path, nargs="+", default=default_data())
    prepare.add_argument("--limit", type=int, default=None)
    prepare.add_argument("--folds", type=int, default=5)
    prepare.set_defaults(handler=run_prepare)
    oof = modes.add_parser("oof")
    oof.add_argument("--epochs", type=int, default=None, help="default SeqTrainParams'")
    oof.add_argument("--seed", type=int, default=0)
    oof.add_argument("--net", nargs="*", default=[], metavar="KEY=VALUE", help="NetworkConfig fields")
    oof.add_argument("--tag", default="", help="suffix of the cached out-of-fold file")
    oof.add_argument("--lr", type=float, default=None, help="learning rate (default SeqTrainParams')")
    oof.add_argument("--weight-decay", type=float, default=None)
    oof.add_argument("--dropout", type=float, default=None)
    oof.add_argument("--batch", type=int, default=None, help="windows per step")
    oof.set_defaults(handler=run_oof)
    score = modes.add_parser("score")
    score.add_argument("--data", type=Path, nargs="+", default=default_data())
    score.add_argument("--limit", type=int, default=None)
    score.add_argument("--tag", default="")
    score.add_argument("--min-confidence", type=float, default=0.85)
    score.add_argument("--min-page", type=float, default=0.85)
    score.add_argument("--out", type=Path, default=None, help="per-page scores (JSONL)")
    score.set_defaults(handler=run_score)
    for mode in modes.choices.values():
        mode.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
