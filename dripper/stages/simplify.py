"""The ``simplify`` stage: WARC files → ``{root}/simplified/part-NNNNN.parquet``.

One shard per WARC file (or per ``warcs_per_shard`` files), numbered in input order. Per HTML page read
from a WARC (see :mod:`dripper.io.warc`), :func:`dripper.pipeline.prepare_page` decodes, checks
and simplifies it, exactly as the one-process pipeline does, and one row is written. The rows of the
``slim`` layout (the default; :mod:`dripper.stages.records` says why and how the extract stage reads them):

==========================  ===========================================================================
``doc_id``                  ``WARC-Record-ID`` (else ``warc_file@offset``)
``url``, ``warc_file``,     where the page came from: ``warc_offset`` is the record's gzip member,
``warc_offset``,            ``warc_span_bytes`` the bytes from there to the next page's record (null for a
``warc_span_bytes``,        file's last page: to the end), enough for one range request; ``WARC-Date``, the
``fetch_date``,             HTTP media type, ``WARC-Payload-Digest`` and payload size; ``truncated``: the
``content_type``,           record was cut short (kept only with ``keep_truncated``)
``payload_digest``,
``payload_bytes``,
``truncated``
``http_charset``            the charset the HTTP header declared (as sent), or null
``encoding``                the codec the page was decoded with (:mod:`dripper.decode`)
``status``, ``reason``      ``ok`` (reason null), or why the page cannot be labelled: ``no_blocks``,
                            ``simplify_failed`` (the extract stage sends these to the fallback), or an
                            input problem ``empty_input``/``not_html``/``too_large`` (the extract stage
                            records them as ``extractor="none"``). ``reason`` is the full message.
``simplified_html``         the model input (null when simplification failed)
``n_blocks``                block count
``prompt_chars``,           characters of the ``short_compact`` prompt and a token estimate of
``prompt_tokens_estimate``  ``ceil(prompt_chars / 3.5)`` (a rough BPE ratio for HTML; no tokenizer is
                            loaded here: the stage must stay fast and model-free)
``simplify_seconds``        time spent in the simplifier for this page
==========================  ===========================================================================

The ``full`` layout (``ShardFormat(layout="full")``, and every shard written before the slim one) adds
``html`` (the decoded page), ``mapping_html`` (the mapping view) and ``blocks``
(``[{item_id, tag, simplified_html, text}]``): 2.8 times the bytes of the ``.warc.gz`` it came from, and no
WARC file needed at extract time.

Accounting per shard (``rows_in == rows_out + dropped``): ``rows_in`` counts every WARC record read plus
every unreadable region (a corrupt gzip member, the unread rest of a stream); records that are not HTML
200 responses are dropped with the WARC reader's reason (``not_response``, ``non_200``, ``non_html``,
``too_large``, ``truncated``, ``bad_record``) and unreadable regions with theirs (``bad_gzip_member``,
``unreadable_rest``). Every HTML page becomes a row, whatever its status: nothing is dropped silently.
With ``keep_truncated``, truncated records are pages too, counted apart (``kept_truncated``).
"""

from __future__ import annotations

import fnmatch
import gzip
import logging
import os
import posixpath
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dripper.config.simplify import SimplifyStageConfig
from dripper.io.storage import filesystem_for, is_local, join_path, open_url
from dripper.io.warc import WarcReadStats, iter_warc_pages
from dripper.simplify import SimplifyOptions
from dripper.stages.records import FULL_LAYOUT, LAYOUTS, SLIM_LAYOUT, page_row, shard_metadata
from dripper.stages.runner import (
    ShardTask,
    StageError,
    StageReport,
    record_stage_run,
    run_shard_tasks,
    run_streaming_shard,
)
from dripper.stages.shards import ShardResult, ShardStats

__all__ = [
    "SIMPLIFIED_STAGE",
    "ShardFormat",
    "plan_simplify_shards",
    "resolve_warc_inputs",
    "simplified_schema",
    "simplify_shard",
    "simplify_shards",
    "simplify_stage",
    "warc_page_rows",
]

log = logging.getLogger(__name__)

