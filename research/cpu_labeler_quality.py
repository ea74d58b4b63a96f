"""How does the CPU labeler score out of fold beside the baselines? ``quality`` and ``compare``.

Usage::

    .venv/bin/python -m research.cpu_labeler_quality quality [--data FILE…] [--by site|page|source]
        [--folds K] [--lump-sources NAME=SOURCE,SOURCE…] [--train-param KEY=VALUE…]
        [--labeler-option KEY=VALUE…] [--baselines trafilatura resiliparse readability] [--workers N]
        [--out SUMMARY.json] [--pages-out PAGES.jsonl] [--save-cv CV.pkl.gz | --load-cv CV.pkl.gz]
        [--resamples R]
    .venv/bin/python -m research.cpu_labeler_quality compare PAGES.jsonl [--previous EARLIER_PAGES.jsonl]

``quality``: every page is labelled by a model that never saw it. The training pages (full-text pages of
``--data``) are split into folds grouped by site (``--by site``, the default), by page, or one fold per
source (``--by source``: leave-one-source-out; ``--lump-sources NAME=A,B`` holds A and B out together, as
one fold); each page is extracted with the model of the fold that held out its group (pages outside every
fold, such as snippet-only pages, with any fold's model: none saw them) and scored by ``eval`` (ROUGE-5 F1
raw and normalised, snippet F1) beside the baselines run on the same pages. The fold models are trained
with the shipped model's settings (``TrainParams``' defaults; ``--train-param KEY=VALUE`` changes one).
Default data: ``../shared/data/`` ``dev``, ``dev_hard`` and ``dev_fundus`` (those present; the bundled
sample when none is). It ends with the model's lead over each baseline, per file and on the article files
(dev and dev_fundus) together, with a 95% paired-bootstrap interval over the pages (``dripper.eval.paired``): a
lead whose interval excludes zero is marked as beyond noise.
Beside the model's row it scores ``dripper:cpu-oof/ungated``: the model's own labels on every page, the
pages its confidence gates (``min_confidence``, ``min_page_confidence``) send to the fallback included, with
each page's best block confidence and page confidence (the expected F1 of its labels) in the per-page info;
the last table says, per file, how the declined pages score with the fallback and with the model's labels
(what the gate gains or loses), then replays other pairs of gates from those two numbers, with the share
of pages each would send to the fallback (``compare`` prints it too).

``compare``: the same leads from a ``--pages-out`` file, and with ``--previous`` (the ``--pages-out`` of
an earlier run on the same pages, e.g. with the code of the shipped model) also the lead over that run's
model, so a retrained model is compared page for page with the one it replaces.
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

from dripper.types import Page
from research.labeler_sweep import ARTICLE_FILES, default_data, lump_spec, lumped_sources

__all__ = ["add_parsers", "format_gate", "main", "run_compare", "run_quality"]

_worker: dict = {}


def _init_worker(cv, fold_by_key: dict[str, int], baselines: Sequence[str], options: dict) -> None:
    from dripper.eval.baselines import get_extractor

    _worker["cv"] = cv
    _worker["options"] = options
    _worker["folds"] = fold_by_key
    _worker["baselines"] = [get_extractor(name) for name in baselines]


def _fold_key(by: str, record: dict) -> str:
    from dripper.labelers.cpu.training_set import site_of

    if by == "page":
        return f"{record.get('source') or 'unknown'}:{record.get('id')}"
    if by == "source":
        return str(record.get("source") or "unknown")
    return site_of(record)


def _fold_model(record: dict) -> int:
    """The fold whose model saw neither this page, nor its site (``site``), nor its source (``source``);
    -1 for a page no training page shares a group with (no fold's model saw it)."""
    return _worker["folds"].get(_fold_key(_worker["cv"].by, record), -1)


# The model's own labels on every page, the pages its confidence gate declines included: what the gate
# (``min_confidence``) gains or loses against the fallback, page for page (``best_confidence`` in the
# per-page info says where each page stands against any other gate).
_UNGATED_ROW = "dripper:cpu-oof/ungated"
# The model's row with Trafilatura's fast mode as the fallback of the declined pages (``trafilatura_fast``).
_FAST_ROW = "dripper:cpu-oof/fast-fallback"
_LOW_CONFIDENCE = "label_failed: low confidence"


def _declined(fallback_reason: str | None) -> bool:
    """Whether a page went to the fallback because the confidence gate declined it."""
    return (fallback_reason or "").startswith(_LOW_CONFIDENCE)


def _ungated(labeler, pages: list) -> list:
    """The results of ``labeler``'s model without its confidence gate (and no fallback) on ``pages``."""
    if not pages:
        return []
    from dripper.labelers.cpu.model import CpuLabeler
    from dripper.pipeline import ExtractOptions, Extractor

    open_labeler = CpuLabeler(
        model=labeler.model,
        threshold=labeler.threshold,
        min_confidence=0.0,
        decision=labeler.decision,
        min_page_confidence=0.0,
        trafilatura_weight=labeler.trafilatura_weight,
    )
    return Extractor(open_labeler, ExtractOptions(fallback=None)).extract_batch(pages)


def _with_fallback(labeler, pages: list, fallback: str) -> list:
    """``pages`` through the pipeline with another fallback (the labeler's gate as it is)."""
    if not pages:
        return []
    from dripper.pipeline import ExtractOptions, Extractor

    return Extractor(labeler, ExtractOptions(fallback=fallback)).extract_batch(pages)


def _score_chunk(records: list[dict], pages) -> list:
    """Extract ``pages`` (eval's BenchPages of ``records``) with their fold models and the baselines."""
    from dripper.eval.baselines import ExtractionOutcome, html_to_markdown
    from dripper.eval.extraction import PageResult
    from dripper.eval.metrics import prepare_ground_truth, score_page
    from dripper.labelers.cpu.model import CpuLabeler
    from dripper.pipeline import ExtractOptions, Extractor

    cv = _worker["cv"]
    outcomes: dict[int, ExtractionOutcome] = {}
    by_model: dict[int, list[int]] = {}
    for index, record in enumerate(records):
        fold = _fold_model(record)
        by_model.setdefault(fold if fold >= 0 else 0, []).append(index)
    for fold, indexes in by_model.items():
        labeler = CpuLabeler(model=cv.models[fold], **_worker["options"])
        extractor = Extractor(labeler, ExtractOptions(fallback="trafilatura"))
        core_pages = [Page(doc_id=pages[i].id, html=pages[i].html, url=pages[i].url) for i in indexes]
        started = time.perf_counter()
        results = extractor.extract_batch(core_pages)
        share = (time.perf_counter() - started) / len(indexes)
        declined = [position for position, result in enumerate(results) if _declined(result.fallback_reason)]
        ungated = dict(zip(declined, _ungated(labeler, [core_pages[k] for k in declined]), strict=True))
        fast_results = _with_fallback(labeler, [core_pages[k] for k in declined], "trafilatura_fast")
        fast = dict(zip(declined, fast_results, strict=True))
        for position, (i, result) in enumerate(zip(indexes, results, strict=True)):
            own = ungated.get(position, result)
            fast_result = fast.get(position)
            outputs = {
                "dripper:cpu-oof/md": result.markdown,
                "dripper:cpu-oof/html2text": html_to_markdown(result.main_html or "", pages[i].url),
                _UNGATED_ROW: own.markdown,
                _FAST_ROW: (fast_result or result).markdown,
            }
            info = {
                "extractor": result.extractor,
                "fallback_reason": result.fallback_reason,
                "best_confidence": max(own.stats.get("confidence") or [0.0]),
                "page_confidence": own.stats.get("page_confidence"),
                "fallback_seconds": result.stats.get("fallback_seconds"),
                "fast_fallback_seconds": fast_result.stats.get("fallback_seconds") if fast_result else None,
            }
            outcomes[i] = ExtractionOutcome(outputs, share, None, info)
    baseline_outcomes = [extractor.extract_pages(pages) for extractor in _worker["baselines"]]
    results = []
    for index, page in enumerate(pages):
        prepared = prepare_ground_truth(page.ground_truth, page.with_snippets, page.without_snippets)
        groups = {
            "file": records[index]["_file"],
            "source": page.group_value("source"),
            "page_type": page.group_value("page_type"),
        }
        for outcome in [outcomes[index], *(per_page[index] for per_page in baseline_outcomes)]:
            for row, text in outcome.outputs.items():
                scores = score_page(text, prepared)
                results.append(
                    PageResult(
                        page.id, row, groups, scores, outcome.seconds, outcome.error, None, outcome.info
                    )
                )
    return results


_LEAD_ROW = "dripper:cpu-oof/md"  # the row whose lead over each baseline is bootstrapped
_PREVIOUS_ROW = "previous model"  # the out-of-fold row of an earlier run (compare --previous)


def run_quality(args: argparse.Namespace) -> int:
    """The ``quality`` subcommand (see the module docstring)."""
    from dripper.config.settings import parse_key_values
    from dripper.eval.datasets import read_pages
    from dripper.eval.extraction import ALL_GROUP, GroupStats, format_report, page_record, row_summary
    from dripper.eval.paired import format_leads
    from dripper.labelers.cpu.fit import TrainParams
    from dripper.labelers.cpu.train import cross_validate, format_scores, score_report
    from dripper.labelers.cpu.training_set import build_training_set

    args.labeler_option = parse_key_values(args.labeler_option, "--labeler-option")
    args.train_param = parse_key_values(args.train_param, "--train-param")
    started = time.perf_counter()
    training = build_training_set(args.data, workers=args.workers, limit=args.limit, progress=True)
    # --train-exclude-source: the fold models never train on these sources' pages, which are still scored.
    trainable = [page.source not in set(args.train_exclude_source) for page in training.pages]
    # --lump-sources: several sources form one fold of --by source (held out together, named as one).
    lumped = lumped_sources(args.lump_sources)
    for page in training.pages:
        page.source = lumped.get(page.source, page.source)
    if args.load_cv:
        # Our own cache from --save-cv of an earlier run on the same data: re-score without refitting.
        with gzip.open(args.load_cv, "rb") as cached:
            cv = pickle.load(cached)  # noqa: S301
    else:
        params = TrainParams(**{"threads": args.threads, **args.train_param})
        cv = cross_validate(
            training.pages, params, folds=args.folds, seed=args.seed, by=args.by, trainable=trainable
        )
    if args.save_cv:
        with gzip.open(args.save_cv, "wb") as cache:
            pickle.dump(cv, cache)
    print(format_scores(score_report(training.pages, cv.stage1), f"stage 1 out-of-fold ({args.by})"))
    print(format_scores(score_report(training.pages, cv.probabilities), f"model out-of-fold ({args.by})"))
    fold_by_key: dict[str, int] = {}
    for page, fold in zip(training.pages, cv.fold_of, strict=True):
        record = {"id": page.doc_id, "source": page.source}
        fold_by_key[page.site if args.by == "site" else _fold_key(args.by, record)] = int(fold)

    # The fold keys (site_of reads the URL and the HTML) and the report's file group, from eval's own
    # reading of the files: each file is parsed once, and the dicts share the pages' HTML strings.
    bench_pages, records = [], []
    for path in args.data:
        for page in read_pages(path, limit=args.limit):
            bench_pages.append(page)
            records.append(
                {
                    "id": page.id,
                    "url": page.url,
                    "html": page.html,
                    "source": lumped.get(page.source, page.source),
                    "_file": path.name.split(".")[0],
                }
            )
    chunks = [
        (records[offset : offset + args.chunk], bench_pages[offset : offset + args.chunk])
        for offset in range(0, len(records), args.chunk)
    ]
    totals: dict[str, dict[tuple[str, str], GroupStats]] = {}
    page_records: list[dict] = []  # every row's page scores, for the paired bootstrap
    pages_out = args.pages_out.open("w", encoding="utf-8") if args.pages_out else None
    with ProcessPoolExecutor(
        max_workers=args.workers,
        initializer=_init_worker,
        initargs=(cv, fold_by_key, args.baselines, args.labeler_option),
    ) as pool:
        for results in pool.map(_score_chunk, *zip(*chunks, strict=True)):
            for result in results:
                record = page_record(result)
                record.pop("text", None)
                page_records.append(record)
                if pages_out is not None:
                    pages_out.write(json.dumps(record, ensure_ascii=False) + "\n")
                stats = totals.setdefault(result.row, {})
                stats.setdefault((ALL_GROUP, ALL_GROUP), GroupStats()).add(result)
                for key, value in result.groups.items():
                    stats.setdefault((key, value), GroupStats()).add(result)
    if pages_out is not None:
        pages_out.close()
    summary = {
        "config": {
            "data": [str(p) for p in args.data],
            "by": args.by,
            "lump_sources": {name: sources for name, sources in args.lump_sources},
            "folds": args.folds,
            "seed": args.seed,
            "train_params": args.train_param,
            "train_exclude_sources": args.train_exclude_source,
            "labeler_options": args.labeler_option,
        },
        "wall_seconds": time.perf_counter() - started,
        "rows": {row: row_summary(stats, ("file", "source", "page_type")) for row, stats in totals.items()},
    }
    leads = _leads(page_records, args.resamples)
    summary["leads"] = [asdict(lead) for lead in leads]
    print(format_report(summary))
    print(format_leads(leads))
    print(format_gate(page_records))
    print(f"\nwall time {summary['wall_seconds']:.0f} s")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0


def _leads(page_records: Iterable[dict], resamples: int, previous: Iterable[dict] = ()) -> list:
    """The paired-bootstrap leads of the out-of-fold model over each baseline (and over ``previous``'s
    model, a per-page file of an earlier run on the same pages), on each file and on the article files."""
    from dripper.eval.paired import paired_leads

    per_page: dict[str, dict[str, dict]] = {}  # row -> page id -> scores
    page_sets: dict[str, list[str]] = {}
    for record in page_records:
        per_page.setdefault(record["extractor"], {})[record["id"]] = record
        if record["extractor"] == _LEAD_ROW:
            page_sets.setdefault(f"file={record['file']}", []).append(record["id"])
            if record["file"] in ARTICLE_FILES:
                page_sets.setdefault("articles", []).append(record["id"])
    for record in previous:
        if record["extractor"] == _LEAD_ROW:
            per_page.setdefault(_PREVIOUS_ROW, {})[record["id"]] = record
    if _LEAD_ROW not in per_page:
        return []
    # Our other rows (the same labels through html2text) are not baselines.
    baselines = sorted(row for row in per_page if row == _PREVIOUS_ROW or not row.startswith("dripper:"))
    return paired_leads(per_page, _LEAD_ROW, page_sets, baselines, resamples=resamples)


def run_compare(args: argparse.Namespace) -> int:
    """The ``compare`` subcommand (see the module docstring)."""
    from dripper.eval.paired import format_leads

    def read(path: Path) -> list[dict]:
        with path.open(encoding="utf-8") as lines:
            return [json.loads(line) for line in lines if line.strip()]

    records = read(args.pages)
    leads = _leads(records, args.resamples, read(args.previous) if args.previous else ())
    print(format_leads(leads))
    print(format_gate(records))
    return 0 if leads else 1


# (best block confidence, page confidence) gates to replay: the block gate alone, then the page gate
# (the expected F1 of the model's labels) on top of the shipped block gate.
_OTHER_GATES = (
    (0.7, 0.0),
    (0.8, 0.0),
    (0.9, 0.0),
    (0.94, 0.0),
    (0.85, 0.8),
    (0.85, 0.85),
    (0.85, 0.88),
    (0.85, 0.9),
    (0.85, 0.92),
    (0.85, 0.94),
)


def format_gate(page_records: Iterable[dict], metric: str = "rouge_f1_norm", gates=_OTHER_GATES) -> str:
    """What the confidence gate did, per file: the pages it declined, their mean ``metric`` with the
    fallback's output (what the model row scored) and with the model's own labels (the ungated row); then
    each file's mean under other ``gates`` (pairs of a block gate and a page gate), from each page's best
    block confidence and page confidence (the expected F1 of the model's labels): a declined page that
    passes both takes the model's labels, a kept page that fails one the ``trafilatura`` row's score (the
    fallback's extractor, scored as that baseline's row), with the share of model-labelled pages that
    would go to the fallback (what the gate costs in speed: each runs Trafilatura)."""
    wanted = (_LEAD_ROW, _UNGATED_ROW, _FAST_ROW, "trafilatura")
    rows: dict[tuple[str, str], dict[str, dict]] = {}
    for record in page_records:
        if record.get("extractor") in wanted and record.get(metric) is not None:
            rows.setdefault((record.get("file", "?"), record["id"]), {})[record["extractor"]] = record
    per_file: dict[str, list[tuple[float, float, float | None, float, float]]] = {}
    pages: list[tuple[str, dict, dict, dict | None]] = []  # file, gated, ungated, trafilatura
    for (file, _), row in rows.items():
        gated, ungated, fast = row.get(_LEAD_ROW), row.get(_UNGATED_ROW), row.get(_FAST_ROW)
        if gated is None or ungated is None:
            continue
        pages.append((file, gated, ungated, row.get("trafilatura")))
        if _declined_record(gated):
            info = gated.get("info") or {}
            per_file.setdefault(file, []).append(
                (
                    gated[metric],
                    ungated[metric],
                    fast[metric] if fast is not None else None,
                    info.get("fallback_seconds") or 0.0,
                    info.get("fast_fallback_seconds") or 0.0,
                )
            )
    lines = [
        f"\nconfidence gate ({metric}; pages declined, mean with the fallback, with Trafilatura's fast mode as"
        " the fallback, and with the model's labels; the two fallbacks' ms per declined page):"
    ]
    if not per_file:
        lines.append("  no page with both rows was declined")
    for file, found in sorted(per_file.items()):
        n = len(found)
        fallback = sum(f[0] for f in found) / n
        own = sum(f[1] for f in found) / n
        fast_scores = [f[2] for f in found if f[2] is not None]
        fast_cell = f"  fast {sum(fast_scores) / len(fast_scores):.3f}" if fast_scores else ""
        lines.append(
            f"  {file:12} {n:5d} pages  fallback {fallback:.3f}{fast_cell}  model {own:.3f}"
            f"  gate gains {fallback - own:+.3f}  fallback {sum(f[3] for f in found) / n * 1e3:.1f} ms,"
            f" fast {sum(f[4] for f in found) / n * 1e3:.1f} ms"
        )
    if pages and all(trafilatura is not None for *_, trafilatura in pages):
        lines.append(
            "  other gates (block gate / page gate: per file, mean, pages that change side, share declined):"
        )
        for block_gate, page_gate in gates:
            sums: dict[str, list[float]] = {}
            for file, gated, ungated, trafilatura in pages:
                info = gated.get("info") or {}
                kept = (info.get("best_confidence") or 0.0) >= block_gate and (
                    info.get("page_confidence") or 0.0
                ) >= page_gate
                score, moved = gated[metric], 0
                if _declined_record(gated) and kept:
                    score, moved = ungated[metric], 1
                elif not _declined_record(gated) and not kept and _by_model(gated):
                    score, moved = trafilatura[metric], 1
                total = sums.setdefault(file, [0.0, 0, 0, 0, 0])
                total[0] += score
                total[1] += 1
                total[2] += moved
                if _by_model(gated) or _declined_record(gated):
                    total[3] += 1
                    total[4] += not kept
            cells = ", ".join(
                f"{file} {t[0] / t[1]:.3f} ({t[2]}, {t[4] / max(t[3], 1):.0%})"
                for file, t in sorted(sums.items())
            )
            lines.append(f"    {block_gate:.2f} / {page_gate:.2f}: {cells}")
    return "\n".join(lines)


def _declined_record(record: dict) -> bool:
    return _declined((record.get("info") or {}).get("fallback_reason"))


def _by_model(record: dict) -> bool:
    return str((record.get("info") or {}).get("extractor") or "").startswith("dripper:")


def add_parsers(modes) -> None:
    """Add ``quality`` and ``compare`` to ``modes`` (an ``ArgumentParser.add_subparsers()``)."""
    quality = modes.add_parser("quality", help="out-of-fold extraction scores beside the baselines")
    quality.add_argument("--data", type=Path, nargs="+", default=default_data())
    quality.add_argument("--limit", type=int, default=None, help="pages per file")
    quality.add_argument("--by", choices=("site", "page", "source"), default="site")
    quality.add_argument(
        "--lump-sources",
        action="append",
        default=[],
        type=lump_spec,
        metavar="NAME=SOURCE,SOURCE",
        help="with --by source: these sources are one fold, NAME (repeatable)",
    )
    quality.add_argument("--folds", type=int, default=5)
    quality.add_argument(
        "--train-exclude-source",
        action="append",
        default=[],
        metavar="SOURCE",
        help="train the fold models without this source's pages, still scoring them (repeatable)",
    )
    quality.add_argument("--seed", type=int, default=0)
    quality.add_argument("--threads", type=int, default=2, help="threads per model fit")
    quality.add_argument("--workers", type=int, default=2, help="processes for features and scoring")
    quality.add_argument("--chunk", type=int, default=32)
    quality.add_argument(
        "--baselines",
        nargs="*",
        default=["trafilatura", "resiliparse", "readability"],
        help="eval extractors",
    )
    quality.add_argument("--save-cv", type=Path, default=None, help="keep the fold models here (.pkl.gz)")
    quality.add_argument("--load-cv", type=Path, default=None, help="fold models from --save-cv: no refit")
    quality.add_argument(
        "--labeler-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="CpuLabeler option for the fold models (threshold, min_confidence, min_page_confidence, decision, "
        "trafilatura_weight)",
    )
    quality.add_argument(
        "--train-param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="TrainParams field for the fold models (rounds, learning_rate, num_leaves, ...)",
    )
    quality.add_argument(
        "--resamples", type=int, default=2000, help="paired-bootstrap resamples of the leads over baselines"
    )
    quality.add_argument("--out", type=Path, default=None, help="write the summary as JSON here")
    quality.add_argument("--pages-out", type=Path, default=None, help="write per-page scores as JSONL here")
    quality.set_defaults(handler=run_quality)

    compare = modes.add_parser("compare", help="the leads of a quality run, from its --pages-out file")
    compare.add_argument("pages", type=Path, help="per-page scores of a quality run (--pages-out)")
    compare.add_argument(
        "--previous", type=Path, default=None, help="per-page scores of an earlier run: its model as a row"
    )
    compare.add_argument("--resamples", type=int, default=2000)
    compare.set_defaults(handler=run_compare)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_parsers(parser.add_subparsers(dest="mode", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
