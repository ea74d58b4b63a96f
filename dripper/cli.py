"""The ``dripper`` command line.

``dripper extract --input PAGES --output OUT --labeler NAME`` runs the extraction pipeline over a JSONL(.gz)
file of page records (``id``, ``html``, optional ``url``; the format of the bundled
``data/sample/pages.jsonl.gz``) or a single HTML file, writing one JSONL record per input page.

``dripper run simplify|extract …`` runs a data-plane stage over a run root (see ``dripper run --help``).
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
from typing import Any

from dripper.types import ExtractResult, Page

OUTPUT_FORMATS = ("markdown", "text", "html", "json")


class PageSource:
    """Pages from a JSONL(.gz) file of records, or a single HTML file (id = file name).

    A record without ``id`` or ``html`` still yields a page (with an empty html), so it gets an output
    record with its reason instead of vanishing. A truncated or corrupt file yields every record before the
    damage; :attr:`damage` then says what stopped it (see :class:`dripper.io.jsonl.JsonlReader`).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.damage: str | None = None
        self.records = 0

    def __iter__(self) -> Iterator[Page]:
        from dripper.io.jsonl import JsonlError, JsonlReader

        path = self.path
        if path.suffix in (".html", ".htm") or (path.suffix != ".gz" and not _looks_like_jsonl(path)):
            self.records = 1
            yield Page(doc_id=path.name, html=path.read_bytes())
            return
        reader = JsonlReader(path)
        for number, record in reader:
            self.records = reader.records
            if isinstance(record, JsonlError):
                yield Page(doc_id=f"line-{number}", html="", metadata={"input_error": record.message})
            else:
                yield _page_from_record(record, number)
        self.records, self.damage = reader.records, reader.damage


def read_pages(path: Path) -> Iterator[Page]:
    """Pages from a JSONL(.gz) file or an HTML file (see :class:`PageSource`; damage ends the pages)."""
    yield from PageSource(path)


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
    if output_format == "text":  # plain text, paragraphs kept: what DripperExtractor writes by default
        from dripper.markdown_text import markdown_plain_text

        del record["main_html"], record["markdown"]
        record["text"] = markdown_plain_text(result.markdown) if result.markdown else ""
    elif output_format == "markdown":
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


DUPLICATE_POLICIES = ("keep", "skip", "error")


class _Interrupted(Exception):
    pass


def _stop_on_signals() -> tuple[dict[str, Any], Any]:
    """SIGINT/SIGTERM set a flag the extraction loop checks between pages (the page being written is
    finished, the output closed cleanly); a second signal stops at once."""
    import signal

    state: dict[str, Any] = {"signal": None}
    previous = {}

    def handler(number, frame):
        if state["signal"] is not None:
            raise KeyboardInterrupt
        state["signal"] = signal.Signals(number).name

    for number in (signal.SIGINT, signal.SIGTERM):
        previous[number] = signal.signal(number, handler)

    def restore() -> None:
        for number, old in previous.items():
            signal.signal(number, old)

    return state, restore


def _done_ids(path: Path) -> tuple[set[str], int]:
    """Ids already in an output file (for ``--resume``); a damaged tail (an interrupted write) is cut off by
    rewriting the complete records."""
    from dripper.io.jsonl import JsonlError, JsonlReader

    if not path.exists():
        return set(), 0
    reader = JsonlReader(path)
    read = [record for _, record in reader]
    records = [record for record in read if not isinstance(record, JsonlError)]
    if reader.damage or len(records) < len(read):
        with _open_output(path, append=False) as out:
            for record in records:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return {str(record.get("id")) for record in records}, len(records)


