import json
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dripper.stages import shards
from dripper.stages.shards import (
    ShardAccountingError,
    ShardStats,
    ShardWriter,
    done_shard_paths,
    list_done_shards,
    run_shard,
    summarize_stage,
    write_run_summary,
)


@pytest.fixture(params=["local", "memory"])
def root(request, tmp_path):
    """A run root on the local filesystem (rename publishing) and on fsspec's in-memory filesystem, which
    takes the object-store path (direct write of the final object, then the marker) like S3 does."""
    if request.param == "local":
        return str(tmp_path / "run")
    return f"memory://run-{uuid.uuid4().hex}"


def make_compute(
    rows: int, dropped: dict[str, int] | None = None, fallbacks: dict[str, int] | None = None, calls=None
):
    def compute():
        if calls is not None:
            calls.append(1)
        stats = ShardStats(rows_in=rows + sum((dropped or {}).values()), rows_out=rows)
        for reason, n in (dropped or {}).items():
            stats.drop(reason, n)
        for reason, n in (fallbacks or {}).items():
            stats.fallback(reason, n)
        stats.count("blocks", 10 * rows)
        return pa.table({"doc_id": [f"d{i}" for i in range(rows)], "n": list(range(rows))}), stats

    return compute


def read_rows(writer: ShardWriter, index: int) -> int:
    with writer.fs.open(writer.shard_path(index), "rb") as f:
        return pq.read_table(f).num_rows


def part_files(writer: ShardWriter) -> list[str]:
    writer.fs.invalidate_cache(writer.stage_path)
    return sorted(p for p in writer.fs.ls(writer.stage_path, detail=False) if p.endswith(".parquet"))


def test_publish_then_skip(root):
    calls = []
    result = run_shard(f"{root}/pages", 0, make_compute(5, {"non_html": 2}, calls=calls))
    assert result.status == "written"
    assert result.path.endswith("pages/part-00000.parquet")
    assert result.stats.rows_out == 5 and result.stats.seconds >= 0

    writer = ShardWriter(root, "pages")
    assert writer.is_done(0)
    marker = writer.read_marker(0)
    assert marker["stats"]["dropped"] == {"non_html": 2}
    assert marker["rows"] == 5 and marker["path"] == "part-00000.parquet"
    assert read_rows(writer, 0) == 5

    again = run_shard(f"{root}/pages", 0, make_compute(99, calls=calls))
    assert again.status == "skipped"
    assert again.stats.rows_out == 5
    assert len(calls) == 1
    assert read_rows(writer, 0) == 5


def test_names_and_listing(root):
    for index in (2, 0, 11):
        run_shard(f"{root}/pages", index, make_compute(index + 1))
    assert list_done_shards(f"{root}/pages") == [0, 2, 11]
    paths = done_shard_paths(f"{root}/pages")
    assert [p.rsplit("/", 1)[-1] for p in paths] == [
        "part-00000.parquet",
        "part-00002.parquet",
        "part-00011.parquet",
    ]
    assert list_done_shards(f"{root}/nothing-here") == []
    assert shards.shard_name(123456) == "part-123456.parquet"
    with pytest.raises(ValueError):
        shards.shard_name(-1)


def test_unbalanced_accounting_publishes_nothing(root):
    def compute():
        stats = ShardStats(rows_in=10, rows_out=7)
        stats.drop("too_large", 2)  # one row unaccounted for
        return pa.table({"x": list(range(7))}), stats

    with pytest.raises(ShardAccountingError, match=r"rows_in=10 .* rows_out=7 \+ dropped=2"):
        run_shard(f"{root}/pages", 0, compute)
    writer = ShardWriter(root, "pages")
    assert not writer.is_done(0)
    assert not writer.fs.exists(writer.shard_path(0))


def test_table_must_match_rows_out(root):
    def compute():
        return pa.table({"x": [1, 2, 3]}), ShardStats(rows_in=2, rows_out=2)

    with pytest.raises(ShardAccountingError, match="3 rows written but stats.rows_out=2"):
        run_shard(f"{root}/pages", 0, compute)
    assert list_done_shards(f"{root}/pages") == []


def test_stats_check_and_roundtrip():
    stats = ShardStats(rows_in=4, rows_out=3)
    with pytest.raises(ShardAccountingError):
        stats.check()
    stats.drop("empty")
    stats.check()
    stats.fallback("no_blocks")
    stats.count("tokens", 120)
    again = ShardStats.from_dict(json.loads(json.dumps(stats.to_dict())))
    assert again.to_dict() == stats.to_dict()
    total = ShardStats().merge(stats).merge(again)
    assert (total.rows_in, total.dropped_total, total.fallbacks["no_blocks"]) == (8, 2, 2)
    with pytest.raises(ShardAccountingError, match="negative"):
        ShardStats(rows_in=0, rows_out=-1, dropped={"x": 1}).check()