SIMPLIFIED_STAGE = "simplified"
_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class ShardFormat:
    """How simplified shards are written: what no user setting covers (the user's are
    :class:`~dripper.config.simplify.SimplifyStageConfig`).

    Attributes:
        simplify: Simplification options (the model format).
        prompt_version: Prompt template used for the length estimate.
        rows_per_group: Rows per parquet row group (a group is flushed earlier past ``max_group_bytes``).
        max_group_bytes: Approximate text bytes held before a row group is written.
        compression: Parquet codec.
        layout: ``slim`` (the record is read again from its WARC file at extract time) or ``full`` (the
            page, the mapping view and the blocks stored: no WARC file needed at extract time).
    """

    simplify: SimplifyOptions = field(default_factory=SimplifyOptions)
    prompt_version: str = "short_compact"
    rows_per_group: int = 256
    max_group_bytes: int = 64 * 1024 * 1024
    compression: str = "zstd"
    layout: str = SLIM_LAYOUT

    def __post_init__(self) -> None:
        if self.rows_per_group < 1 or self.max_group_bytes < 1:
            raise ValueError(f"rows_per_group and max_group_bytes must be positive, got {self}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def simplified_schema(layout: str = SLIM_LAYOUT) -> Any:
    """The parquet schema of simplified shards of ``layout`` (``slim`` or ``full``)."""
    import pyarrow as pa

    fields = [
        ("doc_id", pa.string()),
        ("url", pa.string()),
        ("warc_file", pa.string()),
        ("warc_offset", pa.int64()),
        ("warc_span_bytes", pa.int64()),
        ("fetch_date", pa.string()),
        ("content_type", pa.string()),
        ("payload_digest", pa.string()),
        ("payload_bytes", pa.int64()),
        ("truncated", pa.bool_()),
        ("http_charset", pa.string()),
        ("encoding", pa.string()),
        ("status", pa.string()),
        ("reason", pa.string()),
        ("simplified_html", pa.string()),
        ("n_blocks", pa.int32()),
        ("prompt_chars", pa.int64()),
        ("prompt_tokens_estimate", pa.int64()),
        ("simplify_seconds", pa.float64()),
    ]
    if layout == FULL_LAYOUT:
        block = pa.struct(
            [
                ("item_id", pa.int32()),
                ("tag", pa.string()),
                ("simplified_html", pa.string()),
                ("text", pa.string()),
            ]
        )
        fields += [("html", pa.string()), ("mapping_html", pa.string()), ("blocks", pa.list_(block))]
    return pa.schema(fields)


# -- inputs ------------------------------------------------------------------------------------------------


def _is_listing(spec: str) -> bool:
    name = posixpath.basename(spec.rstrip("/"))
    return name.endswith((".paths", ".paths.gz"))


def _read_listing(spec: str, storage_options: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """The entries of a ``warc.paths(.gz)`` listing and their URLs. Relative entries are resolved like
    Common Crawl's: against the folder above ``crawl-data/`` when the listing lies under one, else
    against the listing's folder."""
    with open_url(spec, "rb", storage_options) as raw:
        data = raw.read()
    if spec.endswith(".gz"):
        data = gzip.decompress(data)
    entries = [line.strip() for line in data.decode("utf-8").splitlines() if line.strip()]
    marker = "/crawl-data/"
    position = spec.find(marker)
    base = spec[: position + 1] if position >= 0 else posixpath.dirname(spec) or "."
    return entries, [e if "://" in e or e.startswith("/") else join_path(base, e) for e in entries]


def _expand_files(spec: str, storage_options: dict[str, Any] | None) -> list[str]:
    fs, path = filesystem_for(spec, storage_options)

    def as_url(fs_path: str) -> str:
        return fs_path if is_local(spec) else fs.unstrip_protocol(fs_path)

    if any(char in _GLOB_CHARS for char in path):
        found = sorted(fs.glob(path))
        if not found:
            raise FileNotFoundError(f"--input {spec!r} matches no file")
        return [as_url(p) for p in found]
    if fs.isdir(path):
        found = sorted(
            p for p in fs.find(path) if fnmatch.fnmatch(posixpath.basename(p), "*.warc*") and fs.isfile(p)
        )
        if not found:
            raise FileNotFoundError(f"--input {spec!r} is a folder without *.warc / *.warc.gz files")
        return [as_url(p) for p in found]
    if not fs.exists(path):
        raise FileNotFoundError(f"--input {spec!r} does not exist")
    return [spec if not is_local(spec) else path]


def resolve_warc_inputs(
    specs: str | Sequence[str],
    *,
    count: int | None = None,
    fraction: float | None = None,
    seed: int | str = 0,
    storage_options: dict[str, Any] | None = None,
) -> list[str]:
    """The WARC files of ``--input`` values, in shard order.

    Each spec is one of:

    - ``snapshot:CRAWL_ID[@BASE]``: the crawl's ``warc.paths.gz`` under ``BASE`` (``s3`` = Common
      Crawl's bucket, the default; ``https`` = its HTTPS mirror; or a folder/URL laid out like Common
      Crawl, e.g. ``snapshot:CC-MAIN-SAMPLE@data/sample``);
    - a ``warc.paths`` / ``warc.paths.gz`` listing (local or URL);
    - WARC files, folders (every ``*.warc*`` below) or globs (``s3://bucket/crawl/*.warc.gz``).

    ``count`` / ``fraction`` / ``seed`` select files deterministically
    (:func:`dripper.io.snapshots.select_warc_paths`): listings and snapshots are always taken in
    rank order, so a larger ``count`` keeps the shard numbers of a smaller one; plain files keep their
    (sorted) order unless a selection is asked for. Duplicates are removed.
    """
    from dripper.io.snapshots import read_warc_paths, select_warc_paths, warc_urls

    if isinstance(specs, str):
        specs = [specs]
    if not specs:
        raise ValueError("no --input given: pass WARC files, a warc.paths.gz listing or snapshot:CRAWL_ID")
    # Listed files are ranked by their entry in the listing (``crawl-data/…``), so the order does not
    # depend on where the base is or how it is spelt; plain files by their absolute path or URL.
    listed: dict[str, str] = {}
    plain: dict[str, str] = {}
    for spec in specs:
        spec = str(spec)
        if spec.startswith("snapshot:"):
            crawl, _, base = spec.removeprefix("snapshot:").partition("@")
            if not crawl:
                raise ValueError(f"--input {spec!r}: expected snapshot:CRAWL_ID[@BASE]")
            base = base or "s3"
            entries = read_warc_paths(base, crawl, storage_options)
            urls = warc_urls(base, entries)
        elif _is_listing(spec):
            entries, urls = _read_listing(spec, storage_options)
        else:
            urls = _expand_files(spec, storage_options)
            entries = urls = [os.path.abspath(u) if is_local(u) else u for u in urls]
            for entry, url in zip(entries, urls, strict=True):
                plain.setdefault(entry, url)
            continue
        for entry, url in zip(entries, urls, strict=True):
            listed.setdefault(entry, os.path.abspath(url) if is_local(url) else url)
    if count is not None or fraction is not None:
        every = {**plain, **listed}
        chosen = select_warc_paths(list(every), count=count, fraction=fraction, seed=seed)
        files = [every[key] for key in chosen]
    else:
        files = [listed[key] for key in select_warc_paths(list(listed), seed=seed)]
        files += [plain[key] for key in sorted(plain)]
    return list(dict.fromkeys(files))


def plan_simplify_shards(warc_files: Sequence[str], warcs_per_shard: int = 1) -> list[list[str]]:
    """Consecutive groups of ``warcs_per_shard`` files; shard ``i`` is group ``i``."""
    if warcs_per_shard < 1:
        raise ValueError(f"warcs_per_shard must be positive, got {warcs_per_shard}")
    return [list(warc_files[i : i + warcs_per_shard]) for i in range(0, len(warc_files), warcs_per_shard)]


# -- one shard ---------------------------------------------------------------------------------------------


class _Rows:
    """Column buffers of one row group."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self.columns: dict[str, list] = {name: [] for name in schema.names}
        self.count = 0
        self.text_bytes = 0

    def add(self, row: dict[str, Any]) -> None:
        for name, values in self.columns.items():
            values.append(row.get(name))
        self.count += 1
        self.text_bytes += sum(len(row.get(k) or "") for k in ("html", "simplified_html", "mapping_html"))

    def batch(self) -> Any:
        import pyarrow as pa

        return pa.RecordBatch.from_pydict(self.columns, schema=self.schema)


def _produce_rows(
    warc_files: Sequence[str],
    config: SimplifyStageConfig,
    shard_format: ShardFormat,
    input_storage_options: dict[str, Any] | None,
    stats: ShardStats,
) -> Iterator[Any]:
    schema = simplified_schema(shard_format.layout)
    rows = _Rows(schema)
    for row, _ in warc_page_rows(warc_files, config, shard_format, input_storage_options, stats):
        rows.add(row)
        stats.rows_out += 1
        if rows.count >= shard_format.rows_per_group or rows.text_bytes >= shard_format.max_group_bytes:
            yield rows.batch()
            rows = _Rows(schema)
    if rows.count:
        yield rows.batch()


def page_options(config: SimplifyStageConfig, shard_format: ShardFormat) -> Any:
    """The :class:`~dripper.pipeline.ExtractOptions` pages are prepared with (page limit, simplification)."""
    from dripper.pipeline import ExtractOptions

    return ExtractOptions(max_page_bytes=config.max_page_bytes, simplify=shard_format.simplify)


def warc_page_rows(
    warc_files: Sequence[str],
    config: SimplifyStageConfig,
    shard_format: ShardFormat,
    input_storage_options: dict[str, Any] | None,
    stats: ShardStats,
) -> Iterator[tuple[dict[str, Any], Any]]:
    """``(row, prepared page)`` for every HTML page of ``warc_files``, in file order: what the simplify stage
    writes and the one-pass extract stage labels. Counts the pages' statuses and, once the files are read,
    every record and unreadable region into ``stats`` (``rows_in``, drops by the reader's reason);
    ``rows_out`` is the caller's."""
    extract_options = page_options(config, shard_format)
    read = WarcReadStats()
    for warc_file in warc_files:
        file_stats = WarcReadStats()
        pending = None  # a row waits for the next page's offset: its span ends there
        with open_url(warc_file, "rb", input_storage_options) as stream:
            for warc_page in iter_warc_pages(
                stream,
                warc_name=warc_file,
                stats=file_stats,
                max_payload_bytes=config.max_payload_bytes,
                keep_truncated=config.keep_truncated,
            ):
                row, prepared = page_row(
                    warc_page, extract_options, shard_format.prompt_version, shard_format.layout
                )
                stats.count(f"status:{row['status']}")
                stats.count("blocks", row["n_blocks"])
                stats.count("prompt_tokens_estimate", row["prompt_tokens_estimate"])
                stats.count("simplify_seconds", row["simplify_seconds"])
                if warc_page.truncated:
                    stats.count("kept_truncated")
                if pending is not None:
                    pending[0]["warc_span_bytes"] = row["warc_offset"] - pending[0]["warc_offset"]
                    yield pending
                pending = (row, prepared)
        if pending is not None:
            yield pending
        file_stats.check()
        if file_stats.records == 0 and not file_stats.skipped:
            stats.count("empty_files")
        read.merge(file_stats)
    # Every record and every unreadable region is an input row; all but the pages are dropped by reason.
    stats.rows_in += read.records + sum(read.skipped.values()) - read.records_skipped
    for reason, n in read.skipped.items():
        stats.drop(reason, n)
    stats.count("warc_files", read.files)
    stats.count("warc_records", read.records)
    stats.count("payload_bytes", read.payload_bytes)
    stats.count("warc_read_seconds", round(read.seconds, 6))


def simplify_shard(
    root: str,
    shard_index: int,
    warc_files: Sequence[str],
    config: SimplifyStageConfig | None = None,
    storage_options: dict[str, Any] | None = None,
    input_storage_options: dict[str, Any] | None = None,
    force: bool = False,
    shard_format: ShardFormat | None = None,
) -> ShardResult:
    """Simplify the pages of ``warc_files`` into ``{root}/simplified/part-{shard_index:05d}.parquet``.

    Skipped when the shard's marker exists (raises :class:`~dripper.stages.shards.ShardInputsChanged`
    if it was made from other files). Runs anywhere: in-process or as a Dask task.
    """
    config = config or SimplifyStageConfig()
    shard_format = shard_format or ShardFormat()
    warc_files = list(warc_files)
    # The shard says how it was written: the extract stage prepares a re-read record the same way.
    schema = simplified_schema(shard_format.layout).with_metadata(
        shard_metadata(shard_format.layout, page_options(config, shard_format))
    )
    return run_streaming_shard(
        join_path(str(root), SIMPLIFIED_STAGE),
        shard_index,
        schema,
        lambda stats: _produce_rows(warc_files, config, shard_format, input_storage_options, stats),
        storage_options=storage_options,
        force=force,
        marker_extra={"inputs": warc_files, "layout": shard_format.layout},
        compression=shard_format.compression,
    )


# -- the stage ---------------------------------------------------------------------------------------------


def simplify_shards(
    root: str,
    shards: Sequence[tuple[int, list[str]]],
    config: SimplifyStageConfig,
    storage_options: dict[str, Any] | None = None,
    input_storage_options: dict[str, Any] | None = None,
    *,
    force: bool = False,
    scheduler: Any = None,
    progress: bool | None = None,
    shard_format: ShardFormat | None = None,
) -> tuple[list[ShardResult], dict[int, str]]:
    """Simplify planned shards (``(shard index, WARC files)``) of ``root`` on Dask (``scheduler``, else a
    ``LocalCluster`` of ``config.workers``): finished shards are skipped unless ``force``. What
    :func:`simplify_stage` and the Airflow simplify task (a batch of a selection's shards each) run.
    Returns the shard results and the failures by shard."""
    tasks = [
        ShardTask(
            index,
            simplify_shard,
            (root, index, files, config, storage_options, input_storage_options, force, shard_format),
            stage_dir=join_path(root, SIMPLIFIED_STAGE),
            marker_extra={"inputs": files},
            storage_options=storage_options,
        )
        for index, files in shards
    ]
    return run_shard_tasks(
        SIMPLIFIED_STAGE, tasks, workers=config.workers, scheduler=scheduler, progress=progress, force=force
    )


def simplify_stage(
    inputs: str | Sequence[str],
    root: str,
    config: SimplifyStageConfig | None = None,
    *,
    scheduler: Any = None,
    storage_options: dict[str, Any] | None = None,
    input_storage_options: dict[str, Any] | None = None,
    force: bool = False,
    progress: bool | None = None,
    raise_on_failure: bool = True,
    shard_format: ShardFormat | None = None,
) -> StageReport:
    """Run the simplify stage: WARC inputs → ``{root}/simplified/``, one shard per WARC file (group).

    Args:
        inputs: ``--input`` specs (see :func:`resolve_warc_inputs`).
        root: The run root (local path or fsspec URL).
        config: The stage's settings (the ``dripper run simplify`` flags, the DAG form's fields): which WARC
            files (``warc_count``/``warc_fraction``, ``seed``), shard size, page limits and ``workers``
            (``0``: in this process; ``N``: a Dask ``LocalCluster`` of N processes; ``None``: one per core;
            ignored with ``scheduler``).
        scheduler: An existing Dask cluster: scheduler address or ``distributed.Client``.
        storage_options: fsspec options of the run root.
        input_storage_options: fsspec options of the inputs (default: ``storage_options``).
        force: Recompute shards even when done.
        progress: Progress display (``None``: bar on a terminal, log lines otherwise).
        raise_on_failure: Raise :class:`StageError` when a shard failed (after summarising the others).
        shard_format: How shards are written (defaults: the model format of the released weights).

    Returns:
        A :class:`StageReport`; the stage summary and ``{root}/_run_summary.json`` are written.
    """
    config = config or SimplifyStageConfig()
    shard_format = shard_format or ShardFormat()
    input_storage_options = input_storage_options if input_storage_options is not None else storage_options
    started = time.perf_counter()
    warc_files = resolve_warc_inputs(
        inputs,
        count=config.warc_count,
        fraction=config.warc_fraction,
        seed=config.seed,
        storage_options=input_storage_options,
    )
    if not warc_files:
        raise ValueError(f"--input {inputs!r} names no WARC file (an empty listing or selection)")
    plan = plan_simplify_shards(warc_files, config.warcs_per_shard)
    log.info("simplify: %d WARC files in %d shards → %s", len(warc_files), len(plan), root)
    results, failures = simplify_shards(
        str(root), list(enumerate(plan)), config, storage_options, input_storage_options, force=force,
        scheduler=scheduler, progress=progress, shard_format=shard_format,
    )  # fmt: skip
    report = StageReport(
        stage=SIMPLIFIED_STAGE,
        root=str(root),
        shards=len(plan),
        written=sum(r.status == "written" for r in results),
        skipped=sum(r.status == "skipped" for r in results),
        failed=failures,
        wall_seconds=time.perf_counter() - started,
    )
    record_stage_run(
        str(root),
        report,
        expected_shards=len(plan),
        storage_options=storage_options,
        parameters={
            "workers": "scheduler" if scheduler is not None else config.workers,
            "warc_files": len(warc_files),
            "config": config.model_dump(mode="json"),
            "shard_format": shard_format.to_dict(),
        },
    )
    if failures and raise_on_failure:
        raise StageError(report)
    return report
