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

A shard of the slim layout holds no copy of the page: its records are read again from their WARC files by
byte range and simplified again (:mod:`dripper.stages.records`; counted as ``reread:records``, with
``reread:failed`` and ``reread:changed``). Every simplified row gives one extracted row
(``rows_in == rows_out``). Shard stats count fallbacks by
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
from typing import Any

from dripper.config.extract import ExtractStageConfig
from dripper.io.storage import join_path
from dripper.labelers.base import BlockLabeler
from dripper.stages.records import CARRIED
from dripper.stages.runner import (
    ShardTask,
    StageReport,
    finish_stage,
    run_shard_tasks,
    run_streaming_shard,
    stage_workers,
)
from dripper.stages.shards import ShardResult, ShardStats, ShardWriter
from dripper.stages.simplify import SIMPLIFIED_STAGE

__all__ = [
    "EXTRACTED_STAGE",
    "build_stage_labeler",
    "cached_extractor",
    "close_stage_extractors",
    "count_row",
    "extract_shard",
    "extract_shards",
    "extract_items",
    "extract_stage",
    "extracted_schema",
    "read_simplified_items",
    "stage_extractor",
]

log = logging.getLogger(__name__)

EXTRACTED_STAGE = "extracted"


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


def stage_extractor(spec: Any, labeler: BlockLabeler | None, batch_size: int, score_routes: bool):
    """The pipeline of a spec (its labeler, or ``labeler`` in its place, with the spec's fallback); built once
    per process for a spec (a GPU engine is expensive to start, and a Dask worker runs many shards)."""
    from dripper.pipeline import ExtractOptions, Extractor, Route

    options = ExtractOptions(
        fallback=spec.fallback, fallback_on_empty=spec.fallback_on_empty, batch_size=batch_size
    )
    route = Route(None) if score_routes else None
    if labeler is not None:
        return Extractor(labeler, options, route)
    key = json.dumps([spec.to_dict(), batch_size, score_routes], sort_keys=True, default=str)
    return cached_extractor(
        key, lambda: Extractor(build_stage_labeler(spec.labeler, spec.options), options, route)
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
    path: str,
    batch_size: int,
    storage_options: dict[str, Any] | None = None,
    **options: Any,
) -> Iterator[list[tuple[Any, Any, str | None, dict[str, Any]]]]:
    """Batches of ``(page, simplified, problem, row)`` from a simplified shard of either layout, ready for
    :meth:`~dripper.pipeline.Extractor.extract_simplified` (``row`` holds the other columns): a slim shard's
    records are read again from their WARC files and simplified again (:func:`dripper.stages.records.
    simplified_items`, whose keywords ``options`` are)."""
    from dripper.stages.records import simplified_items

    return simplified_items(path, batch_size, storage_options, **options)


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
        **{name: row[name] for name in CARRIED},
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


def extract_items(
    source: str, extractor: Any, items: list[tuple[Any, Any, str | None, dict[str, Any]]], stats: ShardStats
) -> Any:
    """One record batch of extracted rows: ``items`` (``(page, simplified, problem, row)``) labelled
    together, each row accounted (:func:`count_row`)."""
    import pyarrow as pa

    started = time.perf_counter()
    results = extractor.extract_simplified(
        [(page, simplified, problem) for page, simplified, problem, _ in items]
    )
    stats.count("extract_seconds", time.perf_counter() - started)
    stats.count("batches")
    rows = []
    for result, (*_, row) in zip(results, items, strict=True):
        if result.doc_id != row["doc_id"]:
            raise RuntimeError(f"{source}: result for {result.doc_id!r} where {row['doc_id']!r} was expected")
        count_row(stats, result.extractor, result.fallback_reason)
        rows.append(_result_row(result, row))
    return pa.RecordBatch.from_pylist(rows, schema=extracted_schema())


def _produce_results(
    source: str,
    extractor: Any,
    batch_size: int,
    storage_options: dict[str, Any] | None,
    input_storage_options: dict[str, Any] | None,
    stats: ShardStats,
) -> Iterator[Any]:
    items_of = read_simplified_items(
        source, batch_size, storage_options, input_storage_options=input_storage_options, stats=stats
    )
    for items in items_of:
        yield extract_items(source, extractor, items, stats)


def extract_shard(
    input_root: str,
    output_root: str,
    shard_index: int,
    spec: Any,
    batch_size: int,
    labeler: BlockLabeler | None = None,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    stage: str = EXTRACTED_STAGE,
    score_routes: bool = False,
    input_storage_options: dict[str, Any] | None = None,
) -> ShardResult:
    """Extract simplified shard ``shard_index`` of ``input_root`` with ``spec`` (a typed
    :class:`~dripper.config.extractor.ExtractorSpec`: a worker does not parse it again) into
    ``{output_root}/{stage}/`` (``extracted/``; a cascade's first step writes ``cascade_first/`` and sets
    ``score_routes``). ``labeler``: an instance in place of the spec's labeler (in-process runs).
    ``input_storage_options``: fsspec options of the WARC files a slim shard's records are read again
    from (default: ``storage_options``).

    Skipped when the marker exists. Runs anywhere: in-process or as a Dask task.
    """
    reader = ShardWriter(str(input_root), SIMPLIFIED_STAGE, storage_options)
    source = reader.url(reader.shard_path(shard_index))
    extractor = stage_extractor(spec, labeler, batch_size, score_routes)
    return run_streaming_shard(
        join_path(str(output_root), stage),
        shard_index,
        extracted_schema(),
        lambda stats: _produce_results(
            source, extractor, batch_size, storage_options, input_storage_options, stats
        ),
        storage_options=storage_options,
        force=force,
        # The labeler is recorded, not compared: a rerun with another labeler skips finished shards
        # unless forced (or written to a new root).
        # Which process labelled the shard: with Dask, a worker (one labeler, e.g. one GPU engine, each).
        marker_extra={"inputs": [source], "labeler": extractor.labeler.name, "worker_pid": os.getpid()},
    )


