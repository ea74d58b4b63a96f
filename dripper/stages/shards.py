"""The shard contract (the docs' data-plane page, "Shards"), whatever a stage computes.

Layout under a run root (local path or any fsspec URL such as ``s3://bucket/run``)::

    {root}/{stage}/part-00000.parquet        the shard's rows
    {root}/{stage}/part-00000.done.json      its marker: written last, holds the shard's ShardStats
    {root}/{stage}/_tmp/…                    in-flight files (local filesystems only)
    {root}/{stage}/_summary.json             roll-up of the stage's markers
    {root}/_run_summary.json                 roll-up of all stages

A shard counts as done only when its marker exists. Publishing:

- local filesystems: data and marker are each written to ``_tmp/`` and renamed into place (atomic);
  data first, marker second;
- object stores (S3 and the like): a PUT is atomic per object, so the data object is written under its
  final name, then the marker. A crash between the two leaves data without a marker: the shard is not
  done, a rerun recomputes it and overwrites the same object, so nothing is duplicated.

Readers of a stage must list shards with :func:`list_done_shards` (or :func:`done_shard_paths`), never by
globbing ``part-*.parquet``, which may include a shard whose marker was never written.

Every shard accounts for its input: ``rows_in == rows_out + sum(dropped.values())``, checked before
anything is published (:class:`ShardAccountingError`).
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from dripper.io.storage import filesystem_for, is_local, publish_bytes
from dripper.versions import software_versions

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "RUN_SUMMARY_NAME",
    "STAGE_SUMMARY_NAME",
    "ShardAccountingError",
    "ShardInputsChanged",
    "ShardResult",
    "ShardStats",
    "ShardWriter",
    "done_shard_paths",
    "list_done_shards",
    "marker_name",
    "run_shard",
    "shard_name",
    "summarize_stage",
    "write_run_summary",
]

log = logging.getLogger(__name__)

RUN_SUMMARY_NAME = "_run_summary.json"
STAGE_SUMMARY_NAME = "_summary.json"
MARKER_VERSION = 1
_MARKER = re.compile(r"part-(\d{5,})\.done\.json$")


def shard_name(shard_index: int) -> str:
    """``part-00042.parquet``."""
    if shard_index < 0:
        raise ValueError(f"shard_index must be >= 0, got {shard_index}")
    return f"part-{shard_index:05d}.parquet"


def marker_name(shard_index: int) -> str:
    """``part-00042.done.json``."""
    return shard_name(shard_index).removesuffix(".parquet") + ".done.json"


class ShardAccountingError(ValueError):
    """A shard's rows do not add up (``rows_in != rows_out + dropped``) or do not match its table."""