def test_crash_between_data_and_marker_is_redone_without_duplicates(root, monkeypatch):
    def crash(self, shard_index, stats, extra=None):
        raise RuntimeError("worker killed after the data was written")

    monkeypatch.setattr(ShardWriter, "write_marker", crash)
    with pytest.raises(RuntimeError, match="worker killed"):
        run_shard(f"{root}/pages", 0, make_compute(4))
    writer = ShardWriter(root, "pages")
    assert writer.fs.exists(writer.shard_path(0))  # data is there …
    assert list_done_shards(f"{root}/pages") == []  # … but the shard does not count
    assert done_shard_paths(f"{root}/pages") == []
    monkeypatch.undo()

    calls = []
    result = run_shard(f"{root}/pages", 0, make_compute(4, calls=calls))
    assert result.status == "written" and calls == [1]
    assert list_done_shards(f"{root}/pages") == [0]
    assert read_rows(writer, 0) == 4
    assert [p.rsplit("/", 1)[-1] for p in part_files(writer)] == ["part-00000.parquet"]
    assert summarize_stage(f"{root}/pages")["pages_out"] == 4


def test_crash_while_writing_data_leaves_no_part(tmp_path, monkeypatch):
    root = str(tmp_path / "run")

    write_table = pq.ParquetWriter.write_table

    def half_write(self, table, *args, **kwargs):
        write_table(self, table.slice(0, 1))  # one row of three reaches the file, then the disk is full
        raise OSError("disk full")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", half_write)
    with pytest.raises(OSError, match="disk full"):
        run_shard(f"{root}/pages", 0, make_compute(3))
    monkeypatch.undo()
    writer = ShardWriter(root, "pages")
    assert part_files(writer) == []  # the half file stays under _tmp/, never under a part name
    assert run_shard(f"{root}/pages", 0, make_compute(3)).status == "written"
    assert read_rows(writer, 0) == 3


def test_force_recomputes(root):
    run_shard(f"{root}/pages", 0, make_compute(2))
    result = run_shard(f"{root}/pages", 0, make_compute(6), force=True)
    assert result.status == "written"
    assert read_rows(ShardWriter(root, "pages"), 0) == 6
    assert ShardWriter(root, "pages").read_marker(0)["rows"] == 6


def test_stage_and_run_summaries(root):
    run_shard(f"{root}/pages", 0, make_compute(5, {"non_html": 2}))
    run_shard(f"{root}/pages", 1, make_compute(3, {"non_html": 1, "too_large": 1}))
    run_shard(f"{root}/extracted", 0, make_compute(7, {"empty": 1}, {"labeler_error": 2}))
    run_shard(f"{root}/extracted", 1, make_compute(1))

    stage = summarize_stage(f"{root}/pages", expected_shards=3)
    assert stage["shards_done"] == 2
    assert (stage["pages_in"], stage["pages_out"]) == (12, 8)
    assert stage["dropped"] == {"non_html": 3, "too_large": 1}
    assert stage["dropped_total"] == 4
    assert stage["counters"] == {"blocks": 80}
    assert stage["shards_missing"] == [2] and stage["complete"] is False

    summary = write_run_summary(root, extra={"seed": 1})
    assert list(summary["stages"]) == ["extracted", "pages"]
    assert summary["stages"]["extracted"]["fallbacks"] == {"labeler_error": 2}
    assert summary["stages"]["extracted"]["pages_in"] == 9
    assert summary["seed"] == 1
    writer = ShardWriter(root, "pages")
    with writer.fs.open(f"{writer.root_path}/{shards.RUN_SUMMARY_NAME}", "rb") as f:
        assert json.loads(f.read())["stages"]["pages"]["pages_out"] == 8
    with writer.fs.open(f"{writer.stage_path}/{shards.STAGE_SUMMARY_NAME}", "rb") as f:
        assert json.loads(f.read())["pages_out"] == 8

    ordered = write_run_summary(root, ["pages", "extracted"], expected_shards={"pages": 2})
    assert list(ordered["stages"]) == ["pages", "extracted"]
    assert ordered["stages"]["pages"]["complete"] is True


def test_stage_names_are_checked(tmp_path):
    for bad in ("", "_tmp", "a/b", ".hidden"):
        with pytest.raises(ValueError, match="stage"):
            ShardWriter(str(tmp_path), bad)
