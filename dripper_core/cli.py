"""The ``dripper`` command line.

``dripper extract --input PAGES --output OUT --labeler NAME`` runs the extraction pipeline over a JSONL(.gz)
file of page records (``id``, ``html``, optional ``url``; the format of ``../shared/data/dev.jsonl.gz``) or a
single HTML file, writing one JSONL record per input page.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from dripper_core.types import ExtractResult, Page

OUTPUT_FORMATS = ("markdown", "html", "json")


def read_pages(path: Path) -> Iterator[Page]:
    """Pages from a JSONL(.gz) file of records, or a single HTML file (id = file name).

    A record without ``id`` or ``html`` still yields a page (with an empty html), so it gets an output
    record with its reason instead of vanishing.
    """
    if path.suffix in (".html", ".htm") or (path.suffix != ".gz" and not _looks_like_jsonl(path)):
        yield Page(doc_id=path.name, html=path.read_bytes())
        return
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                yield Page(doc_id=f"line-{number}", html="", metadata={"input_error": f"bad JSON: {error}"})
                continue
            yield _page_from_record(record, number)


def _looks_like_jsonl(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(64).lstrip().startswith(b"{")


def _page_from_record(record: dict, number: int) -> Page:
    ground_truth = record.get("ground_truth_text")
    if ground_truth is None and record.get("with_snippets"):
        ground_truth = "\n".join(record["with_snippets"])
    html = record.get("html")
    return Page(
        doc_id=str(record.get("id", f"line-{number}")),
        html=html if isinstance(html, str | bytes) else "",
        url=record.get("url"),
        ground_truth=ground_truth,
        metadata={"input_error": "record has no html"} if not isinstance(html, str) else {},
    )


def result_record(result: ExtractResult, output_format: str) -> dict:
    """The output JSONL record of one result."""
    record = {
        "id": result.doc_id,
        "url": result.url,
        "markdown": result.markdown,
        "main_html": result.main_html,
        "extractor": result.extractor,
        "fallback_reason": result.fallback_reason,
        "n_blocks": result.stats.get("n_blocks", 0),
        "seconds": round(result.stats.get("seconds", 0.0), 5),
    }
    if output_format == "markdown":
        del record["main_html"]
    elif output_format == "html":
        del record["markdown"]
    else:
        record["labels"] = result.labels
        record["stats"] = {k: v for k, v in result.stats.items() if k != "confidence"}
    return record


def _progress(total: int | None):
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="page", desc="extract", file=sys.stderr)


def run_extract(args: argparse.Namespace) -> int:
    from dripper_core.pipeline import ExtractOptions, Extractor

    options = ExtractOptions(
        fallback=None if args.fallback == "none" else args.fallback,
        batch_size=args.batch_size,
        max_page_bytes=args.max_page_bytes,
    )
    extractor = Extractor(args.labeler, options)
    pages = read_pages(Path(args.input))
    if args.limit:
        pages = (page for index, page in enumerate(pages) if index < args.limit)
    out = sys.stdout if args.output == "-" else _open_output(Path(args.output))
    reasons: Counter = Counter()
    by_extractor: Counter = Counter()
    started = time.perf_counter()
    bar = _progress(None)
    count = 0
    try:
        for result in extractor.iter_extract(pages):
            out.write(json.dumps(result_record(result, args.format), ensure_ascii=False) + "\n")
            count += 1
            by_extractor[result.extractor] += 1
            if result.fallback_reason:
                reasons[result.fallback_reason.split(":")[0]] += 1
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        if out is not sys.stdout:
            out.close()
        extractor.close()
    elapsed = time.perf_counter() - started
    summary = {
        "pages": count,
        "seconds": round(elapsed, 2),
        "pages_per_second": round(count / elapsed, 2) if elapsed else None,
        "by_extractor": dict(by_extractor),
        "fallback_reasons": dict(reasons),
        "output": args.output,
    }
    print(json.dumps(summary), file=sys.stderr)
    return 0


def _open_output(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        return gzip.open(path, "wt", encoding="utf-8")
    return path.open("w", encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    from dripper_core.fallback import available_fallbacks
    from dripper_core.labelers import available_labelers
    from dripper_core.pipeline import DEFAULT_LABELER

    parser = argparse.ArgumentParser(prog="dripper", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    extract = commands.add_parser("extract", help="extract main content from pages")
    extract.add_argument(
        "--input", required=True, help="JSONL(.gz) of {id, html, url} records, or an HTML file"
    )
    extract.add_argument("--output", required=True, help="output JSONL(.gz) path, or - for stdout")
    extract.add_argument("--labeler", default=DEFAULT_LABELER, choices=available_labelers())
    extract.add_argument("--fallback", default="trafilatura", choices=[*available_fallbacks(), "none"])
    extract.add_argument(
        "--format", default="json", choices=OUTPUT_FORMATS, help="which content fields to write"
    )
    extract.add_argument("--batch-size", type=int, default=64, help="pages per labeler call")
    extract.add_argument("--max-page-bytes", type=int, default=20_000_000)
    extract.add_argument("--limit", type=int, default=0, help="stop after N pages (0: all)")
    extract.set_defaults(handler=run_extract)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (FileNotFoundError, KeyError, ValueError) as error:
        print(f"dripper: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
