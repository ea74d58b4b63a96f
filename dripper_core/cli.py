"""The ``dripper`` command line.

``dripper extract --input PAGES --output OUT --labeler NAME`` runs the extraction pipeline over a JSONL(.gz)
file of page records (``id``, ``html``, optional ``url``; the format of ``../shared/data/dev.jsonl.gz``) or a
single HTML file, writing one JSONL record per input page.

``dripper run simplify|extract …`` runs a data-plane stage over a run root (see ``dripper run --help``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
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
    from dripper_core.labelers import build_labeler
    from dripper_core.pipeline import ExtractOptions, Extractor

    options = ExtractOptions(
        fallback=None if args.fallback == "none" else args.fallback,
        batch_size=args.batch_size,
        max_page_bytes=args.max_page_bytes,
    )
    labeler_options = parse_key_values(args.labeler_option, "--labeler-option")
    extractor = Extractor(build_labeler(args.labeler, **labeler_options), options)
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
    from dripper_core.cli_train import add_train_labeler_parser
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
    extract.add_argument(
        "--labeler-option",
        action="append",
        metavar="KEY=VALUE",
        help="labeler build option, repeatable (e.g. model=/models/MinerU-HTML, threshold=0.6)",
    )
    extract.add_argument("--fallback", default="trafilatura", choices=[*available_fallbacks(), "none"])
    extract.add_argument(
        "--format", default="json", choices=OUTPUT_FORMATS, help="which content fields to write"
    )
    extract.add_argument("--batch-size", type=int, default=64, help="pages per labeler call")
    extract.add_argument("--max-page-bytes", type=int, default=20_000_000)
    extract.add_argument("--limit", type=int, default=0, help="stop after N pages (0: all)")
    extract.set_defaults(handler=run_extract)
    _add_run_parser(commands)
    add_train_labeler_parser(commands)
    return parser


# -- dripper run simplify|extract ----------------------------------------------------------------------

RUN_DESCRIPTION = """Run a data-plane stage over a run root (a local folder or a URL such as s3://bucket/run).

Each stage writes {ROOT}/{stage}/part-NNNNN.parquet with a marker per finished shard, a stage summary,
and {ROOT}/_run_summary.json (pages in and out, drops and fallbacks by reason, time per stage). A rerun
skips finished shards: an interrupted run is resumed by running the same command again.
"""

SIMPLIFY_EPILOG = """--input forms (several may be given):
  snapshot:CRAWL_ID[@BASE]   a crawl's warc.paths.gz under BASE: s3 (Common Crawl's bucket, the default),
                             https (its HTTPS mirror) or a folder/URL laid out like Common Crawl,
                             e.g. snapshot:CC-MAIN-SAMPLE@data/sample (the bundled sample)
  PATH/warc.paths.gz         a listing; relative entries resolve against the folder above crawl-data/
  FILE, FOLDER or GLOB       WARC files (.warc, .warc.gz), local or s3://…, e.g. 's3://b/crawl/*.warc.gz'
Listed files are taken in a deterministic order (--seed); --count/--fraction take a prefix of it, so a
larger --count keeps the shard numbers of a smaller one.

examples:
  dripper run simplify --input snapshot:CC-MAIN-SAMPLE@data/sample --output runs/sample --workers 2
  dripper run simplify --input snapshot:CC-MAIN-2025-13 --count 10 --output s3://my-bucket/run \\
      --storage-option endpoint_url=http://127.0.0.1:9000 --scheduler tcp://10.0.0.5:8786
"""

EXTRACT_EPILOG = """--labeler takes a registered name or an import path module:factory (a BlockLabeler factory).
Extracted shard i is made from simplified shard i; only finished simplified shards are read. A rerun
skips finished extracted shards whatever labeler made them: use a new --output root (or --force) to
extract again with another labeler.

examples:
  dripper run extract --input runs/sample --output runs/sample --labeler trafilatura
  dripper run extract --input s3://my-bucket/run --output s3://my-bucket/run --labeler vllm \\
      --labeler-option model=/models/dripper --batch-size 256
