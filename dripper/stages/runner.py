"""Running a stage's shards: streaming publication of one shard, and many shards on Dask or in-process.

- :func:`run_streaming_shard` is :func:`dripper.stages.shards.run_shard` for shards too large to hold
  in memory (a Common Crawl WARC file decodes to gigabytes of HTML): rows are written to parquet in row
  groups as they are produced, then published and marked exactly as the shard contract says.
- :func:`run_shard_tasks` runs one task per shard: in this process (``workers=0``), on a Dask
  ``LocalCluster`` started for the run (bound to 127.0.0.1, no dashboard), or on an existing cluster
  (a scheduler address or a ``distributed.Client``). A task that fails does not stop the others; a worker
  that dies has its task rescheduled by Dask; a rerun skips the shards whose marker exists.
- :func:`record_stage_run` rolls the markers up into the stage summary and the run summary.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dripper.io.storage import filesystem_for
from dripper.stages.shards import (
    RUN_SUMMARY_NAME,
    ShardInputsChanged,
    ShardResult,
    ShardStats,
    ShardWriter,
    shard_name,
    write_run_summary,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "STAGE_ORDER",
    "ShardInputsChanged",
    "ShardTask",
    "StageError",
    "StageReport",
    "StageProgress",
    "record_stage_run",
    "run_shard_tasks",
    "run_streaming_shard",
]

log = logging.getLogger(__name__)

#: Stage folders in pipeline order (the run summary lists them in this order).
STAGE_ORDER = ("simplified", "cascade_first", "extracted")


class StageError(RuntimeError):
    """Some shards of a stage failed; the others are published. ``report`` says which and why."""

    def __init__(self, report: StageReport) -> None:
        failed = ", ".join(f"{shard_name(i)}: {why}" for i, why in sorted(report.failed.items())[:5])
        more = f" (and {len(report.failed) - 5} more)" if len(report.failed) > 5 else ""
        super().__init__(
            f"{report.stage}: {len(report.failed)} of {report.shards} shards failed: {failed}{more}; "
            "fix the cause and rerun: finished shards are skipped"
        )
        self.report = report


@dataclass
class StageReport:
    """What one invocation of a stage did.

    Attributes:
        stage: The stage folder (``simplified``, ``extracted``).
        root: The run root written to.
        shards: Shards planned.
        written: Shards computed and published by this invocation.
        skipped: Shards already done (marker found) and left alone.
        failed: Shard index → error, for shards that raised.
        wall_seconds: Wall time of the invocation.
        summary: The stage summary rolled up from all markers (see :func:`summarize_stage`).
    """

    stage: str
    root: str
    shards: int
    written: int = 0
    skipped: int = 0
    failed: dict[int, str] = field(default_factory=dict)
    wall_seconds: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "root": self.root,
            "shards": self.shards,
            "written": self.written,
            "skipped": self.skipped,
            "failed": {str(k): v for k, v in sorted(self.failed.items())},
            "wall_seconds": round(self.wall_seconds, 3),
            "summary": self.summary,
        }


# -- one shard, streamed ----------------------------------------------------------------------------------


def run_streaming_shard(
    stage_dir: str,
    shard_index: int,
    schema: pa.Schema,
    produce: Callable[[ShardStats], Iterable[pa.RecordBatch]],
    *,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    marker_extra: dict[str, Any] | None = None,
    compression: str = "zstd",
) -> ShardResult:
    """Compute and publish one shard of ``{root}/{stage}`` whose rows are written as they are produced.

    :meth:`ShardWriter.publish` on the stage folder, with the schema given up front (see there for
    ``produce``, ``force``, ``marker_extra`` and how the data and marker are published).
    """
    writer = ShardWriter.for_stage_dir(stage_dir, storage_options, compression)
    return writer.publish(shard_index, produce, schema=schema, force=force, marker_extra=marker_extra)


# -- many shards -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardTask:
    """One shard's work: ``function(*args, **kwargs)`` returns its :class:`ShardResult`.

    ``function`` must be importable by name on Dask workers (a module-level function). With
    ``stage_dir``, :func:`run_shard_tasks` looks for the shard's marker first and does not submit a
    finished shard at all (``marker_extra["inputs"]`` is checked against the marker's). ``resources``
    (``{"GPU": 1}``) are the Dask worker resources the task needs on an external cluster.
    """

    shard_index: int
    function: Callable[..., ShardResult]
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    stage_dir: str | None = None
    marker_extra: dict[str, Any] | None = None
    storage_options: dict[str, Any] | None = None
    resources: dict[str, float] | None = None


class StageProgress:
    """Progress of a stage: a tqdm bar on a terminal, log lines otherwise (or nothing)."""

    def __init__(self, stage: str, total: int, enabled: bool | None = None) -> None:
        self.stage = stage
        self.total = total
        self.done = 0
        self.pages_in = 0
        self.pages_out = 0
        self.rows_written = 0
        self.started = time.perf_counter()
        self._last_log = 0.0
        tty = sys.stderr.isatty()
        self._bar = None
        self._log = enabled is not False and not tty
        if enabled is not False and tty:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="shard", desc=stage, file=sys.stderr)

    def update(self, shard_index: int, status: str, stats: ShardStats | None = None) -> None:
        self.done += 1
        if stats is not None:
            self.pages_in += stats.rows_in
            self.pages_out += stats.rows_out
            if status == "written":
                self.rows_written += stats.rows_out
        elapsed = time.perf_counter() - self.started
        if self._bar is not None:
            self._bar.set_postfix(pages=self.pages_out, refresh=False)
            self._bar.update(1)
        elif self._log:
            # One line per shard for small runs, then at most one every 10 s (and the last one).
            now = time.perf_counter()
            if self.total <= 50 or self.done == self.total or now - self._last_log >= 10:
                self._last_log = now
                rate = self.rows_written / elapsed if elapsed else 0.0
                log.info(
                    "%s: %s %s (%d/%d shards, %d rows in, %d out, %.1f rows/s written)",
                    self.stage,
                    shard_name(shard_index),
                    status,
                    self.done,
                    self.total,
                    self.pages_in,
                    self.pages_out,
                    rate,
                )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


@contextmanager
def dask_client(workers: int | None = None, scheduler: Any = None, **cluster_options: Any) -> Iterator[Any]:
    """A ``distributed.Client``: on ``scheduler`` (an address or a Client, used as is) or on a new
    ``LocalCluster`` of ``workers`` single-threaded processes on 127.0.0.1, closed on exit.

    The LocalCluster's worker processes are not daemons: an LM engine in a worker (vLLM starts its engine
    core as a child process) must be able to start processes of its own. The nannies still stop their
    workers when the cluster closes. An external cluster's workers need the same setting
    (``DASK_DISTRIBUTED__WORKER__DAEMON=False`` in the ``dask worker`` environment); the vLLM labeler
    otherwise runs its engine core in the worker process itself.
    """
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Dask is needed to run a stage on workers; install the data-plane extra: "
            "pip install 'dripper-platform[dataplane]' (or: pip install 'dask[distributed]'), "
            "or run in-process with --workers 0"
        ) from exc
    if scheduler is not None and not isinstance(scheduler, str):
        yield scheduler  # a Client the caller owns
        return
    if scheduler:
        client = Client(scheduler)
        try:
            yield client
        finally:
            client.close()
        return
    # Dask logs its start-up at INFO on its own handler; keep it quiet unless asked for (DEBUG).
    dask_log = logging.getLogger("distributed")
    if dask_log.getEffectiveLevel() > logging.DEBUG:
        dask_log.setLevel(logging.WARNING)
    options = {
        "n_workers": workers or os.cpu_count() or 1,
        "threads_per_worker": 1,  # the work is pure-Python CPU work: processes, not threads
        "processes": True,
        "host": "127.0.0.1",
        "dashboard_address": None,
        # The scheduler serves /health and metrics over HTTP even without a dashboard: any free port.
        "scheduler_kwargs": {"dashboard_address": "127.0.0.1:0"},
        "silence_logs": logging.WARNING,
    }
    options.update(cluster_options)
    # Held for the cluster's whole life: a nanny reads it again when it restarts a dead worker.
    with dask.config.set({"distributed.worker.daemon": False}):
        cluster = LocalCluster(**options)
        client = Client(cluster)
        try:
            yield client
        finally:
            client.close()
            cluster.close()


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]


def _finished_before(tasks: Sequence[ShardTask]) -> dict[int, ShardResult]:
    """Results of the tasks whose shard is already done (read from their markers)."""
    done: dict[int, ShardResult] = {}
    writers: dict[str, tuple[ShardWriter, set[int]]] = {}
    for task in tasks:
        if task.stage_dir is None:
            continue
        if task.stage_dir not in writers:
            writer = ShardWriter.for_stage_dir(task.stage_dir, task.storage_options)
            writers[task.stage_dir] = (writer, set(writer.done_shards()))
        writer, finished = writers[task.stage_dir]
        if task.shard_index in finished:
            done[task.shard_index] = writer.skipped(task.shard_index, task.marker_extra)
    return done


def _placement(stage: str, client: Any, tasks: Sequence[ShardTask]) -> dict[int, dict[str, Any]]:
    """``submit`` keywords placing the tasks that need worker resources (an external cluster's GPU workers,
    started with ``dask worker … --resources GPU=1``). Where no worker advertises a resource the tasks run on
    any worker, said once (a CPU-only cluster still runs an LM labeler, slowly)."""
    wanted = {name for task in tasks for name in (task.resources or {})}
    if not wanted:
        return {}
    advertised = {
        name
        for info in client.scheduler_info(n_workers=-1)["workers"].values()
        for name, amount in (info.get("resources") or {}).items()
        if amount
    }
    for name in sorted(wanted - advertised):
        log.warning(
            "%s: no worker of the cluster advertises the %s resource: its tasks run on any worker (start "
            "the workers that have one with `dask worker … --resources %s=1`)",
            stage,
            name,
            name,
        )
    placement = {}
    for task in tasks:
        needed = {k: v for k, v in (task.resources or {}).items() if k in advertised}
        if needed:
            placement[task.shard_index] = {"resources": needed}
    return placement


def stage_workers(workers: int | None, labeler: Any, scheduler: Any) -> int | None:
    """The worker count a stage runs on: ``workers``, or 0 (this process) when a labeler *instance* is
    given, which lives here and cannot go to a scheduler's workers (``ValueError``)."""
    if labeler is None:
        return workers
    if scheduler is not None:
        raise ValueError("a labeler instance runs in this process: give a scheduler a spec's labeler")
    return 0


