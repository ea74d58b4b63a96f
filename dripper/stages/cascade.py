"""A cascade in the data plane: the first labeler on CPU workers, only the routed pages on the LM workers.

For an extractor spec with a ``route`` (:class:`~dripper.config.extractor.RouteSpec`),
:func:`extract_cascade` runs two shard steps over the finished simplified shards:

1. ``{extractor}/cascade_first/part-NNNNN.parquet``: the extract stage with the first labeler (and the
   spec's fallback), every page scored (``stats["route"]``, ``stats["declined"]``,
   ``stats["prompt_tokens_estimate"]``). These tasks ask for no worker resource.
2. ``{extractor}/extracted/part-NNNNN.parquet`` (:func:`route_shard`): the routed pages of the first step's
   shard, chosen over the whole shard (a ``share`` budget holds per shard; only the stats column is read
   for it), are read again from the simplified shard and labelled by the route's labeler in batches of
   ``batch_size``; every other row is copied. Rows stream through: memory holds one LM batch's rows.
   These tasks ask for ``GPU=1`` when the route's labeler needs a GPU, so on a cluster only they start
   the LM engine (one per worker process, kept for all its shards).

Each step is exactly-once and resumable as every stage is (markers, atomic publication; step 2's marker
names the step-1 shard it was made from). A crash between the steps loses nothing: the step-1 shard is
published, and a rerun only routes. The LM's labels are published only with the step-2 shard, so a rerun
never repeats LM work that was published. A routed page the LM fails on keeps its step-1 row (the first
labels, or the fallback's output where the first labeler declined it), with ``stats["route_failure"]``.

The extracted shard's stats count, besides rows per extractor, ``route:pages_scored``,
``route:pages_routed``, ``route:declined``, ``route:route_failed``, ``route:prompt_tokens_estimate`` (all
scored pages), ``route:routed_prompt_tokens_estimate`` and, for LM labelers, ``route:lm_prompt_tokens``
(the engine's own count, windows included); the run summary sums them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

from dripper.config.extract import ExtractStageConfig
from dripper.io.storage import filesystem_for, join_path
from dripper.stages.extract import (
    EXTRACTED_STAGE,
    cached_extractor,
    close_stage_extractors,
    count_row,
    extract_shards,
    extracted_schema,
    read_simplified_items,
)
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

__all__ = ["CASCADE_FIRST_STAGE", "extract_cascade", "route_shard"]

#: The first step's folder under the extractor's folder.
CASCADE_FIRST_STAGE = "cascade_first"
#: The route's timings, renamed so that the first step's stay beside them (as the in-process cascade's).
_ROUTE_STATS = {"label_seconds": "route_label_seconds", "seconds": "route_seconds"}


def _route_extractor(route: Any, batch_size: int) -> Any:
    """The route labeler's pipeline, without fallback (a page it fails on keeps its first-step row)."""
    from dripper.labelers.base import build_labeler
    from dripper.pipeline import ExtractOptions, Extractor

    key = json.dumps(["route", route.labeler, route.options, batch_size], sort_keys=True, default=str)
    options = ExtractOptions(fallback=None, batch_size=batch_size)
    return cached_extractor(key, lambda: Extractor(build_labeler(route.labeler, **route.options), options))


def _first_rows(
    path: str, batch_size: int, storage_options: Any, columns: list[str] | None = None
) -> Iterator:
    """The step-1 shard's rows, one at a time (``columns`` only, when given)."""
    import pyarrow.parquet as pq

    fs, fs_path = filesystem_for(path, storage_options)
    with fs.open(fs_path, "rb") as f:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=batch_size, columns=columns):
            yield from batch.to_pylist()


def _routing_keys(
    first: str, batch_size: int, storage_options: Any
) -> list[tuple[bool, float | None] | None]:
    """Per step-1 row, ``(declined, score)`` for the rows the first labeler scored, ``None`` for the others;
    only the stats column is read."""
    keys: list[tuple[bool, float | None] | None] = []
    for row in _first_rows(first, batch_size, storage_options, columns=["stats"]):
        values = json.loads(row["stats"] or "{}")
        keys.append((bool(values.get("declined")), values["route"]) if "route" in values else None)
    return keys