"""


def _parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_key_values(pairs: list[str] | None, flag: str) -> dict:
    """``["a=1", "client_kwargs.region_name=eu-west-1"]`` → ``{"a": 1, "client_kwargs": {"region_name": …}}``.

    Values are JSON when they parse as JSON (numbers, true/false, null, objects), else strings.
    """
    options: dict = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(
                f"{flag} {pair!r}: expected KEY=VALUE, e.g. {flag} endpoint_url=http://127.0.0.1:9000"
            )
        target = options
        *parents, leaf = key.split(".")
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = _parse_value(value)
    return options


def _add_common_run_options(parser: argparse.ArgumentParser, workers_help: str) -> None:
    parser.add_argument("--workers", type=int, default=None, help=workers_help)
    parser.add_argument(
        "--scheduler", default=None, help="address of an existing Dask scheduler (tcp://host:8786)"
    )
    parser.add_argument(
        "--storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="fsspec option of the run root, repeatable (endpoint_url=…, key=…, client_kwargs.region_name=…)",
    )
    parser.add_argument("--force", action="store_true", help="recompute shards that are already done")
    parser.add_argument("--quiet", action="store_true", help="no progress display, warnings only")


def _add_run_parser(commands) -> None:
    from dripper_core.pipeline import DEFAULT_LABELER

    run = commands.add_parser(
        "run",
        help="run a data-plane stage (simplify, extract) over a run root",
        description=RUN_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    stages = run.add_subparsers(dest="stage", required=True)

    simplify = stages.add_parser(
        "simplify",
        help="WARC files → {ROOT}/simplified/ shards (Dask)",
        description="Simplify the HTML pages of WARC files into {ROOT}/simplified/, one shard per WARC file.",
        epilog=SIMPLIFY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    simplify.add_argument("--input", required=True, nargs="+", help="WARC inputs (forms below)")
    simplify.add_argument("--output", required=True, help="the run root")
    _add_common_run_options(
        simplify, "Dask LocalCluster worker processes (default: one per core; 0: in this process)"
    )
    simplify.add_argument(
        "--input-storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="fsspec option of the inputs, repeatable (default: the --storage-option values)",
    )
    selection = simplify.add_mutually_exclusive_group()
    selection.add_argument("--count", type=int, default=None, help="take this many WARC files")
    selection.add_argument("--fraction", type=float, default=None, help="take this share of the WARC files")
    simplify.add_argument("--seed", default="0", help="selection seed (default 0)")
    simplify.add_argument("--warcs-per-shard", type=int, default=1, help="WARC files per shard (default 1)")
    simplify.add_argument(
        "--max-payload-bytes", type=int, default=None, help="larger WARC payloads are dropped as too_large"
    )
    simplify.set_defaults(handler=run_simplify_stage)

    extract = stages.add_parser(
        "extract",
        help="{ROOT}/simplified/ → {ROOT}/extracted/ with a labeler",
        description="Label the simplified pages of a run root and write {ROOT}/extracted/ (DESIGN.md columns).",
        epilog=EXTRACT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    extract.add_argument("--input", required=True, help="the run root holding simplified/")
    extract.add_argument("--output", default=None, help="the run root for extracted/ (default: --input)")
    extract.add_argument(
        "--labeler",
        default=DEFAULT_LABELER,
        help=f"labeler name or module:factory (default {DEFAULT_LABELER})",
    )
    extract.add_argument(
        "--labeler-option", action="append", metavar="KEY=VALUE", help="labeler build option, repeatable"
    )
    extract.add_argument("--batch-size", type=int, default=64, help="pages per labeler call (default 64)")
    extract.add_argument("--fallback", default="trafilatura", help="fallback name, or none")
    _add_common_run_options(
        extract,
        "0 (default): in this process, one labeler (a GPU engine) for all shards; "
        "N: a Dask LocalCluster of N processes, a labeler each",
    )
    extract.set_defaults(workers=0, handler=run_extract_stage)


def _configure_run_logging(quiet: bool) -> bool | None:
    """Log lines on a pipe, a progress bar on a terminal; returns the stage's ``progress`` argument."""
    # Per-page complaints of the fallback extractor: each page's outcome is in its row already.
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    if quiet:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return False
    level = logging.WARNING if sys.stderr.isatty() else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("distributed").setLevel(logging.WARNING)  # Dask's own start-up chatter
    return None


def _finish_stage(report) -> int:
    print(json.dumps(report.to_dict(), indent=1))
    return 0 if report.ok else 1


def run_simplify_stage(args: argparse.Namespace) -> int:
    from dripper_core.stages.simplify import SimplifyStageOptions, simplify_stage

    progress = _configure_run_logging(args.quiet)
    storage_options = parse_key_values(args.storage_option, "--storage-option")
    input_options = (
        parse_key_values(args.input_storage_option, "--input-storage-option")
        if args.input_storage_option
        else None
    )
    option_fields = {"warcs_per_shard": args.warcs_per_shard}
    if args.max_payload_bytes is not None:
        option_fields["max_payload_bytes"] = args.max_payload_bytes
    report = simplify_stage(
        args.input,
        args.output,
        workers=args.workers,
        scheduler=args.scheduler,
        options=SimplifyStageOptions(**option_fields),
        storage_options=storage_options or None,
        input_storage_options=input_options,
        count=args.count,
        fraction=args.fraction,
        seed=int(args.seed) if args.seed.lstrip("-").isdigit() else args.seed,
        force=args.force,
        progress=progress,
        raise_on_failure=False,
    )
    return _finish_stage(report)


def run_extract_stage(args: argparse.Namespace) -> int:
    from dripper_core.stages.extract import ExtractStageOptions, extract_stage

    progress = _configure_run_logging(args.quiet)
    report = extract_stage(
        args.input,
        args.output,
        labeler=args.labeler,
        labeler_options=parse_key_values(args.labeler_option, "--labeler-option") or None,
        options=ExtractStageOptions(
            batch_size=args.batch_size, fallback=None if args.fallback == "none" else args.fallback
        ),
        workers=args.workers,
        scheduler=args.scheduler,
        storage_options=parse_key_values(args.storage_option, "--storage-option") or None,
        force=args.force,
        progress=progress,
        raise_on_failure=False,
    )
    return _finish_stage(report)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (FileNotFoundError, KeyError, ValueError) as error:
        print(f"dripper: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
