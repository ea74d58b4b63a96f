"""Extraction benchmark: run extractors over evaluation pages and report ROUGE-5 and snippet scores.

Usage::

    python -m dripper.eval.extraction --data /work/shared/data/dev.jsonl.gz \\
        --extractor trafilatura resiliparse readability html2text dripper:oracle \\
        [--extractor-spec qwen=vllm,model=/models/MinerU-HTML,answer_format=json] [--extractors-file F.yaml] \\
        [--limit N] [--group-by source,page_type] [--out results.json] [--pages-out pages.jsonl] [--workers N]

``--extractor-spec`` and ``--extractors-file`` take extractor specs (``dripper.config.extractor``: the
format ``dripper run extract`` and the DAGs read); each is our pipeline with that labeler, options and
fallback, in rows ``dripper:{name}/md`` and ``dripper:{name}/html2text``.

Per result row (an extractor, or one view of ``dripper:<labeler>``) it prints a table over the whole data and
each group: pages, full-text pages, ROUGE-5 F1 mean raw and normalised, snippet micro P/R/F1, errors, and
pages/s over measured extraction time only (scoring excluded; per process when ``--workers`` > 1).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dripper.eval.baselines import Extractor, available_extractors, get_extractor
from dripper.eval.datasets import BenchPage, read_pages
from dripper.eval.metrics import SnippetCounts, prepare_ground_truth, score_page

DEFAULT_GROUP_BY = ("source", "page_type")
DEFAULT_CHUNK_SIZE = 64
ALL_GROUP = "all"


@dataclass(slots=True)
class BenchmarkConfig:
    """What to run. The CLI options map one to one onto these fields.

    Attributes:
        data: JSONL files (dev format or WebMainBench schema, plain or gzip).
        extractors: Extractor names, e.g. ``["trafilatura", "dripper:oracle"]``, or extractor specs
            (:class:`dripper.config.extractor.ExtractorSpec`).
        limit: Read at most this many pages per file.
        group_by: Grouping keys for the per-group tables (``source``, ``page_type``, ``language``, or any
            WebMainBench ``meta`` key such as ``level`` and ``style``).
        out: Write the summary (overall and per group, per row) as JSON here.
        pages_out: Write one JSON line per page and row (scores, time, error) here.
        keep_text: Include the extracted text in ``pages_out`` lines.
        workers: Processes to run chunks in; 1 runs in this process.
        chunk_size: Pages per unit of work (and per ``dripper`` batch).
    """

    data: list[Path]
    extractors: list[Any]
    limit: int | None = None
    group_by: tuple[str, ...] = DEFAULT_GROUP_BY
    out: Path | None = None
    pages_out: Path | None = None
    keep_text: bool = False
    workers: int = 1
    chunk_size: int = DEFAULT_CHUNK_SIZE

    def __post_init__(self) -> None:
        if not self.data:
            raise ValueError("no --data file given")
        if not self.extractors:
            raise ValueError(f"no --extractor given; available: {', '.join(available_extractors())}")
        if self.workers < 1:
            raise ValueError(f"--workers {self.workers}: must be at least 1")
        if self.chunk_size < 1:
            raise ValueError(f"--chunk-size {self.chunk_size}: must be at least 1")
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"--limit {self.limit}: must not be negative")


@dataclass(slots=True)
class PageResult:
    """One page scored for one result row."""

    page_id: str
    row: str
    groups: dict[str, str]
    scores: dict[str, float | int]
    seconds: float
    error: str | None = None
    text: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class GroupStats:
    """Running totals of one row over one group of pages."""

    pages: int = 0
    full_text_pages: int = 0
    rouge_f1_sum: float = 0.0
    rouge_f1_norm_sum: float = 0.0
    snippet_pages: int = 0
    snippets: SnippetCounts = field(default_factory=SnippetCounts)
    errors: int = 0
    fallbacks: int = 0
    seconds: float = 0.0

    def add(self, result: PageResult) -> None:
        self.pages += 1
        self.seconds += result.seconds
        self.errors += result.error is not None
        self.fallbacks += bool(result.info.get("fallback_reason"))
        scores = result.scores
        if "rouge_f1" in scores:
            self.full_text_pages += 1
            self.rouge_f1_sum += scores["rouge_f1"]
            self.rouge_f1_norm_sum += scores["rouge_f1_norm"]
        if "snip_tp" in scores:
            self.snippet_pages += 1
            self.snippets = self.snippets + SnippetCounts(
                int(scores["snip_tp"]), int(scores["snip_fn"]), int(scores["snip_fp"]), int(scores["snip_tn"])
            )

    def summary(self) -> dict[str, Any]:
        """The reported figures; ``None`` where the group has no page of that kind.

        ``fallbacks`` counts pages where a ``dripper:*`` extractor reported a ``fallback_reason``.
        """
        full = self.full_text_pages
        precision, recall, f1 = self.snippets.precision_recall_f1()
        has_snippets = self.snippet_pages > 0
        return {
            "pages": self.pages,
            "full_text_pages": full,
            "rouge5_f1": self.rouge_f1_sum / full if full else None,
            "rouge5_f1_norm": self.rouge_f1_norm_sum / full if full else None,
            "snippet_pages": self.snippet_pages,
            "snippet_precision": precision if has_snippets else None,
            "snippet_recall": recall if has_snippets else None,
            "snippet_f1": f1 if has_snippets else None,
            "errors": self.errors,
            "fallbacks": self.fallbacks,
            "extract_seconds": self.seconds,
            "pages_per_second": self.pages / self.seconds if self.seconds > 0 else None,
        }


# Extractors built once per worker process and reused across its chunks (readability, trafilatura and the
# dripper labelers all have non-trivial set-up).
_worker_extractors: dict[str, Extractor] = {}


def evaluate_chunk(
    pages: Sequence[BenchPage],
    extractors: Sequence[Extractor],
    group_by: Sequence[str],
    keep_text: bool = False,
) -> list[PageResult]:
    """Extract and score a chunk of pages with every extractor; the ground truth is tokenised once per page.

    Args:
        pages: The pages.
        extractors: Built extractors (see :func:`dripper.eval.baselines.get_extractor`).
        group_by: Grouping keys whose values are recorded on each result.
        keep_text: Keep the extracted text on each result.

    Returns:
        One :class:`PageResult` per page and result row, pages in order.
    """
    outcomes = [extractor.extract_pages(pages) for extractor in extractors]
    results = []
    for index, page in enumerate(pages):
        prepared = prepare_ground_truth(page.ground_truth, page.with_snippets, page.without_snippets)
        groups = {key: page.group_value(key) for key in group_by}
        for per_extractor in outcomes:
            outcome = per_extractor[index]
            for row, text in outcome.outputs.items():
                results.append(
                    PageResult(
                        page_id=page.id,
                        row=row,
                        groups=groups,
                        scores=score_page(text, prepared),
                        seconds=outcome.seconds,
                        error=outcome.error,
                        text=text if keep_text else None,
                        info=outcome.info,
                    )
                )
    return results


def _extractor_key(spec: Any) -> str:
    return spec if isinstance(spec, str) else json.dumps(spec.to_dict(), sort_keys=True)


def _evaluate_chunk_in_worker(
    pages: list[BenchPage], specs: Sequence[Any], group_by: Sequence[str], keep_text: bool
) -> list[PageResult]:
    for spec in specs:
        if _extractor_key(spec) not in _worker_extractors:
            _worker_extractors[_extractor_key(spec)] = get_extractor(spec)
    return evaluate_chunk(pages, [_worker_extractors[_extractor_key(s)] for s in specs], group_by, keep_text)


def _chunks(pages: Iterator[BenchPage], size: int) -> Iterator[list[BenchPage]]:
    chunk: list[BenchPage] = []
    for page in pages:
        chunk.append(page)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _all_pages(config: BenchmarkConfig) -> Iterator[BenchPage]:
    for path in config.data:
        yield from read_pages(path, limit=config.limit)


def _iter_results(config: BenchmarkConfig, extractors: Sequence[Extractor]) -> Iterator[list[PageResult]]:
    chunks = _chunks(_all_pages(config), config.chunk_size)
    if config.workers == 1:
        for chunk in chunks:
            yield evaluate_chunk(chunk, extractors, config.group_by, config.keep_text)
        return
    with ProcessPoolExecutor(max_workers=config.workers) as pool:
        # Bounded submission: at most 2 chunks per worker in flight, so a 70 MB file is not pickled at once.
        pending = []
        for chunk in chunks:
            args = (chunk, config.extractors, config.group_by, config.keep_text)
            pending.append(pool.submit(_evaluate_chunk_in_worker, *args))
            if len(pending) >= 2 * config.workers:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()


def run_benchmark(config: BenchmarkConfig, progress: bool | None = None) -> dict[str, Any]:
    """Run the benchmark and return the summary (also written to ``config.out`` / ``config.pages_out``).

    Args:
        config: What to run.
        progress: Show a progress bar; by default only when stderr is a terminal.

    Returns:
        ``{"config": ..., "rows": {row: {"all": stats, "groups": {key: {value: stats}}}}, "wall_seconds": s}``
        where ``stats`` is :meth:`GroupStats.summary`.

    Raises:
        KeyError: For an unknown extractor name (before any page is read).
    """
    # Built here even with workers: a bad name or a missing dependency fails before any page is read.
    extractors = [get_extractor(spec) for spec in config.extractors]
    rows = [row for extractor in extractors for row in extractor.output_names()]
    duplicates = sorted({row for row in rows if rows.count(row) > 1})
    if duplicates:
        raise ValueError(f"result rows {duplicates} requested twice; list each extractor (or view) once")
    totals: dict[str, dict[tuple[str, str], GroupStats]] = {row: {} for row in rows}
    if progress is None:
        progress = sys.stderr.isatty()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(unit="page", desc="extract+score")
    pages_out = config.pages_out.open("w", encoding="utf-8") if config.pages_out else None
    start = time.perf_counter()
    try:
        for results in _iter_results(config, extractors):
            for result in results:
                stats = totals[result.row]
                stats.setdefault((ALL_GROUP, ALL_GROUP), GroupStats()).add(result)
                for key, value in result.groups.items():
                    stats.setdefault((key, value), GroupStats()).add(result)
                if pages_out:
                    pages_out.write(json.dumps(page_record(result), ensure_ascii=False) + "\n")
            if bar is not None:
                bar.update(len(results) // len(rows))  # every page yields one result per row
    finally:
        if bar is not None:
            bar.close()
        if pages_out:
            pages_out.close()
        for extractor in extractors:
            extractor.close()  # LM engines: their processes must not outlive the benchmark
    summary = {
        "config": {key: _jsonable(value) for key, value in asdict(config).items()},
        "wall_seconds": time.perf_counter() - start,
        "rows": {row: row_summary(totals[row], config.group_by) for row in rows},
    }
    if config.out:
        config.out.parent.mkdir(parents=True, exist_ok=True)
        config.out.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return summary


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if hasattr(value, "to_dict"):  # an extractor spec
        return value.to_dict()
    return value


def page_record(result: PageResult) -> dict[str, Any]:
    """One ``--pages-out`` line of ``result``: the page id, its row (``extractor``), groups and scores,
    seconds and error, and its ``info`` and ``text`` when it has them."""
    record: dict[str, Any] = {"id": result.page_id, "extractor": result.row, **result.groups, **result.scores}
    record["seconds"] = round(result.seconds, 6)
    record["error"] = result.error
    if result.info:
        record["info"] = result.info
    if result.text is not None:
        record["text"] = result.text
    return record


def row_summary(stats: dict[tuple[str, str], GroupStats], group_by: Sequence[str]) -> dict[str, Any]:
    """One row's part of a run summary: ``all`` (every page) and, per key of ``group_by``, each group's
    summary, from ``stats`` keyed by ``(key, value)`` (``(ALL_GROUP, ALL_GROUP)`` for every page)."""
    overall = stats.get((ALL_GROUP, ALL_GROUP), GroupStats())
    groups: dict[str, dict[str, Any]] = {key: {} for key in group_by}
    for (key, value), group in sorted(stats.items()):
        if key != ALL_GROUP:
            groups[key][value] = group.summary()
    return {"all": overall.summary(), "groups": groups}


_COLUMNS = (
    ("pages", "pages", "{:d}"),
    ("full", "full_text_pages", "{:d}"),
    ("R5-F1", "rouge5_f1", "{:.3f}"),
    ("R5-F1 norm", "rouge5_f1_norm", "{:.3f}"),
    ("snip", "snippet_pages", "{:d}"),
    ("snip-P", "snippet_precision", "{:.3f}"),
    ("snip-R", "snippet_recall", "{:.3f}"),
    ("snip-F1", "snippet_f1", "{:.3f}"),
    ("errors", "errors", "{:d}"),
    ("pages/s", "pages_per_second", "{:.1f}"),
)


def format_table(title: str, labelled: list[tuple[str, dict[str, Any]]]) -> str:
    """Render ``(label, stats)`` rows as a fixed-width text table under ``title``."""
    header = ["group", *(name for name, _, _ in _COLUMNS)]
    lines = [header] + [
        [label, *("-" if stats[key] is None else fmt.format(stats[key]) for _, key, fmt in _COLUMNS)]
        for label, stats in labelled
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    rendered = [
        "  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(line))
        for line in lines
    ]
    return "\n".join([f"== {title} ==", *rendered])


def format_report(summary: dict[str, Any]) -> str:
    """The printed report: one table per row (overall, then each group), then a comparison of rows."""
    blocks = []
    for row, data in summary["rows"].items():
        labelled = [(ALL_GROUP, data["all"])]
        for key, values in data["groups"].items():
            labelled.extend((f"{key}={value}", stats) for value, stats in values.items())
        blocks.append(format_table(row, labelled))
    if len(summary["rows"]) > 1:
        blocks.append(format_table("overall", [(row, data["all"]) for row, data in summary["rows"].items()]))
    return "\n\n".join(blocks)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dripper.eval.extraction",
        description="Score main-content extractors with ROUGE-5 F1 (raw and normalised) and snippet P/R/F1.",
    )
    parser.add_argument(
        "--data", nargs="+", type=Path, required=True, help="JSONL(.gz) files, dev or WebMainBench"
    )
    parser.add_argument(
        "--extractor-spec",
        nargs="+",
        default=[],
        metavar="SPEC",
        help="extractor specs: NAME=LABELER,key=value,… (or a labeler name, or JSON); rows dripper:NAME/…",
    )
    parser.add_argument(
        "--extractors-file", type=Path, default=None, help="YAML/JSON file with a list of extractor specs"
    )
    parser.add_argument(
        "--extractor",
        nargs="+",
        default=[],
        help=f"extractor names: {', '.join(available_extractors())} (dripper takes ':<labeler>[/md|/html2text]')",
    )
    parser.add_argument("--limit", type=int, default=None, help="read at most N pages per file")
    parser.add_argument(
        "--group-by",
        default=",".join(DEFAULT_GROUP_BY),
        help="comma-separated grouping keys: source, page_type, language, or WebMainBench meta keys "
        "(level, style, table, code, equation); '' for none (default: %(default)s)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the summary as JSON here")
    parser.add_argument("--pages-out", type=Path, default=None, help="write per-page scores as JSONL here")
    parser.add_argument("--keep-text", action="store_true", help="include extracted text in --pages-out")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (default: %(default)s)")
    parser.add_argument(
        "--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE, help="pages per work unit and dripper batch"
    )
    parser.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from dripper.config.extractor import (
            check_labeler_options,
            load_extractor_file,
            parse_extractors,
        )

        specs = load_extractor_file(args.extractors_file) if args.extractors_file else []
        if args.extractor_spec:
            specs += parse_extractors(args.extractor_spec)
        if specs:
            specs = parse_extractors(specs)  # names unique across both sources
            check_labeler_options(specs)
        config = BenchmarkConfig(
            data=list(args.data),
            extractors=list(args.extractor) + specs,
            limit=args.limit,
            group_by=tuple(key.strip() for key in args.group_by.split(",") if key.strip()),
            out=args.out,
            pages_out=args.pages_out,
            keep_text=args.keep_text,
            workers=args.workers,
            chunk_size=args.chunk_size,
        )
        summary = run_benchmark(config, progress=False if args.no_progress else None)
    except (KeyError, ValueError, ImportError, FileNotFoundError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {message}", file=sys.stderr)
        return 2
    print(format_report(summary))
    print(f"\nwall time {summary['wall_seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