def _row_pairs(
    first: str,
    simplified: str,
    batch_size: int,
    storage_options: Any,
    input_storage_options: Any,
    wanted: Any,
) -> Iterator[tuple]:
    """``(step-1 row, simplified item)`` in shard order: the step-1 shard was made from this simplified
    shard, row for row. Only the ``wanted`` positions' pages are prepared (a slim shard's records are read
    again); the others' items hold their simplified row alone."""
    simplified_items = (
        item
        for items in read_simplified_items(
            simplified,
            batch_size,
            storage_options,
            input_storage_options=input_storage_options,
            wanted=wanted,
        )
        for item in items
    )
    for position, row in enumerate(_first_rows(first, batch_size, storage_options)):
        item = next(simplified_items, None)
        if item is None or item[3]["doc_id"] != row["doc_id"]:
            raise RuntimeError(
                f"{simplified}: row {position} is {item[3]['doc_id'] if item else 'past the end'!r}, not the "
                f"first step's {row['doc_id']!r}; the simplified shard changed since: rerun with force"
            )
        yield row, item
    if next(simplified_items, None) is not None:
        raise RuntimeError(f"{simplified} holds more rows than {first}: rerun the cascade with force")


def _produce_routed(
    first: str,
    simplified: str,
    spec: Any,
    batch_size: int,
    storage_options: Any,
    input_storage_options: Any,
    stats: ShardStats,
) -> Iterator[Any]:
    """The step-2 rows, streamed: the routed share is chosen over the whole shard from the stats column;
    then rows are held only until ``batch_size`` routed pages have gathered for one LM call."""
    import pyarrow as pa

    from dripper.pipeline import prompt_tokens_used
    from dripper.routing import RoutePolicy, select_routed

    keys = _routing_keys(first, batch_size, storage_options)
    scored = [index for index, key in enumerate(keys) if key is not None]
    policy = RoutePolicy(share=spec.route.share, below=spec.route.below)
    chosen = {scored[k] for k in select_routed([keys[i] for i in scored], policy)}
    extractor = _route_extractor(spec.route, batch_size) if chosen else None
    tokens_before = prompt_tokens_used(extractor.labeler) if extractor else None
    pending: list[tuple[dict[str, Any], dict[str, Any], Any]] = []  # (row, its stats, routed item or None)

    def flush() -> Any:
        routed = [(row, values, item) for row, values, item in pending if item is not None]
        if routed:
            started = time.perf_counter()
            results = extractor.extract_simplified([item for *_, item in routed])
            stats.count("route_seconds", time.perf_counter() - started)
            for (row, values, _), result in zip(routed, results, strict=True):
                _take_route_result(row, values, result, f"dripper:{extractor.labeler.name}", stats)
        for row, values, _ in pending:
            row["stats"] = json.dumps(values, sort_keys=True, default=str)
            count_row(stats, row["extractor"], row["fallback_reason"])
        batch = pa.RecordBatch.from_pylist([row for row, *_ in pending], schema=extracted_schema())
        pending.clear()
        return batch

    waiting = 0
    pairs = _row_pairs(
        first, simplified, batch_size, storage_options, input_storage_options, chosen.__contains__
    )
    for index, (row, (page, simplified_page, problem, _)) in enumerate(pairs):
        values = json.loads(row["stats"] or "{}")
        item = None
        if keys[index] is not None:
            routed = index in chosen
            values["routed"] = routed
            tokens = int(values.get("prompt_tokens_estimate") or 0)
            stats.count("route:pages_scored")
            stats.count("route:declined", int(keys[index][0]))
            stats.count("route:prompt_tokens_estimate", tokens)
            if routed:
                stats.count("route:pages_routed")
                stats.count("route:routed_prompt_tokens_estimate", tokens)
                item = (page, simplified_page, problem)
                waiting += 1
        pending.append((row, values, item))
        # Copied rows go out with the next LM batch, or on their own once a row group's worth has gathered.
        if waiting >= batch_size or (not waiting and len(pending) >= batch_size):
            yield flush()
            waiting = 0
    if pending:
        yield flush()
    if extractor is not None:
        tokens_after = prompt_tokens_used(extractor.labeler)
        if tokens_before is not None and tokens_after is not None:
            stats.count("route:lm_prompt_tokens", tokens_after - tokens_before)


def _take_route_result(
    row: dict[str, Any], values: dict[str, Any], result: Any, name: str, stats: Any
) -> None:
    """A routed row: the route's labels replace the step-1 result; without them the step-1 row stands."""
    if result.extractor != name:
        values["route_failure"] = result.fallback_reason
        stats.count("route:route_failed")
        return
    for key, value in result.stats.items():
        if key not in ("page_confidence", "n_blocks"):
            values[_ROUTE_STATS.get(key, key)] = value
    row.update(
        markdown=result.markdown,
        main_html=result.main_html,
        labels=result.labels,
        extractor=result.extractor,
        fallback_reason=None,
    )


