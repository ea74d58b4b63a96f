"""The extract stage in one pass: WARC files → ``{extractor folder}/extracted/part-NNNNN.parquet``, with no
``simplified/`` between.

Where the extractor needs no GPU (``cpu``, ``cpu_seq``, ``trafilatura``, a cascade whose second labeler is a
server), reading a record, simplifying it and labelling it belong in one task: an intermediate would only
be written and read back. Extracted shard ``i`` is made from WARC group ``i`` of the simplify stage's plan
(so shard numbers agree with a two-pass run of the same selection); its pages are prepared by the simplify
stage's code (:func:`dripper.stages.simplify.warc_page_rows`) and labelled, ``batch_size`` at a time, by the
extract stage's (:func:`dripper.stages.extract.extract_items`), so its rows are the rows the two passes
write, column for column.

Each shard is exactly-once and resumable as every stage's (markers, atomic publication; the marker names
the WARC files). It accounts for the records as the simplify stage does (``rows_in``: every record and
unreadable region; ``rows_out``: the pages; drops by the WARC reader's reasons) and for the pages as the
extract stage does (rows per extractor, fallbacks by reason); the counters of both are in its stats. A
cascade runs in the task as :class:`~dripper.pipeline.Extractor` runs it in one process: its routed share is
held over the worker's pages so far (the two-pass cascade chooses it over each whole shard), and
``route:pages_scored`` / ``route:pages_routed`` / ``route:declined`` / ``route:prompt_tokens_estimate`` /
``route:routed_prompt_tokens_estimate`` count it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

from dripper.config.extract import ExtractStageConfig
from dripper.config.simplify import SimplifyStageConfig
from dripper.io.storage import join_path
from dripper.labelers.base import BlockLabeler
from dripper.stages.extract import (
    EXTRACTED_STAGE,
    cached_extractor,
    close_stage_extractors,
    extract_items,
    extracted_schema,
    stage_extractor,
)
from dripper.stages.records import item_from_prepared
from dripper.stages.runner import (
    ShardTask,
    StageReport,
    finish_stage,
    run_shard_tasks,
    run_streaming_shard,
    stage_workers,
)
from dripper.stages.shards import ShardResult, ShardStats, ShardWriter
from dripper.stages.simplify import SIMPLIFIED_STAGE, ShardFormat, warc_page_rows

__all__ = ["chooses_one_pass", "one_pass_shard", "one_pass_shards"]


def chooses_one_pass(
    config: ExtractStageConfig, root: str, storage_options: dict[str, Any] | None = None
) -> bool:
    """Whether the WARC files of the run root ``root`` are extracted in one pass: ``config.one_pass``
    (:meth:`~dripper.config.extract.ExtractStageConfig.runs_one_pass`), where ``auto`` also continues a
    run begun in two passes (``{root}/simplified/`` has finished shards) in two, so that a rerun never mixes
    shards of both kinds."""
    if config.one_pass != "auto":
        return config.one_pass == "always"
    if ShardWriter(str(root), SIMPLIFIED_STAGE, storage_options).done_shards():
        return False
    return config.runs_one_pass()


def _one_pass_extractor(spec: Any, labeler: BlockLabeler | None, batch_size: int) -> Any:
    """The spec's pipeline, its cascade included (built once per process, as the extract stage's)."""
    if spec.route is None:
        return stage_extractor(spec, labeler, batch_size, score_routes=False)
    from dripper.pipeline import ExtractOptions, Extractor, Route
    from dripper.routing import RoutePolicy

    options = ExtractOptions(batch_size=batch_size)
    if labeler is None:
        key = json.dumps(["one_pass", spec.to_dict(), batch_size], sort_keys=True, default=str)
        return cached_extractor(key, lambda: Extractor.from_spec(spec, options))
    # An instance in place of the spec's first labeler (in-process runs): the spec's fallback and route.
    from dataclasses import replace

    from dripper.labelers.base import build_labeler

    options = replace(options, fallback=spec.fallback, fallback_on_empty=spec.fallback_on_empty)
    policy = RoutePolicy(share=spec.route.share, below=spec.route.below)
    return Extractor(labeler, options, Route(build_labeler(spec.route.labeler, **spec.route.options), policy))


def _count_routes(batch: Any, stats: ShardStats) -> None:
    """The cascade's counters from the rows' stats (pages the first labeler scored carry ``route``)."""
    for text in batch.column("stats").to_pylist():
        values = json.loads(text or "{}")
        if "route" not in values:
            continue
        tokens = int(values.get("prompt_tokens_estimate") or 0)
        stats.count("route:pages_scored")
        stats.count("route:declined", int(bool(values.get("declined"))))
        stats.count("route:prompt_tokens_estimate", tokens)
        if values.get("routed"):
            stats.count("route:pages_routed")
            stats.count("route:routed_prompt_tokens_estimate", tokens)


def _produce(
    warc_files: Sequence[str],
    extractor: Any,
    config: ExtractStageConfig,
    simplify_config: SimplifyStageConfig,
    shard_format: ShardFormat,
    input_storage_options: dict[str, Any] | None,
    stats: ShardStats,
) -> Iterator[Any]:
    source = warc_files[0] if len(warc_files) == 1 else f"{warc_files[0]} (+{len(warc_files) - 1})"
    counts_routes = config.extractor.route is not None
    items = []
    pages = warc_page_rows(warc_files, simplify_config, shard_format, input_storage_options, stats)
    rows_out_before = stats.rows_out
    for row, prepared in pages:
        items.append(item_from_prepared(row, prepared))
        if len(items) >= config.batch_size:
            batch = extract_items(source, extractor, items, stats)
            if counts_routes:
                _count_routes(batch, stats)
            items = []
            yield batch
    if items:
        batch = extract_items(source, extractor, items, stats)
        if counts_routes:
            _count_routes(batch, stats)
        yield batch
    # extract_items counted each page in and out; the reader counted every record and region in: a page
    # is one input, not two.
    stats.rows_in -= stats.rows_out - rows_out_before


def one_pass_shard(
    output_root: str,
    shard_index: int,
    warc_files: Sequence[str],
    config: ExtractStageConfig,
    simplify_config: SimplifyStageConfig,
    labeler: BlockLabeler | None = None,
    storage_options: dict[str, Any] | None = None,
    input_storage_options: dict[str, Any] | None = None,
    force: bool = False,
    shard_format: ShardFormat | None = None,
) -> ShardResult:
    """Extract the pages of ``warc_files`` with ``config.extractor`` (typed: a worker does not parse it
    again) into ``{output_root}/extracted/part-{shard_index:05d}.parquet``, reading them with
    ``simplify_config``'s limits (``max_payload_bytes``, ``max_page_bytes``, ``keep_truncated``).
    ``labeler``: an instance in place of the spec's labeler (in-process runs). Skipped when the marker
    exists. Runs anywhere: in-process or as a Dask task."""
    shard_format = shard_format or ShardFormat()
    warc_files = list(warc_files)
    extractor = _one_pass_extractor(config.extractor, labeler, config.batch_size)
    return run_streaming_shard(
        join_path(str(output_root), EXTRACTED_STAGE),
        shard_index,
        extracted_schema(),
        lambda stats: _produce(
            warc_files, extractor, config, simplify_config, shard_format, input_storage_options, stats
        ),
        storage_options=storage_options,
        force=force,
        marker_extra={
            "inputs": warc_files,
            "one_pass": True,
            "labeler": extractor.labeler.name,
            "worker_pid": os.getpid(),
        },
    )


def one_pass_shards(
    output_root: str,
    shards: Sequence[tuple[int, list[str]]],
    config: ExtractStageConfig,
    simplify_config: SimplifyStageConfig | None = None,
    *,
    labeler: BlockLabeler | None = None,
    scheduler: Any = None,
    storage_options: dict[str, Any] | None = None,
    input_storage_options: dict[str, Any] | None = None,
    force: bool = False,
    progress: bool | None = None,
    raise_on_failure: bool = True,
    shard_format: ShardFormat | None = None,
) -> StageReport:
    """The one-pass extract stage over planned shards (``(shard index, WARC files)``, the simplify stage's
    plan) into ``{output_root}/extracted/``, one task per shard: in this process (``config.workers`` 0),
    on a Dask ``LocalCluster`` of ``config.workers`` processes, or on ``scheduler``. The spec is taken as
    checked. Finished shards are skipped unless ``force``; the stage summary and ``{output_root}/
    _run_summary.json`` are written.

    Args:
        output_root: The extractor's folder.
        shards: The planned shards.
        config: The extract stage's config (extractor, ``batch_size``, ``workers``).
        simplify_config: How the WARC files are read (page limits, ``keep_truncated``; default: defaults).
        labeler: A labeler instance in place of the spec's, run in this process.
        scheduler: An existing Dask cluster: scheduler address or ``distributed.Client``.
        storage_options: fsspec options of ``output_root``.
        input_storage_options: fsspec options of the WARC files (default: ``storage_options``).
        force: Recompute finished shards.
        progress: Progress display (``None``: bar on a terminal, log lines otherwise).
        raise_on_failure: Raise :class:`StageError` when a shard failed (after summarising the others).
        shard_format: How pages are simplified (the model format of the released weights by default).
    """
    simplify_config = simplify_config or SimplifyStageConfig()
    input_storage_options = input_storage_options if input_storage_options is not None else storage_options
    output_root = str(output_root)
    spec = config.extractor
    started = time.perf_counter()
    workers = stage_workers(config.workers, labeler, scheduler)
    if workers == 0 and scheduler is None:
        _one_pass_extractor(spec, labeler, config.batch_size)  # a labeler that cannot start fails fast
    needs_gpu = spec.needs_gpu or (spec.route is not None and spec.route.needs_gpu)
    resources = {"GPU": 1} if needs_gpu and labeler is None else None
    stage_dir = join_path(output_root, EXTRACTED_STAGE)
    tasks = [
        ShardTask(
            index,
            one_pass_shard,
            (
                output_root, index, files, config, simplify_config, labeler, storage_options,
                input_storage_options, force, shard_format,
            ),
            stage_dir=stage_dir,
            marker_extra={"inputs": list(files)},
            storage_options=storage_options,
            resources=resources,
        )
        for index, files in shards
    ]  # fmt: skip
    results, failures = run_shard_tasks(
        EXTRACTED_STAGE,
        tasks,
        workers=workers,
        scheduler=scheduler,
        progress=progress,
        force=force,
        worker_cleanup=close_stage_extractors,
    )
    return finish_stage(
        EXTRACTED_STAGE,
        output_root,
        results,
        failures,
        shards=len(tasks),
        started=started,
        expected_shards=max((index for index, _ in shards), default=-1) + 1,
        storage_options=storage_options,
        parameters={
            "one_pass": True,
            "workers": "scheduler" if scheduler is not None else workers,
            "labeler": labeler.name if labeler is not None else spec.labeler,
            "warc_files": sum(len(files) for _, files in shards),
            "config": config.model_dump(mode="json"),
            "simplify_config": simplify_config.model_dump(mode="json"),
        },
        raise_on_failure=raise_on_failure,
    )