def run_shard_tasks(
    stage: str,
    tasks: Sequence[ShardTask],
    *,
    workers: int | None = 0,
    scheduler: Any = None,
    progress: bool | None = None,
    retries: int = 1,
    force: bool = False,
    worker_cleanup: Callable[[], Any] | None = None,
) -> tuple[list[ShardResult], dict[int, str]]:
    """Run shard tasks and return ``(results, failures)``; a failing task does not stop the others.

    Args:
        stage: Name for progress and logs.
        tasks: One per shard.
        workers: ``0``: in this process, one shard after the other; ``N``: a ``LocalCluster`` of N
            processes; ``None``: one process per core. Ignored when ``scheduler`` is given.
        scheduler: A Dask scheduler address (``tcp://host:8786``) or a ``distributed.Client``.
        progress: Progress display (``None``: a bar on a terminal, log lines otherwise; ``False``: none).
        retries: Dask retries of a task that raised (transient storage errors). A task whose worker
            dies is rescheduled by Dask itself (``distributed.scheduler.allowed-failures`` times).
        force: Submit every task, even for shards already done (the tasks recompute them).
        worker_cleanup: Run on every worker of a LocalCluster this call started, before it stops (e.g.
            closing LM engines whose processes would outlive the worker). Workers of an external cluster
            keep what they built for the next stage run.

    Returns:
        The results of the tasks that finished (in shard order) and ``{shard_index: error}`` for the others.
    """
    display = StageProgress(stage, len(tasks), progress)
    results: list[ShardResult] = []
    failures: dict[int, str] = {}

    def finished(task: ShardTask, result: ShardResult) -> None:
        results.append(result)
        display.update(task.shard_index, result.status, result.stats)

    def failed(task: ShardTask, error: BaseException) -> None:
        failures[task.shard_index] = _describe(error)
        log.error("%s: %s failed: %s", stage, shard_name(task.shard_index), _describe(error))
        display.update(task.shard_index, "failed")

    # Finished shards are reported from their markers, without starting workers for them.
    done = {} if force else _finished_before(tasks)
    for task in tasks:
        if task.shard_index in done:
            finished(task, done[task.shard_index])
    tasks = [task for task in tasks if task.shard_index not in done]
    try:
        if scheduler is None and workers == 0:
            for task in tasks:
                try:
                    finished(task, task.function(*task.args, **task.kwargs))
                except Exception as error:
                    failed(task, error)
        elif tasks:
            from distributed import as_completed

            with dask_client(workers, scheduler) as client:
                placement = _placement(stage, client, tasks) if scheduler is not None else {}
                futures = {}
                for task in tasks:
                    future = client.submit(
                        task.function,
                        *task.args,
                        key=f"{stage}-{shard_name(task.shard_index)}-{os.urandom(4).hex()}",
                        pure=False,
                        retries=retries,
                        **placement.get(task.shard_index, {}),
                        **task.kwargs,
                    )
                    futures[future] = task
                for future in as_completed(futures):
                    task = futures[future]
                    if future.status == "finished":
                        finished(task, future.result())
                    else:
                        failed(task, future.exception())
                    future.release()
                if worker_cleanup is not None and scheduler is None:
                    try:
                        client.run(worker_cleanup)
                    except Exception as error:  # noqa: BLE001 - the shards are published; say it, go on
                        log.warning("%s: worker clean-up failed: %s", stage, _describe(error))
    finally:
        display.close()
    results.sort(key=lambda result: result.shard_index)
    return results, failures