@dataclass
class ShardStats:
    """What one shard did with its input.

    Attributes:
        rows_in: Input rows (pages) the shard was given.
        rows_out: Rows written.
        dropped: Rows not written, by reason (``{"non_html": 3, "empty_after_cleaning": 1}``).
        fallbacks: Rows written through a fallback path, by reason (already counted in ``rows_out``).
        counters: Any other numbers the stage wants rolled up (summed across shards).
        seconds: Wall time of the shard's computation (measured by :func:`run_shard` when left at 0).
    """

    rows_in: int = 0
    rows_out: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    fallbacks: Counter[str] = field(default_factory=Counter)
    counters: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def drop(self, reason: str, n: int = 1) -> None:
        """Count ``n`` input rows dropped for ``reason``."""
        self.dropped[reason] += n

    def fallback(self, reason: str, n: int = 1) -> None:
        """Count ``n`` output rows produced by a fallback, for ``reason``."""
        self.fallbacks[reason] += n

    def count(self, name: str, n: int | float = 1) -> None:
        self.counters[name] += n

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def check(self, where: str = "shard") -> None:
        """Raise :class:`ShardAccountingError` unless ``rows_in == rows_out + dropped``."""
        negative = {k: v for k, v in self.dropped.items() if v < 0}
        if self.rows_in < 0 or self.rows_out < 0 or negative:
            raise ShardAccountingError(
                f"{where}: negative counts (rows_in={self.rows_in}, rows_out={self.rows_out}, dropped={negative})"
            )
        if self.rows_in != self.rows_out + self.dropped_total:
            raise ShardAccountingError(
                f"{where}: rows_in={self.rows_in} but rows_out={self.rows_out} + dropped={self.dropped_total} "
                f"({dict(self.dropped)}) = {self.rows_out + self.dropped_total}; every input row must be "
                "written or dropped with a reason (ShardStats.drop)"
            )

    def merge(self, other: ShardStats) -> ShardStats:
        """Add ``other`` into this one and return it."""
        self.rows_in += other.rows_in
        self.rows_out += other.rows_out
        self.dropped.update(other.dropped)
        self.fallbacks.update(other.fallbacks)
        self.counters.update(other.counters)
        self.seconds += other.seconds
        return self

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "dropped": dict(sorted(self.dropped.items())),
            "fallbacks": dict(sorted(self.fallbacks.items())),
            "counters": dict(sorted(self.counters.items())),
            "seconds": round(self.seconds, 6),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShardStats:
        return cls(
            rows_in=int(data.get("rows_in", 0)),
            rows_out=int(data.get("rows_out", 0)),
            dropped=Counter(data.get("dropped") or {}),
            fallbacks=Counter(data.get("fallbacks") or {}),
            counters=Counter(data.get("counters") or {}),
            seconds=float(data.get("seconds", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class ShardResult:
    """What :func:`run_shard` did: ``status`` is ``"written"`` or ``"skipped"`` (marker already there)."""

    shard_index: int
    status: str
    path: str
    stats: ShardStats


class ShardWriter:
    """Shards of one stage under one run root: ``ShardWriter("s3://b/run", "simplified")``.

    Args:
        root: The run root (local path or fsspec URL).
        stage: The stage's folder name.
        storage_options: fsspec options (``endpoint_url``, credentials, …).
        compression: Parquet compression codec.
    """

    def __init__(
        self,
        root: str,
        stage: str,
        storage_options: dict[str, Any] | None = None,
        compression: str = "zstd",
    ) -> None:
        if not stage or "/" in stage or stage.startswith(("_", ".")):
            raise ValueError(f"stage must be a plain folder name not starting with '_' or '.', got {stage!r}")
        self.root = str(root)
        self.stage = stage
        self.storage_options = storage_options
        self.compression = compression
        self.fs, root_path = filesystem_for(self.root, storage_options)
        self.root_path = root_path.rstrip("/")
        self.stage_path = posixpath.join(self.root_path, stage)
        self.local = is_local(self.root)

    @classmethod
    def for_stage_dir(
        cls, stage_dir: str, storage_options: dict[str, Any] | None = None, compression: str = "zstd"
    ) -> ShardWriter:
        """The writer of ``{root}/{stage}``."""
        root, stage = _split(stage_dir)
        return cls(root, stage, storage_options, compression)

    # -- names ---------------------------------------------------------------------------------------
    def shard_path(self, shard_index: int) -> str:
        return posixpath.join(self.stage_path, shard_name(shard_index))

    def marker_path(self, shard_index: int) -> str:
        return posixpath.join(self.stage_path, marker_name(shard_index))

    def url(self, fs_path: str) -> str:
        """A filesystem path as a URL usable outside this writer (``s3://…`` or a local path)."""
        return fs_path if self.local else self.fs.unstrip_protocol(fs_path)

    # -- state ---------------------------------------------------------------------------------------
    def _refresh(self) -> None:
        # s3fs caches listings; another worker may have published since.
        self.fs.invalidate_cache(self.stage_path)

    def is_done(self, shard_index: int) -> bool:
        self._refresh()
        return bool(self.fs.exists(self.marker_path(shard_index)))

    def read_marker(self, shard_index: int) -> dict[str, Any]:
        with self.fs.open(self.marker_path(shard_index), "rb") as f:
            return json.loads(f.read())

    def done_shards(self) -> list[int]:
        """Indices of the shards whose marker exists, ascending."""
        self._refresh()
        try:
            names = self.fs.ls(self.stage_path, detail=False)
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            match = _MARKER.search(posixpath.basename(name.rstrip("/")))
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    # -- publishing ----------------------------------------------------------------------------------
    def _publish_bytes(self, data: bytes, final_path: str) -> None:
        tmp = self._tmp_path(final_path) if self.local else None
        publish_bytes(self.fs, final_path, data, self.local, tmp)

    def _tmp_path(self, final_path: str) -> str:
        tmp_dir = posixpath.join(self.stage_path, "_tmp")
        self.fs.makedirs(tmp_dir, exist_ok=True)
        return posixpath.join(tmp_dir, f"{posixpath.basename(final_path)}.{uuid.uuid4().hex}.tmp")

    def write_marker(self, shard_index: int, stats: ShardStats, extra: dict[str, Any] | None = None) -> str:
        """Publish the shard's marker: from now on the shard is done."""
        marker = {
            "version": MARKER_VERSION,
            "stage": self.stage,
            "shard": shard_index,
            "path": shard_name(shard_index),
            "rows": stats.rows_out,
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "stats": stats.to_dict(),
            "software": software_versions(),  # of the process that made the shard
            **(extra or {}),
        }
        path = self.marker_path(shard_index)
        self._publish_bytes((json.dumps(marker, indent=1, sort_keys=True) + "\n").encode(), path)
        return path

    def run(
        self,
        shard_index: int,
        compute: Callable[[], tuple[pa.Table, ShardStats]],
        *,
        force: bool = False,
        marker_extra: dict[str, Any] | None = None,
    ) -> ShardResult:
        """Compute and publish one shard held in memory unless its marker exists (see :func:`run_shard`)."""

        def produce(stats: ShardStats) -> Iterator[pa.Table]:
            table, computed = compute()
            stats.merge(computed)
            yield table

        return self.publish(shard_index, produce, force=force, marker_extra=marker_extra)

    def publish(
        self,
        shard_index: int,
        produce: Callable[[ShardStats], Iterable[pa.RecordBatch | pa.Table]],
        *,
        schema: pa.Schema | None = None,
        force: bool = False,
        marker_extra: dict[str, Any] | None = None,
    ) -> ShardResult:
        """Compute and publish one shard, its rows written as they are produced: the one publishing path.

        Args:
            shard_index: The shard's number.
            produce: Called with the shard's (empty) :class:`ShardStats`, which it fills in; yields record
                batches or tables (a row group or more each). Called only when the shard is not done.
            schema: The parquet schema; ``None`` takes the first batch's (``produce`` must then yield one,
                empty or not).
            force: Recompute even if the marker exists.
            marker_extra: More marker fields; ``inputs`` (a list) is compared with a finished shard's and a
                difference raises :class:`ShardInputsChanged` instead of silently skipping.

        The data goes to ``_tmp/`` and is renamed into place on local filesystems, or is uploaded under its
        final name on object stores (an upload becomes visible only when complete); the marker is written
        last. The accounting is checked before anything is published (:class:`ShardAccountingError`).
        """
        pq = _require_pyarrow_parquet()
        where = f"{self.stage}/{shard_name(shard_index)}"
        if self.is_done(shard_index):
            if not force:
                return self.skipped(shard_index, marker_extra)
            # Unpublish first: a crash while rewriting must not leave the old marker over new data.
            self.fs.rm_file(self.marker_path(shard_index))
        self.fs.makedirs(self.stage_path, exist_ok=True)
        final_path = self.shard_path(shard_index)
        target = self._tmp_path(final_path) if self.local else final_path
        stats = ShardStats()
        started = time.perf_counter()
        rows = 0
        handle = self.fs.open(target, "wb")
        parquet = None
        try:
            for batch in produce(stats):
                if parquet is None:
                    parquet = pq.ParquetWriter(handle, schema or batch.schema, compression=self.compression)
                if batch.num_rows:
                    parquet.write(batch)
                    rows += batch.num_rows
            if parquet is None:
                if schema is None:
                    raise ValueError(f"{where}: produce yielded nothing and no schema was given")
                parquet = pq.ParquetWriter(handle, schema, compression=self.compression)
            parquet.close()
            if not stats.seconds:
                stats.seconds = time.perf_counter() - started
            stats.check(where)
            if rows != stats.rows_out:
                raise ShardAccountingError(
                    f"{where}: {rows} rows written but stats.rows_out={stats.rows_out}"
                )
        except BaseException:
            self._discard(handle, target)
            raise
        handle.close()
        if self.local:
            self.fs.mv(target, final_path)
        self.write_marker(shard_index, stats, marker_extra)
        return ShardResult(shard_index, "written", self.url(final_path), stats)

    def skipped(self, shard_index: int, marker_extra: dict[str, Any] | None = None) -> ShardResult:
        """The result of a finished shard, from its marker (inputs checked as :meth:`publish` says)."""
        marker = self.read_marker(shard_index)
        _check_same_inputs(marker, marker_extra, f"{self.stage}/{shard_name(shard_index)}")
        stats = ShardStats.from_dict(marker.get("stats", {}))
        return ShardResult(shard_index, "skipped", self.url(self.shard_path(shard_index)), stats)

    def _discard(self, handle: Any, target: str) -> None:
        # Buffered object-store files (s3fs) abort their upload; then the target is removed (a local temp
        # file, or an object under its final name that no marker covers).
        aborted = not self.local and hasattr(handle, "discard")
        with suppress(Exception):  # cleanup must not hide the error that got us here
            if aborted:
                handle.discard()
            handle.close()
        with suppress(Exception):  # also after an abort: an unmarked object of an earlier attempt may remain
            self.fs.rm_file(target)

    def summarize(self, expected_shards: int | None = None, write: bool = True) -> dict[str, Any]:
        """Roll the stage's markers up (see :func:`summarize_stage`)."""
        total = ShardStats()
        shards = self.done_shards()
        software: dict[str, tuple[dict[str, Any], int]] = {}  # distinct version sets, with their shards
        for index in shards:
            marker = self.read_marker(index)
            total.merge(ShardStats.from_dict(marker.get("stats", {})))
            if marker.get("software"):
                key = json.dumps(marker["software"], sort_keys=True)
                seen, count = software.get(key, (marker["software"], 0))
                software[key] = (seen, count + 1)
        summary: dict[str, Any] = {
            "stage": self.stage,
            "shards_done": len(shards),
            "pages_in": total.rows_in,
            "pages_out": total.rows_out,
            "dropped": dict(sorted(total.dropped.items())),
            "dropped_total": total.dropped_total,
            "fallbacks": dict(sorted(total.fallbacks.items())),
            "counters": dict(sorted(total.counters.items())),
            "seconds": round(total.seconds, 6),
            # what made the shards: one version set, or several (each with its shard count) when the
            # workers differed: a corpus whose shards two parser stacks made is not reproducible as one
            "software": (
                next(iter(software.values()))[0]
                if len(software) == 1
                else [{"shards": count, **seen} for seen, count in software.values()] or None
            ),
        }
        if expected_shards is not None:
            missing = sorted(set(range(expected_shards)) - set(shards))
            summary["shards_expected"] = expected_shards
            summary["shards_missing"] = missing
            summary["complete"] = not missing
        if write:
            self._publish_bytes(
                (json.dumps(summary, indent=1) + "\n").encode(),
                posixpath.join(self.stage_path, STAGE_SUMMARY_NAME),
            )
        return summary


class ShardInputsChanged(ValueError):
    """A shard's marker records other inputs than the run now plans for it (a run root reused)."""


def _check_same_inputs(marker: dict[str, Any], marker_extra: dict[str, Any] | None, where: str) -> None:
    if not marker_extra or "inputs" not in marker_extra or "inputs" not in marker:
        return
    if list(marker["inputs"]) != list(marker_extra["inputs"]):
        raise ShardInputsChanged(
            f"{where} is done from inputs {marker['inputs'][:3]} but this run plans {marker_extra['inputs'][:3]} "
            "for it; write to a new --output root, keep the same input selection, or pass --force"
        )


def _require_pyarrow_parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "pyarrow is needed to write shards; install the data-plane extra: "
            "pip install 'dripper-platform[dataplane]' (or: pip install pyarrow)"
        ) from exc
    return pq


def _split(stage_dir: str) -> tuple[str, str]:
    stage_dir = str(stage_dir).rstrip("/")
    root, _, stage = stage_dir.rpartition("/")
    if not stage:
        raise ValueError(f"stage_dir must be {{root}}/{{stage}}, got {stage_dir!r}")
    return root or ".", stage


def run_shard(
    stage_dir: str,
    shard_index: int,
    compute: Callable[[], tuple[pa.Table, ShardStats]],
    *,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    marker_extra: dict[str, Any] | None = None,
) -> ShardResult:
    """Run one shard of a stage, exactly once across reruns.

    Args:
        stage_dir: ``{root}/{stage}`` (local or fsspec URL).
        shard_index: The shard's number (``part-{shard_index:05d}``).
        compute: Called only when the shard is not done; returns the shard's rows and its stats.
        storage_options: fsspec options.
        force: Recompute and republish even if the marker exists.
        marker_extra: More JSON fields for the marker (e.g. the input files of the shard).

    Returns:
        A :class:`ShardResult`; ``status="skipped"`` with the marker's stats when already done.

    Raises:
        ShardAccountingError: the stats do not balance or do not match the table; nothing is published.
    """
    writer = ShardWriter.for_stage_dir(stage_dir, storage_options)
    return writer.run(shard_index, compute, force=force, marker_extra=marker_extra)


def list_done_shards(stage_dir: str, storage_options: dict[str, Any] | None = None) -> list[int]:
    """Indices of the finished shards of ``{root}/{stage}`` (those with a marker), ascending."""
    return ShardWriter.for_stage_dir(stage_dir, storage_options).done_shards()


def done_shard_paths(stage_dir: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """The parquet files of the finished shards (URLs for object stores), in shard order."""
    writer = ShardWriter.for_stage_dir(stage_dir, storage_options)
    return [writer.url(writer.shard_path(i)) for i in writer.done_shards()]


def summarize_stage(
    stage_dir: str,
    *,
    expected_shards: int | None = None,
    storage_options: dict[str, Any] | None = None,
    write: bool = True,
) -> dict[str, Any]:
    """Add up the markers of a stage: shards done, pages in/out, dropped and fallbacks by reason, seconds.

    With ``expected_shards``, also lists the missing shards and says whether the stage is complete.
    With ``write`` (default), the summary is also stored as ``{stage_dir}/_summary.json``.
    """
    return ShardWriter.for_stage_dir(stage_dir, storage_options).summarize(expected_shards, write=write)


def write_run_summary(
    root: str,
    stages: Iterable[str] | None = None,
    *,
    expected_shards: dict[str, int] | None = None,
    storage_options: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Summarise every stage of a run into ``{root}/_run_summary.json`` and return the summary.

    Args:
        root: The run root.
        stages: Stage names in pipeline order; by default every folder under ``root`` holding a marker.
        expected_shards: Per stage, how many shards the run planned (adds completeness to the summary).
        storage_options: fsspec options.
        extra: More JSON fields for the summary (run parameters, code version, …).
    """
    fs, root_path = filesystem_for(str(root), storage_options)
    root_path = root_path.rstrip("/")
    if stages is None:
        fs.invalidate_cache(root_path)
        try:
            entries = fs.ls(root_path, detail=True)
        except FileNotFoundError:
            entries = []
        stages = sorted(
            posixpath.basename(e["name"].rstrip("/"))
            for e in entries
            if e.get("type") == "directory"
            and not posixpath.basename(e["name"].rstrip("/")).startswith(("_", "."))
        )
        stages = [s for s in stages if ShardWriter(str(root), s, storage_options).done_shards()]
    summaries: dict[str, Any] = {}
    for stage in stages:
        writer = ShardWriter(str(root), stage, storage_options)
        summaries[stage] = writer.summarize((expected_shards or {}).get(stage), write=True)
    run_summary = {
        "root": str(root),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "stages": summaries,
        **(extra or {}),
    }
    path = posixpath.join(root_path, RUN_SUMMARY_NAME)
    publish_bytes(fs, path, (json.dumps(run_summary, indent=1) + "\n").encode(), is_local(str(root)))
    log.info("run summary written to %s", path)
    return run_summary
