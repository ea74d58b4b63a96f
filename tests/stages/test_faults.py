"""Faults: a Dask worker killed mid-shard, a whole run killed (both stages) and resumed, bad WARC input.
After a rerun the outputs equal the uninterrupted reference run: same doc_ids, no duplicate, none missing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dripper.config.simplify import SimplifyStageConfig
from dripper.stages import simplify as simplify_module
from dripper.stages.extract import extract_stage
from dripper.stages.runner import StageError
from dripper.stages.shards import list_done_shards
from dripper.stages.simplify import simplify_shard, simplify_stage

from .conftest import (
    LONG_BLOCKS,
    MANIFEST,
    REPO,
    SAMPLE_BASE,
    SAMPLE_SNAPSHOT,
    LongBlocks,
    comparable,
    read_stage,
    subprocess_env,
)


def wait_for(condition, timeout: float, what: str, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
    return value


def markers(root: Path, stage: str) -> list[Path]:
    return sorted((root / stage).glob("part-*.done.json"))


def test_killed_dask_worker_is_replaced_and_its_shard_redone(reference_run, tmp_path):
    distributed = pytest.importorskip("distributed")
    root = tmp_path / "run"
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        pids = client.run(os.getpid)
        outcome: dict = {}

        def run_stage():
            try:
                outcome["report"] = simplify_stage(
                    SAMPLE_SNAPSHOT, str(root), scheduler=client, progress=False
                )
            except BaseException as error:  # re-raised in the test's thread below
                outcome["error"] = error

        thread = threading.Thread(target=run_stage)
        thread.start()
        busy = wait_for(
            lambda: [address for address, keys in client.processing().items() if keys],
            timeout=60,
            what="a worker processing a shard",
        )
        time.sleep(0.3)  # well inside a shard (each takes seconds), after its worker imported everything
        done_at_kill = len(markers(root, "simplified"))
        os.kill(pids[busy[0]], signal.SIGKILL)
        thread.join(timeout=120)
        assert not thread.is_alive()
        if "error" in outcome:
            raise outcome["error"]
        assert done_at_kill < 4
        assert pids[busy[0]] not in client.run(os.getpid).values()  # the worker really died

    report = outcome["report"]
    assert (report.written, report.skipped, report.failed) == (4, 0, {})
    assert comparable(read_stage(str(root), "simplified")) == comparable(reference_run["simplified"])


def kill_run_after_first_marker(command: list[str], root: Path, stage: str) -> int:
    """Start ``dripper …`` in its own process group, SIGKILL the group once a shard is marked done."""
    process = subprocess.Popen(
        [sys.executable, "-m", "dripper.cli", *command],
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(lambda: markers(root, stage) or process.poll() is not None, 120, f"a {stage} marker")
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the CLI and its Dask nanny/worker processes
        process.wait(timeout=30)
    return len(markers(root, stage))


def test_killed_simplify_run_resumes_to_the_same_output(reference_run, tmp_path):
    root = tmp_path / "run"
    command = ["run", "simplify", "--input", SAMPLE_SNAPSHOT, "--output", str(root), "--workers", "2"]
    finished = kill_run_after_first_marker(command, root, "simplified")
    assert 1 <= finished < 4
    report = simplify_stage(SAMPLE_SNAPSHOT, str(root), SimplifyStageConfig(workers=0), progress=False)
    assert (report.skipped, report.written, report.failed) == (finished, 4 - finished, {})
    assert report.summary["complete"] is True
    assert comparable(read_stage(str(root), "simplified")) == comparable(reference_run["simplified"])
    parts = sorted(p.name for p in (root / "simplified").glob("part-*.parquet"))
    assert parts == [f"part-{i:05d}.parquet" for i in range(4)]


def test_killed_extract_run_resumes_to_the_same_output(reference_run, tmp_path):
    root = tmp_path / "run"
    shutil.copytree(f"{reference_run['root']}/simplified", root / "simplified")
    command = [
        "run",
        "extract",
        "--input",
        str(root),
        "--output",
        str(root),
        "--labeler",
        LONG_BLOCKS,
        "--batch-size",
        "8",
    ]
    finished = kill_run_after_first_marker(command, root, "extracted")
    assert 1 <= finished < 4
    report = extract_stage(str(root), labeler=LongBlocks(), progress=False)
    assert (report.skipped, report.written, report.failed) == (finished, 4 - finished, {})
    assert comparable(read_stage(str(root), "extracted")) == comparable(reference_run["extracted"])


def test_a_shard_that_crashes_publishes_nothing(tmp_path, monkeypatch):
    warc = str(SAMPLE_BASE / next(iter(MANIFEST["files"])))
    real_page_row = simplify_module.page_row
    calls = []

    def crash_on_tenth(*args):
        calls.append(1)
        if len(calls) == 10:
            raise MemoryError("worker ran out of memory")
        return real_page_row(*args)

    monkeypatch.setattr(simplify_module, "page_row", crash_on_tenth)
    with pytest.raises(MemoryError):
        simplify_shard(str(tmp_path), 0, [warc])
    monkeypatch.undo()
    assert list((tmp_path / "simplified").rglob("*.parquet")) == []  # no part, no half file in _tmp
    assert list_done_shards(f"{tmp_path}/simplified") == []
    assert simplify_shard(str(tmp_path), 0, [warc]).stats.rows_out == 47


def test_bad_warc_input_is_counted_with_reasons(tmp_path, monkeypatch):
    sample = SAMPLE_BASE / next(iter(MANIFEST["files"]))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a-junk.warc.gz").write_bytes(os.urandom(50_000))
    (bad / "b-cut.warc.gz").write_bytes(sample.read_bytes()[:300_000])
    (bad / "c-empty.warc.gz").write_bytes(b"")
    (bad / "d-text.warc").write_text("this is not a WARC file\n" * 100)
    root = tmp_path / "run"
    report = simplify_stage(str(bad), str(root), SimplifyStageConfig(workers=0), progress=False)
    assert (report.written, report.failed) == (4, {})
    by_file = {}
    from dripper.stages.shards import ShardWriter

    writer = ShardWriter(str(root), "simplified")
    for index in range(4):
        marker = writer.read_marker(index)
        by_file[Path(marker["inputs"][0]).name] = marker["stats"]
    assert by_file["a-junk.warc.gz"]["dropped"] == {"bad_gzip_member": 1}
    assert by_file["a-junk.warc.gz"]["rows_in"] == 1
    cut = by_file["b-cut.warc.gz"]
    assert cut["rows_out"] > 10 and cut["dropped"]["truncated"] == 1  # pages before the cut are kept
    assert by_file["c-empty.warc.gz"]["rows_in"] == 0
    assert by_file["c-empty.warc.gz"]["counters"]["empty_files"] == 1
    assert by_file["d-text.warc"]["dropped"] == {"bad_gzip_member": 1}
    summary = report.summary
    assert summary["pages_in"] == summary["pages_out"] + summary["dropped_total"]

    # A WARC that disappears between planning and reading fails its shard only; the others are published.
    gone = str(tmp_path / "gone.warc.gz")
    planned = [str(sample), gone]
    monkeypatch.setattr(simplify_module, "resolve_warc_inputs", lambda *a, **k: planned)
    with pytest.raises(
        StageError, match="1 of 2 shards failed: part-00001.parquet: FileNotFoundError"
    ) as error:
        simplify_stage("ignored", str(tmp_path / "run2"), SimplifyStageConfig(workers=0), progress=False)
    assert list_done_shards(f"{tmp_path}/run2/simplified") == [0]
    assert error.value.report.summary["shards_missing"] == [1]
