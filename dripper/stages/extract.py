"""The ``extract`` stage: ``{root}/simplified/`` shards → ``{root}/extracted/part-NNNNN.parquet``.

Extracted shard ``i`` is made from simplified shard ``i`` (only finished ones, see
:func:`~dripper.stages.shards.list_done_shards`). Pages are read in batches of ``batch_size`` and
labelled together (as a GPU engine wants them) by :meth:`dripper.pipeline.Extractor.extract_simplified`;
the rows written:

=====================  ================================================================================
``doc_id``, ``url``    from the simplified row
``markdown``,          the ``ExtractResult``: main content as Markdown and as HTML, one boolean per
``main_html``,         block (null without labels), what produced it (``dripper:<labeler>``, the
``labels``,            fallback's name, or ``none``) and why the fallback ran (null on the normal path)
``extractor``,
``fallback_reason``
``stats``              the result's stats as JSON (block counts, timings; simplify time and input size
                       carried from the simplify stage)
carried metadata       ``warc_file``, ``warc_offset``, ``fetch_date``, ``content_type``, ``payload_digest``,
                       ``encoding``, ``n_blocks``, ``simplify_status``
=====================  ================================================================================

Every simplified row gives one extracted row (``rows_in == rows_out``). Shard stats count fallbacks by
reason kind (``label_failed``, ``no_blocks``, ``simplify_failed``, …) and, in ``counters``, the rows per
extractor (``extractor:dripper:trafilatura``) and the rows left empty per input problem
(``no_output:not_html``).

Labelers are chosen by registered name (``--labeler trafilatura``) or by import path
(``--labeler package.module:factory``, for labelers that live outside this package); with Dask workers
each worker process builds its labeler once and reuses it for all its shards.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from dripper.config.extract import ExtractStageConfig
from dripper.io.storage import filesystem_for, join_path
from dripper.labelers.base import DEFAULT_LABELER, BlockLabeler
from dripper.stages.runner import (
    ShardTask,
    StageError,
    StageReport,
    record_stage_run,
    run_shard_tasks,
    run_streaming_shard,
)
from dripper.stages.shards import ShardResult, ShardStats, ShardWriter
from dripper.stages.simplify import SIMPLIFIED_STAGE

__all__ = [
    "EXTRACTED_STAGE",
    "ExtractStageOptions",
    "build_stage_labeler",
    "cached_extractor",
    "close_stage_extractors",
    "count_row",
    "extract_shard",
    "extract_stage",
    "extracted_schema",
    "read_simplified_items",
]

log = logging.getLogger(__name__)

EXTRACTED_STAGE = "extracted"
_CARRIED = ("warc_file", "warc_offset", "fetch_date", "content_type", "payload_digest", "encoding")


@dataclass(frozen=True)
class ExtractStageOptions:
    """Options of the extract stage.

    Attributes:
        batch_size: Pages per labeler call (and per parquet row group).
        fallback: Fallback name, or ``None`` for none.
        fallback_on_empty: Also fall back when no block is labelled main.
        compression: Parquet codec.
        score_routes: Record each labelled page's routing score (``stats["route"]``, ``stats["declined"]``,
            ``stats["prompt_tokens_estimate"]``): the first step of a cascade.
    """

    batch_size: int = ExtractStageConfig.default("batch_size")
    fallback: str | None = ExtractStageConfig.default("fallback")
    fallback_on_empty: bool = ExtractStageConfig.default("fallback_on_empty")
    compression: str = "zstd"
    score_routes: bool = False

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def extracted_schema() -> Any:
    """The parquet schema of extracted shards."""
    import pyarrow as pa

    return pa.schema(
        [
            ("doc_id", pa.string()),
            ("url", pa.string()),
            ("markdown", pa.string()),
            ("main_html", pa.string()),
            ("labels", pa.list_(pa.bool_())),
            ("extractor", pa.string()),
            ("fallback_reason", pa.string()),
            ("stats", pa.string()),
            ("warc_file", pa.string()),
            ("warc_offset", pa.int64()),
            ("fetch_date", pa.string()),
            ("content_type", pa.string()),
            ("payload_digest", pa.string()),
            ("encoding", pa.string()),
            ("n_blocks", pa.int32()),
            ("simplify_status", pa.string()),
        ]
    )


# -- labelers ----------------------------------------------------------------------------------------------


def build_stage_labeler(spec: str | BlockLabeler, options: dict[str, Any] | None = None) -> BlockLabeler:
    """A labeler from a registered name (``trafilatura``), an import path (``pkg.module:Factory``) or an
    instance (returned as is)."""
    if isinstance(spec, BlockLabeler):
        return spec
    from dripper.labelers.base import build_labeler

    return build_labeler(spec, **(options or {}))


_EXTRACTORS: dict[str, Any] = {}


def _extractor(
    spec: str | BlockLabeler, labeler_options: dict[str, Any] | None, options: ExtractStageOptions
):
    """The pipeline for a labeler spec; built once per process for named labelers (a GPU engine is
    expensive to start, and a Dask worker runs many shards)."""
    from dripper.pipeline import ExtractOptions, Extractor, Route

    pipeline_options = ExtractOptions(
        fallback=options.fallback, fallback_on_empty=options.fallback_on_empty, batch_size=options.batch_size
    )
    route = Route(None) if options.score_routes else None
    if isinstance(spec, BlockLabeler):
        return Extractor(spec, pipeline_options, route)
    key = json.dumps([spec, labeler_options or {}, asdict(options)], sort_keys=True, default=str)
    return cached_extractor(
        key, lambda: Extractor(build_stage_labeler(spec, labeler_options), pipeline_options, route)
    )


def cached_extractor(key: str, build: Any) -> Any:
    """The pipeline this process built for ``key`` (``build()`` the first time): one labeler, e.g. one GPU
    engine, per worker process for all its shards; :func:`close_stage_extractors` closes them."""
    if key not in _EXTRACTORS:
        if not _EXTRACTORS:
            # An LM engine's own processes (vLLM's engine core) outlive this one unless it is closed.
            atexit.register(close_stage_extractors)
        _EXTRACTORS[key] = build()
    return _EXTRACTORS[key]


def close_stage_extractors() -> int:
    """Close the labelers this process built for the stage (engines, servers, GPU memory); returns how
    many. Run in each worker of a LocalCluster before it stops, and at the exit of any process."""
    closed = 0
    while _EXTRACTORS:
        _, extractor = _EXTRACTORS.popitem()
        try:
            extractor.close()
            closed += 1
        except Exception as error:  # noqa: BLE001 - best effort: the shards are already published
            log.warning(
                "closing labeler %s failed: %s: %s", extractor.labeler.name, type(error).__name__, error
            )
    return closed


# -- one shard ---------------------------------------------------------------------------------------------


def read_simplified_items(
    path: str, batch_size: int, storage_options: dict[str, Any] | None = None
) -> Iterator[list[tuple[Any, Any, str | None, dict[str, Any]]]]:
    """Batches of ``(page, simplified, problem, row)`` from a simplified shard, ready for
    :meth:`~dripper.pipeline.Extractor.extract_simplified` (``row`` holds the other columns)."""
    import pyarrow.parquet as pq

    from dripper.types import Block, Page, SimplifiedPage

    fs, fs_path = filesystem_for(path, storage_options)
    with fs.open(fs_path, "rb") as f:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=batch_size):
            items = []
            for row in batch.to_pylist():
                page = Page(
                    doc_id=row["doc_id"],
                    html=row["html"] or "",
                    url=row["url"],
                    http_charset=row["http_charset"],
                    metadata={name: row[name] for name in _CARRIED},
                )
                simplified = None
                if row["simplified_html"] is not None:
                    simplified = SimplifiedPage(
                        doc_id=row["doc_id"],
                        simplified_html=row["simplified_html"],
                        blocks=[Block(**block) for block in row["blocks"] or []],
                        url=row["url"],
                        mapping_html=row["mapping_html"],
                    )
                items.append((page, simplified, row["reason"], row))
            yield items


def _result_row(result: Any, row: dict[str, Any]) -> dict[str, Any]:
    stats = dict(result.stats)
    stats.setdefault("simplify_seconds", row["simplify_seconds"])
    stats.setdefault("input_bytes", row["payload_bytes"])
    return {
        "doc_id": result.doc_id,
        "url": result.url,
        "markdown": result.markdown,
        "main_html": result.main_html,
        "labels": result.labels,
        "extractor": result.extractor,
        "fallback_reason": result.fallback_reason,
        "stats": json.dumps(stats, sort_keys=True, default=str),
        **{name: row[name] for name in _CARRIED},
        "n_blocks": row["n_blocks"],
        "simplify_status": row["status"],
    }


def count_row(stats: ShardStats, extractor: str, fallback_reason: str | None) -> None:
    """Account one extracted row: in and out, by extractor, and by fallback (or no-output) reason kind."""
    stats.rows_in += 1
    stats.rows_out += 1
    stats.count(f"extractor:{extractor}")
    kind = fallback_reason.split(":", 1)[0] if fallback_reason else None
    if extractor == "none":
        stats.count(f"no_output:{kind}")
    elif kind is not None:
        stats.fallback(kind)


def _produce_results(
    source: str,
    extractor: Any,
    options: ExtractStageOptions,
    storage_options: dict[str, Any] | None,
    stats: ShardStats,
) -> Iterator[Any]:
    import pyarrow as pa

    schema = extracted_schema()
    for items in read_simplified_items(source, options.batch_size, storage_options):
        started = time.perf_counter()
        results = extractor.extract_simplified(
            [(page, simplified, problem) for page, simplified, problem, _ in items]
        )
        stats.count("extract_seconds", time.perf_counter() - started)
        stats.count("batches")
        rows = []
        for result, (*_, row) in zip(results, items, strict=True):
            if result.doc_id != row["doc_id"]:
                raise RuntimeError(
                    f"{source}: result for {result.doc_id!r} where {row['doc_id']!r} was expected"
                )
            count_row(stats, result.extractor, result.fallback_reason)
            rows.append(_result_row(result, row))
        yield pa.RecordBatch.from_pylist(rows, schema=schema)


def extract_shard(
    input_root: str,
    output_root: str,
    shard_index: int,
    labeler: str | BlockLabeler = DEFAULT_LABELER,
    labeler_options: dict[str, Any] | None = None,
    options: ExtractStageOptions | None = None,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    stage: str = EXTRACTED_STAGE,
) -> ShardResult:
    """Extract simplified shard ``shard_index`` of ``input_root`` into ``{output_root}/{stage}/``
    (``extracted/``; a cascade's first step writes ``cascade_first/``).

    Skipped when the marker exists. Runs anywhere: in-process or as a Dask task.
    """
    options = options or ExtractStageOptions()
    reader = ShardWriter(str(input_root), SIMPLIFIED_STAGE, storage_options)
    source = reader.url(reader.shard_path(shard_index))
    extractor = _extractor(labeler, labeler_options, options)
    return run_streaming_shard(
        join_path(str(output_root), stage),
        shard_index,
        extracted_schema(),
        lambda stats: _produce_results(source, extractor, options, storage_options, stats),
        storage_options=storage_options,
        force=force,
        # The labeler is recorded, not compared: a rerun with another labeler skips finished shards
        # unless forced (or written to a new root).
        # Which process labelled the shard: with Dask, a worker (one labeler, e.g. one GPU engine, each).
        marker_extra={"inputs": [source], "labeler": extractor.labeler.name, "worker_pid": os.getpid()},
        compression=options.compression,
    )


# -- the stage ---------------------------------------------------------------------------------------------


def extract_stage(
    input_root: str,
    output_root: str | None = None,
    *,
    labeler: str | BlockLabeler = DEFAULT_LABELER,
    labeler_options: dict[str, Any] | None = None,
    options: ExtractStageOptions | None = None,
    workers: int | None = 0,
    scheduler: Any = None,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    progress: bool | None = None,
    raise_on_failure: bool = True,
    task_resources: dict[str, float] | None = None,
    stage: str = EXTRACTED_STAGE,
) -> StageReport:
    """Run the extract stage over the finished simplified shards of ``input_root``.

    Args:
        input_root: The run root holding ``simplified/``.
        output_root: Where ``extracted/`` goes (default: ``input_root``).
        labeler: Registered name, ``module:factory`` import path, or an instance (in-process only unless
            it pickles).
        labeler_options: Keyword options for building a named labeler.
        options: Stage options.
        workers: ``0`` (default): in this process, one labeler for all shards (a GPU engine per process);
            ``N``: a Dask ``LocalCluster`` of N processes, each with its own labeler. Ignored with
            ``scheduler``.
        scheduler: An existing Dask cluster: scheduler address or ``distributed.Client``.
        storage_options: fsspec options of both roots.
        force: Recompute shards even when done.
        progress: Progress display (``None``: bar on a terminal, log lines otherwise).
        raise_on_failure: Raise :class:`StageError` when a shard failed (after summarising the others).
        task_resources: Dask worker resources each shard task needs on an external cluster (``{"GPU": 1}``
            for an LM labeler: :func:`extract_with_spec` asks for it when the spec needs a GPU).
        stage: The output folder under ``output_root`` (``extracted``; ``cascade_first`` for the first step
            of a cascade).
    """
    options = options or ExtractStageOptions()
    output_root = str(output_root or input_root)
    started = time.perf_counter()
    source_stage = ShardWriter(str(input_root), SIMPLIFIED_STAGE, storage_options)
    shards = source_stage.done_shards()
    if not shards:
        raise FileNotFoundError(
            f"{join_path(str(input_root), SIMPLIFIED_STAGE)} has no finished shard: run "
            "`dripper run simplify --output ROOT` first (or check --input)"
        )
    expected = _expected_simplified(source_stage)
    if expected is not None and len(shards) < expected:
        log.warning(
            "extract: only %d of %d simplified shards are finished; the others are extracted by a rerun",
            len(shards),
            expected,
        )
    if workers == 0 and scheduler is None:
        # Build (and check) the labeler before any shard runs, so a bad name fails fast.
        _extractor(labeler, labeler_options, options)
    elif isinstance(labeler, str) and ":" not in labeler:
        from dripper.labelers.base import available_labelers

        if labeler not in available_labelers():
            build_stage_labeler(labeler, labeler_options)  # raises KeyError with the known names
    tasks = [
        ShardTask(
            index,
            extract_shard,
            (
                str(input_root),
                output_root,
                index,
                labeler,
                labeler_options,
                options,
                storage_options,
                force,
                stage,
            ),
            stage_dir=join_path(output_root, stage),
            marker_extra={"inputs": [source_stage.url(source_stage.shard_path(index))]},
            storage_options=storage_options,
            resources=task_resources,
        )
        for index in shards
    ]
    results, failures = run_shard_tasks(
        stage,
        tasks,
        workers=workers,
        scheduler=scheduler,
        progress=progress,
        force=force,
        worker_cleanup=close_stage_extractors,
    )
    report = StageReport(
        stage=stage,
        root=output_root,
        shards=len(shards),
        written=sum(r.status == "written" for r in results),
        skipped=sum(r.status == "skipped" for r in results),
        failed=failures,
        wall_seconds=time.perf_counter() - started,
    )
    record_stage_run(
        output_root,
        report,
        expected_shards=max(shards) + 1 if expected is None else expected,
        storage_options=storage_options,
        parameters={
            "workers": "scheduler" if scheduler is not None else workers,
            "labeler": labeler if isinstance(labeler, str) else labeler.name,
            "input_root": str(input_root),
            "options": options.to_dict(),
        },
    )
    if failures and raise_on_failure:
        raise StageError(report)
    return report


def _expected_simplified(stage: ShardWriter) -> int | None:
    """How many simplified shards the simplify run planned (from its stage summary), if known."""
    from dripper.stages.shards import STAGE_SUMMARY_NAME

    try:
        with stage.fs.open(f"{stage.stage_path}/{STAGE_SUMMARY_NAME}", "rb") as f:
            return json.loads(f.read()).get("shards_expected")
    except (FileNotFoundError, json.JSONDecodeError):
        return None
