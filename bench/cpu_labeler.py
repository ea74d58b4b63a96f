"""The CPU labeler: end-to-end speed against Trafilatura, and out-of-fold quality against the baselines.

Usage::

    .venv/bin/python bench/cpu_labeler.py speed [--data FILE…] [--limit N] [--model MODEL]
    .venv/bin/python bench/cpu_labeler.py quality [--data FILE…] [--by site|page|source] [--folds K]
        [--baselines trafilatura resiliparse readability] [--workers N] [--out SUMMARY.json]

``speed``: one process, pages given as UTF-8 bytes; per chunk of pages, Dripper with the ``cpu`` labeler
(decode, simplify, label, reconstruct, Markdown) then Trafilatura (``extract``, Markdown, tables, no
comments) on the same bytes, alternating so that both see the same machine load. CPU time of this process
is the measure (pages/s per core); wall time is printed too.

``quality``: every page is labelled by a model that never saw it. The training pages (full-text pages of
``--data``) are split into folds grouped by site (``--by site``, the default), by page, or one fold per
source (``--by source``: leave-one-source-out); each page is extracted with the model of the fold that
held out its group (pages outside every fold, such as snippet-only pages, with any fold's model: none saw
them) and scored by ``eval`` (ROUGE-5 F1 raw and normalised, snippet F1) beside the baselines run on the
same pages. Default data: ``../shared/data/dev.jsonl.gz`` and ``dev_hard.jsonl.gz`` (the bundled sample
when absent).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import pickle
import sys
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dripper_core.types import Page  # noqa: E402


def _default_data() -> list[Path]:
    shared = REPO.parent / "shared" / "data"
    files = [shared / "dev.jsonl.gz", shared / "dev_hard.jsonl.gz"]
    if all(path.exists() for path in files):
        return files
    return [REPO / "data" / "sample" / "pages.jsonl.gz"]


def _records(paths: Sequence[Path], limit: int | None) -> list[dict]:
    """The records of the data files, at most ``limit`` per file."""
    from dripper_core.labelers.cpu.train import iter_records

    return [record for path in paths for record in itertools.islice(iter_records(path), limit)]


# -- speed ------------------------------------------------------------------------------------------------


def run_speed(args: argparse.Namespace) -> int:
    from trafilatura import extract as trafilatura_extract

    from dripper_core.labelers.cpu.model import CpuLabeler
    from dripper_core.pipeline import ExtractOptions, Extractor

    records = _records(args.data, args.limit)
    blobs = [(str(r["id"]), r["html"].encode("utf-8"), r.get("url")) for r in records if r.get("html")]
    started = time.process_time()
    labeler = CpuLabeler(model=args.model)
    load_seconds = time.process_time() - started
    extractor = Extractor(labeler, ExtractOptions(fallback="trafilatura", batch_size=args.chunk))
    # Warm both up (imports, lazy tables) outside the measurement.
    extractor.extract_batch([Page(doc_id=blobs[0][0], html=blobs[0][1], url=blobs[0][2])])
    trafilatura_extract(blobs[0][1], url=blobs[0][2], output_format="markdown", include_tables=True)

    cpu = {"dripper:cpu": 0.0, "trafilatura": 0.0}
    wall = dict.fromkeys(cpu, 0.0)
    steps: Counter = Counter()
    extractors: Counter = Counter()
    for offset in range(0, len(blobs), args.chunk):
        chunk = blobs[offset : offset + args.chunk]
        pages = [Page(doc_id=doc_id, html=html, url=url) for doc_id, html, url in chunk]
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        results = extractor.extract_batch(pages)
        cpu["dripper:cpu"] += time.process_time() - cpu_start
        wall["dripper:cpu"] += time.perf_counter() - wall_start
        for result in results:
            extractors[result.extractor] += 1
            for key in ("simplify_seconds", "label_seconds", "render_seconds", "fallback_seconds"):
                steps[key] += result.stats.get(key, 0.0)
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        for _, html, url in chunk:
            trafilatura_extract(
                html, url=url, output_format="markdown", include_tables=True, include_comments=False
            )
        cpu["trafilatura"] += time.process_time() - cpu_start
        wall["trafilatura"] += time.perf_counter() - wall_start

    n = len(blobs)
    print(
        f"pages: {n} from {', '.join(map(str, args.data))}; model loaded in {1000 * load_seconds:.0f} ms CPU"
    )
    print(f"{'extractor':14} {'pages/s per core':>17} {'ms/page (CPU)':>14} {'pages/s (wall)':>15}")
    for name in cpu:
        print(f"{name:14} {n / cpu[name]:17.1f} {1000 * cpu[name] / n:14.1f} {n / wall[name]:15.1f}")
    print(f"ratio dripper:cpu / trafilatura (per core): {cpu['trafilatura'] / cpu['dripper:cpu']:.2f}x")
    print(
        "dripper:cpu steps, ms/page (wall): "
        + ", ".join(f"{key.removesuffix('_seconds')} {1000 * value / n:.1f}" for key, value in steps.items())
    )
    print(f"results by extractor: {dict(extractors)}")
    return 0


# -- quality ----------------------------------------------------------------------------------------------

_worker: dict = {}


def _init_worker(cv, fold_by_key: dict[str, int], baselines: Sequence[str], options: dict) -> None:
    from eval.baselines import get_extractor

    _worker["cv"] = cv
    _worker["options"] = options
    _worker["folds"] = fold_by_key
    _worker["baselines"] = [get_extractor(name) for name in baselines]


def _fold_key(by: str, record: dict) -> str:
    from dripper_core.labelers.cpu.train import site_of

    if by == "page":
        return f"{record.get('source') or 'unknown'}:{record.get('id')}"
    if by == "source":
        return str(record.get("source") or "unknown")
    return site_of(record)


def _fold_model(record: dict) -> int:
    """The fold whose model saw neither this page, nor its site (``site``), nor its source (``source``);
    -1 for a page no training page shares a group with (no fold's model saw it)."""
    return _worker["folds"].get(_fold_key(_worker["cv"].by, record), -1)


def _score_chunk(records: list[dict], pages) -> list:
    """Extract ``pages`` (eval's BenchPages of ``records``) with their fold models and the baselines."""
    from dripper_core.labelers.cpu.model import CpuLabeler
    from dripper_core.pipeline import ExtractOptions, Extractor
    from eval.baselines import ExtractionOutcome, html_to_markdown
    from eval.extraction import PageResult
    from eval.metrics import prepare_ground_truth, score_page

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
        for i, result in zip(indexes, results, strict=True):
            outputs = {
                "dripper:cpu-oof/md": result.markdown,
                "dripper:cpu-oof/html2text": html_to_markdown(result.main_html or "", pages[i].url),
            }
            info = {"extractor": result.extractor, "fallback_reason": result.fallback_reason}
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


def run_quality(args: argparse.Namespace) -> int:
    from dripper_core.labelers.cpu.train import (
        TrainParams,
        build_training_set,
        cross_validate,
        format_scores,
        score_report,
    )
    from eval.datasets import read_pages
    from eval.extraction import ALL_GROUP, GroupStats, _page_record, _row_summary, format_report

    started = time.perf_counter()
    training = build_training_set(args.data, workers=args.workers, limit=args.limit, progress=True)
    if args.load_cv:
        # Our own cache from --save-cv of an earlier run on the same data: re-score without refitting.
        with gzip.open(args.load_cv, "rb") as cached:
            cv = pickle.load(cached)  # noqa: S301
    else:
        params = TrainParams(**{"threads": args.threads, **args.train_param})
        cv = cross_validate(training.pages, params, folds=args.folds, seed=args.seed, by=args.by)
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
                    "source": page.source,
                    "_file": path.name.split(".")[0],
                }
            )
    chunks = [
        (records[offset : offset + args.chunk], bench_pages[offset : offset + args.chunk])
        for offset in range(0, len(records), args.chunk)
    ]
    totals: dict[str, dict[tuple[str, str], GroupStats]] = {}
    pages_out = args.pages_out.open("w", encoding="utf-8") if args.pages_out else None
    with ProcessPoolExecutor(
        max_workers=args.workers,
        initializer=_init_worker,
        initargs=(cv, fold_by_key, args.baselines, args.labeler_option),
    ) as pool:
        for results in pool.map(_score_chunk, *zip(*chunks, strict=True)):
            for result in results:
                if pages_out is not None:
                    pages_out.write(json.dumps(_page_record(result), ensure_ascii=False) + "\n")
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
            "folds": args.folds,
            "seed": args.seed,
            "train_params": args.train_param,
            "labeler_options": args.labeler_option,
        },
        "wall_seconds": time.perf_counter() - started,
        "rows": {row: _row_summary(stats, ("file", "source", "page_type")) for row, stats in totals.items()},
    }
    print(format_report(summary))
    print(f"\nwall time {summary['wall_seconds']:.0f} s")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    speed = modes.add_parser("speed", help="end-to-end pages/s per core against Trafilatura")
    speed.add_argument("--data", type=Path, nargs="+", default=_default_data())
    speed.add_argument("--limit", type=int, default=None, help="pages per file")
    speed.add_argument("--model", default=None, help="model file (default: the shipped one)")
    speed.add_argument("--chunk", type=int, default=32, help="pages per alternation (and labeler batch)")
    speed.set_defaults(handler=run_speed)
    quality = modes.add_parser("quality", help="out-of-fold extraction scores beside the baselines")
    quality.add_argument("--data", type=Path, nargs="+", default=_default_data())
    quality.add_argument("--limit", type=int, default=None, help="pages per file")
    quality.add_argument("--by", choices=("site", "page", "source"), default="site")
    quality.add_argument("--folds", type=int, default=5)
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
        help="CpuLabeler option for the fold models (threshold, min_confidence)",
    )
    quality.add_argument(
        "--train-param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="TrainParams field for the fold models (rounds, learning_rate, num_leaves, ...)",
    )
    quality.add_argument("--out", type=Path, default=None, help="write the summary as JSON here")
    quality.add_argument("--pages-out", type=Path, default=None, help="write per-page scores as JSONL here")
    quality.set_defaults(handler=run_quality)
    args = parser.parse_args(argv)
    if args.mode == "quality":
        from dripper_core.cli import parse_key_values

        args.labeler_option = parse_key_values(args.labeler_option, "--labeler-option")
        args.train_param = parse_key_values(args.train_param, "--train-param")
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