# -- the stage ---------------------------------------------------------------------------------------------


def extract_stage(
    input_root: str,
    output_root: str | None = None,
    config: ExtractStageConfig | None = None,
    *,
    labeler: BlockLabeler | None = None,
    **run: Any,
) -> StageReport:
    """Run the extract stage with ``config.extractor`` over the finished simplified shards of ``input_root``,
    into ``{output_root}/extracted/`` (a spec with a ``route`` is a cascade: run it with
    :func:`dripper.stages.extractor.run_extractor`, which also places and records the extractor's folder).

    The spec's labeler and options are checked first (they exist, take these options: nothing is built).

    Args:
        input_root: The run root holding ``simplified/``.
        output_root: Where ``extracted/`` goes (default: ``input_root``).
        config: The stage config: the extractor spec, ``batch_size``, ``workers`` (``0``: in this process,
            one labeler for all shards; ``N``: a Dask ``LocalCluster`` of N processes, each with its own
            labeler; ignored with a ``scheduler``).
        labeler: A labeler instance in place of the spec's labeler, run in this process (``workers`` aside).
        **run: :func:`extract_shards`' keywords (``scheduler``, ``storage_options``, ``force``,
            ``progress``, ``raise_on_failure``).
    """
    config = config or ExtractStageConfig()
    if config.extractor.route is not None:
        raise ValueError(
            f"extractor {config.extractor.name!r} is a cascade: run it with dripper.stages.run_extractor"
        )
    if labeler is None:
        from dripper.config.extractor import check_labeler_options

        check_labeler_options([config.extractor])
    return extract_shards(input_root, output_root, config, labeler=labeler, **run)


def extract_shards(
    input_root: str,
    output_root: str | None,
    config: ExtractStageConfig,
    *,
    labeler: BlockLabeler | None = None,
    scheduler: Any = None,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    progress: bool | None = None,
    raise_on_failure: bool = True,
    stage: str = EXTRACTED_STAGE,
    score_routes: bool = False,
    task_resources: dict[str, float] | None = None,
    input_storage_options: dict[str, Any] | None = None,
) -> StageReport:
    """The shard tasks of the extract stage with ``config.extractor``'s labeler and fallback (its route is
    the cascade's, :mod:`dripper.stages.cascade`); the spec is taken as checked.

    Args:
        scheduler: An existing Dask cluster: scheduler address or ``distributed.Client``.
        storage_options: fsspec options of both roots.
        force: Recompute shards even when done.
        progress: Progress display (``None``: bar on a terminal, log lines otherwise).
        raise_on_failure: Raise :class:`StageError` when a shard failed (after summarising the others).
        stage: The output folder under ``output_root`` (``extracted``; ``cascade_first`` for the first step
            of a cascade, with ``score_routes``: each page's routing score in its stats).
        task_resources: Dask worker resources each shard task needs on an external cluster (default:
            ``{"GPU": 1}`` when the spec needs a GPU).
        input_storage_options: fsspec options of the WARC files slim shards' records are read again from
            (default: ``storage_options``).
    """
    spec = config.extractor
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
    workers = stage_workers(config.workers, labeler, scheduler)
    if workers == 0 and scheduler is None:
        # Build the labeler before any shard runs, so a labeler that cannot start fails fast.
        stage_extractor(spec, labeler, config.batch_size, score_routes)
    # On an external cluster an LM labeler's tasks go to the workers that declare a GPU.
    resources = task_resources
    if resources is None and spec.needs_gpu and labeler is None:
        resources = {"GPU": 1}
    tasks = [
        ShardTask(
            index,
            extract_shard,
            (
                str(input_root), output_root, index, spec, config.batch_size, labeler, storage_options,
                force, stage, score_routes, input_storage_options,
            ),
            stage_dir=join_path(output_root, stage),
            marker_extra={"inputs": [source_stage.url(source_stage.shard_path(index))]},
            storage_options=storage_options,
            resources=resources,
        )
        for index in shards
    ]  # fmt: skip
    results, failures = run_shard_tasks(
        stage,
        tasks,
        workers=workers,
        scheduler=scheduler,
        progress=progress,
        force=force,
        worker_cleanup=close_stage_extractors,
    )
    return finish_stage(
        stage,
        output_root,
        results,
        failures,
        shards=len(shards),
        started=started,
        expected_shards=max(shards) + 1 if expected is None else expected,
        storage_options=storage_options,
        parameters={
            "workers": "scheduler" if scheduler is not None else workers,
            "labeler": labeler.name if labeler is not None else spec.labeler,
            "input_root": str(input_root),
            "config": config.model_dump(mode="json"),
        },
        raise_on_failure=raise_on_failure,
    )


def _expected_simplified(stage: ShardWriter) -> int | None:
    """How many simplified shards the simplify run planned (from its stage summary), if known."""
    from dripper.stages.shards import STAGE_SUMMARY_NAME

    try:
        with stage.fs.open(f"{stage.stage_path}/{STAGE_SUMMARY_NAME}", "rb") as f:
            return json.loads(f.read()).get("shards_expected")
    except (FileNotFoundError, json.JSONDecodeError):
        return None