def run_extract(args: argparse.Namespace) -> int:
    from dripper.cli_run import extractor_from_arguments
    from dripper.config.extract import ExtractStageConfig
    from dripper.config.extractor import check_labeler_options
    from dripper.pipeline import ExtractOptions, Extractor

    spec = ExtractStageConfig.parse(extractor=extractor_from_arguments(args)).extractor
    check_labeler_options([spec])  # a clear message before any engine starts
    options = ExtractOptions(batch_size=args.batch_size, max_page_bytes=args.max_page_bytes)
    source = PageSource(Path(args.input))
    to_stdout = args.output == "-"
    if args.resume and to_stdout:
        raise ValueError("--resume needs an output file, not stdout")
    done, kept = _done_ids(Path(args.output)) if args.resume else (set(), 0)
    extractor = Extractor.from_spec(spec, options)
    seen: dict[str, int] = {}
    duplicates: list[str] = []

    def pages() -> Iterator[Page]:
        for index, page in enumerate(source):
            if args.limit and index >= args.limit:
                return
            if page.doc_id in seen:
                duplicates.append(page.doc_id)
                if args.on_duplicate == "error":
                    raise ValueError(
                        f"{args.input}: id {page.doc_id!r} appears again (record {index + 1}, first at record "
                        f"{seen[page.doc_id] + 1}); use --on-duplicate keep|skip"
                    )
                if args.on_duplicate == "skip":
                    continue
            else:
                seen[page.doc_id] = index
            if page.doc_id in done:
                continue  # written by the interrupted run this one resumes
            if signals["signal"] is not None:
                raise _Interrupted
            yield page

    out = sys.stdout if to_stdout else _open_output(Path(args.output), append=args.resume)
    reasons: Counter = Counter()
    by_extractor: Counter = Counter()
    started = time.perf_counter()
    bar = _progress(None)
    count = 0
    signals, restore_signals = _stop_on_signals()
    interrupted = None
    try:
        for result in extractor.iter_extract(pages()):
            out.write(json.dumps(result_record(result, args.format), ensure_ascii=False) + "\n")
            out.flush()
            count += 1
            by_extractor[result.extractor] += 1
            if result.fallback_reason:
                reasons[result.fallback_reason.split(":")[0]] += 1
            if bar is not None:
                bar.update(1)
            if signals["signal"] is not None:
                raise _Interrupted
    except (_Interrupted, KeyboardInterrupt):
        interrupted = signals["signal"] or "SIGINT"
    finally:
        restore_signals()
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
        **({"route": extractor.route_summary()} if extractor.route is not None else {}),
        "duplicate_ids": {"count": len(duplicates), "first": duplicates[:10], "policy": args.on_duplicate},
        "output": args.output,
    }
    if args.resume:
        summary["resumed_after"] = kept
    if interrupted:
        summary["interrupted"] = interrupted
    print(json.dumps(summary), file=sys.stderr)
    if duplicates:
        action = {"keep": "kept", "skip": "skipped (first record kept)"}[args.on_duplicate]
        print(
            f"dripper: warning: {len(duplicates)} records repeat an earlier id ({', '.join(duplicates[:5])}"
            f"{', …' if len(duplicates) > 5 else ''}): {action}; --on-duplicate keep|skip|error",
            file=sys.stderr,
        )
    if interrupted:
        print(
            f"dripper: interrupted ({interrupted}) after {count} records; the output holds every record written "
            f"so far: rerun the same command with --resume to complete it",
            file=sys.stderr,
        )
        return 130 if interrupted == "SIGINT" else 143
    if source.damage:
        print(
            f"dripper: error: {args.input}: {source.damage}; read {source.records} records before the damage "
            f"and wrote their results to {args.output}",
            file=sys.stderr,
        )
        return 1
    return 0


def _open_output(path: Path, append: bool = False):
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "at" if append else "wt"
    if path.suffix == ".gz":
        return gzip.open(path, mode, encoding="utf-8")  # appending adds a gzip member: still one file
    return path.open(mode[0], encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    from dripper.cli_run import add_extractor_arguments
    from dripper.cli_train import add_train_labeler_parser
    from dripper.config.extract import ExtractStageConfig
    from dripper.config.simplify import SimplifyStageConfig

    parser = argparse.ArgumentParser(prog="dripper", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    extract = commands.add_parser("extract", help="extract main content from pages")
    extract.add_argument(
        "--input", required=True, help="JSONL(.gz) of {id, html, url} records, or an HTML file"
    )
    extract.add_argument("--output", required=True, help="output JSONL(.gz) path, or - for stdout")
    add_extractor_arguments(extract)
    ExtractStageConfig.add_arguments(extract, ["batch_size"])
    extract.add_argument(
        "--format",
        default="json",
        choices=OUTPUT_FORMATS,
        help="which content fields to write (text: the Markdown as plain text, paragraphs kept)",
    )
    SimplifyStageConfig.add_arguments(extract, ["max_page_bytes"])
    extract.add_argument("--limit", type=int, default=0, help="stop after N pages (0: all)")
    extract.add_argument(
        "--on-duplicate",
        default="keep",
        choices=DUPLICATE_POLICIES,
        help="a record whose id was seen before: keep it, skip it, or stop with an error (default: keep; "
        "always counted in the summary)",
    )
    extract.add_argument(
        "--resume",
        action="store_true",
        help="append to an existing output, skipping the ids already in it (after an interrupted run)",
    )
    extract.set_defaults(handler=run_extract)
    from dripper.cli_run import add_run_parser

    add_run_parser(commands)
    add_train_labeler_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (FileNotFoundError, KeyError, ValueError) as error:
        if args.debug:
            raise
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"dripper: error: {message}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - one line for the user; --debug for the traceback
        if args.debug:
            raise
        print(
            f"dripper: error: {type(error).__name__}: {error} (--debug shows the traceback)", file=sys.stderr
        )
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