# -- summaries ---------------------------------------------------------------------------------------------


def _read_json(fs: Any, path: str) -> dict[str, Any]:
    try:
        with fs.open(path, "rb") as f:
            return json.loads(f.read())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def record_stage_run(
    root: str,
    report: StageReport,
    *,
    expected_shards: int,
    storage_options: dict[str, Any] | None = None,
    parameters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the stage summary and ``{root}/_run_summary.json`` after a stage ran; returns the run summary.

    The run summary holds every stage that has finished shards (pipeline order), each with pages in and
    out, drops and fallbacks by reason and summed shard seconds, plus ``stage_runs``: per stage, the wall
    time, workers and shard counts of its latest invocation (kept across the invocations of other stages).
    """
    fs, root_path = filesystem_for(str(root), storage_options)
    fs.invalidate_cache(root_path.rstrip("/"))
    previous = _read_json(fs, posixpath.join(root_path.rstrip("/"), RUN_SUMMARY_NAME))
    expected = {
        name: stage["shards_expected"]
        for name, stage in (previous.get("stages") or {}).items()
        if isinstance(stage, dict) and "shards_expected" in stage
    }
    expected[report.stage] = expected_shards
    stage_runs = dict(previous.get("stage_runs") or {})
    stage_runs[report.stage] = {
        "wall_seconds": round(report.wall_seconds, 3),
        "shards": report.shards,
        "written": report.written,
        "skipped": report.skipped,
        "failed": len(report.failed),
        **(parameters or {}),
    }
    stages = [
        s for s in STAGE_ORDER if s == report.stage or ShardWriter(root, s, storage_options).done_shards()
    ]
    summary = write_run_summary(
        root,
        stages,
        expected_shards={s: n for s, n in expected.items() if s in stages},
        storage_options=storage_options,
        extra={"stage_runs": stage_runs},
    )
    report.summary = summary["stages"].get(report.stage, {})
    return summary


def finish_stage(
    stage: str,
    root: str,
    results: Sequence[ShardResult],
    failures: dict[int, str],
    *,
    shards: int,
    started: float,
    expected_shards: int,
    storage_options: dict[str, Any] | None = None,
    parameters: dict[str, Any] | None = None,
    raise_on_failure: bool = True,
) -> StageReport:
    """The report of a stage's shard tasks (``started``: its ``time.perf_counter()`` at the start), recorded
    with :func:`record_stage_run`; raises :class:`StageError` after recording when a shard failed and
    ``raise_on_failure``."""
    report = StageReport(
        stage=stage,
        root=root,
        shards=shards,
        written=sum(r.status == "written" for r in results),
        skipped=sum(r.status == "skipped" for r in results),
        failed=failures,
        wall_seconds=time.perf_counter() - started,
    )
    record_stage_run(
        root, report, expected_shards=expected_shards, storage_options=storage_options, parameters=parameters
    )
    if failures and raise_on_failure:
        raise StageError(report)
    return report