def route_shard(
    input_root: str,
    output_root: str,
    shard_index: int,
    spec: Any,
    batch_size: int,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    input_storage_options: dict[str, Any] | None = None,
) -> ShardResult:
    """Step 2 of a cascade for one shard: ``{output_root}/cascade_first/`` shard ``shard_index`` with its
    routed pages labelled by the route's labeler → ``{output_root}/extracted/``. Skipped when done.
    ``spec``: the typed :class:`~dripper.config.extractor.ExtractorSpec` (a worker does not parse it);
    ``input_storage_options``: of the WARC files a slim shard's routed records are read again from."""
    first_stage = ShardWriter(str(output_root), CASCADE_FIRST_STAGE, storage_options)
    first = first_stage.url(first_stage.shard_path(shard_index))
    source = ShardWriter(str(input_root), SIMPLIFIED_STAGE, storage_options)
    simplified = source.url(source.shard_path(shard_index))
    return run_streaming_shard(
        join_path(str(output_root), EXTRACTED_STAGE),
        shard_index,
        extracted_schema(),
        lambda stats: _produce_routed(
            first, simplified, spec, batch_size, storage_options, input_storage_options, stats
        ),
        storage_options=storage_options,
        force=force,
        marker_extra={"inputs": [first], "labeler": spec.route.labeler, "worker_pid": os.getpid()},
    )


def extract_cascade(
    input_root: str,
    output_root: str,
    config: ExtractStageConfig,
    *,
    scheduler: Any = None,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    progress: bool | None = None,
    raise_on_failure: bool = True,
    input_storage_options: dict[str, Any] | None = None,
) -> StageReport:
    """Both steps of the cascade ``config.extractor`` (a spec with a ``route``, taken as checked) over the
    finished simplified shards of ``input_root`` (see the module's documentation); returns the report of the
    ``extracted`` step (the first step's is in the run summary's ``stage_runs``). Shards whose first step
    failed are left to a rerun."""
    spec, batch_size, workers = config.extractor, config.batch_size, config.workers
    first = extract_shards(
        input_root,
        output_root,
        config,
        scheduler=scheduler,
        storage_options=storage_options,
        force=force,
        progress=progress,
        raise_on_failure=False,
        stage=CASCADE_FIRST_STAGE,
        score_routes=True,
        input_storage_options=input_storage_options,
    )
    started = time.perf_counter()
    first_stage = ShardWriter(str(output_root), CASCADE_FIRST_STAGE, storage_options)
    shards = first_stage.done_shards()
    tasks = [
        ShardTask(
            index,
            route_shard,
            # The typed spec itself (pydantic pickles it): a worker does not parse it again.
            (
                str(input_root),
                str(output_root),
                index,
                spec,
                batch_size,
                storage_options,
                force,
                input_storage_options,
            ),  # fmt: skip
            stage_dir=join_path(str(output_root), EXTRACTED_STAGE),
            marker_extra={"inputs": [first_stage.url(first_stage.shard_path(index))]},
            storage_options=storage_options,
            resources={"GPU": 1} if spec.route.needs_gpu else None,
        )
        for index in shards
    ]
    results, failures = run_shard_tasks(
        EXTRACTED_STAGE,
        tasks,
        workers=workers,
        scheduler=scheduler,
        progress=progress,
        force=force,
        worker_cleanup=close_stage_extractors,
    )
    failures = {**first.failed, **failures}
    report = StageReport(
        stage=EXTRACTED_STAGE,
        root=str(output_root),
        shards=first.shards,
        written=sum(r.status == "written" for r in results),
        skipped=sum(r.status == "skipped" for r in results),
        failed=failures,
        wall_seconds=time.perf_counter() - started + first.wall_seconds,
    )
    record_stage_run(
        str(output_root),
        report,
        expected_shards=first.summary.get("shards_expected") or (max(shards) + 1 if shards else 0),
        storage_options=storage_options,
        parameters={
            "workers": "scheduler" if scheduler is not None else workers,
            "labeler": spec.route.labeler,
            "route": spec.route.model_dump(mode="json"),
            "input_root": str(input_root),
        },
    )
    if failures and raise_on_failure:
        raise StageError(report)
    return report
