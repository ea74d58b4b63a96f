"""The simplify and extract stages on an external Dask cluster (``dask scheduler`` and two ``dask worker``
processes started by the harness, as the command line starts them): outputs identical to the in-process
run, a worker killed mid-stage leaves a complete, identical output, and the extract tasks of a spec that needs
a GPU run only on the worker that advertises one."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from dripper.config.extract import ExtractStageConfig
from dripper.stages.extract import extract_stage
from dripper.stages.extractor import run_extractor
from dripper.stages.simplify import simplify_stage
from tests.stages.conftest import (  # noqa: F401 - reference_run is a fixture
    LONG_BLOCKS,
    SAMPLE_SNAPSHOT,
    comparable,
    read_stage,
    reference_run,
)

LONG_BLOCKS_CONFIG = ExtractStageConfig(extractor={"name": "long", "labeler": LONG_BLOCKS})


def test_stages_on_an_external_cluster_equal_the_in_process_run(dask_cluster, reference_run, tmp_path):  # noqa: F811
    from distributed import Client, get_task_stream

    root = str(tmp_path / "run")
    started = time.perf_counter()
    with Client(dask_cluster.address) as client, get_task_stream(client) as stream:
        simplify = simplify_stage(SAMPLE_SNAPSHOT, root, scheduler=dask_cluster.address, progress=False)
        extract = extract_stage(
            root, config=LONG_BLOCKS_CONFIG, scheduler=dask_cluster.address, progress=False
        )
        names = {address: info["name"] for address, info in client.scheduler_info()["workers"].items()}
    seconds = time.perf_counter() - started
    assert (simplify.written, simplify.failed) == (4, {})
    assert (extract.written, extract.failed) == (4, {})
    assert comparable(read_stage(root, "simplified")) == comparable(reference_run["simplified"])
    assert comparable(read_stage(root, "extracted")) == comparable(reference_run["extracted"])
    # The shards ran on the external workers, both of them.
    ran_on = {names.get(item["worker"]) for item in stream.data}
    assert ran_on == {"w0", "w1"}, ran_on
    print(f"simplify + extract on the external Dask cluster: {seconds:.1f} s")


def test_the_cpu_seq_labeler_extracts_on_the_external_workers(dask_cluster, reference_run, tmp_path):  # noqa: F811
    """The form's ``cpu_seq`` choice through the extract stage on the external workers: its shipped network
    loads in the worker processes and every page ends as a row, each naming what produced it."""
    from distributed import Client, get_task_stream

    root = tmp_path / "run"
    shutil.copytree(f"{reference_run['root']}/simplified", root / "simplified")
    config = ExtractStageConfig(extractor={"name": "seq", "labeler": "cpu_seq"})
    with Client(dask_cluster.address) as client, get_task_stream(client) as stream:
        extract = extract_stage(str(root), config=config, scheduler=dask_cluster.address, progress=False)
        workers = set(client.scheduler_info()["workers"])
    assert (extract.written, extract.failed) == (4, {})
    rows = read_stage(str(root), "extracted")
    assert sorted(row["doc_id"] for row in rows) == sorted(
        row["doc_id"] for row in reference_run["extracted"]
    )
    assert {row["extractor"] for row in rows} <= {"dripper:cpu_seq", "trafilatura", "none"}
    assert all(row["fallback_reason"] for row in rows if row["extractor"] == "none")  # an empty row says why
    assert any(row["extractor"] == "dripper:cpu_seq" for row in rows)
    assert {item["worker"] for item in stream.data} <= workers and stream.data


def test_run_extract_takes_the_clusters_address_as_the_forms_do(dask_cluster, reference_run, tmp_path):  # noqa: F811
    """``dripper run extract --dask-scheduler`` (the forms' ``dask_scheduler``) sends the shards to the
    external cluster: the same rows as the in-process run, labelled outside this process."""
    import json
    import os

    from dripper.cli import main as cli_main

    root = tmp_path / "run"
    shutil.copytree(f"{reference_run['root']}/simplified", root / "simplified")
    out = tmp_path / "out"
    command = ["run", "extract", "--input", str(root), "--output", str(out), "--quiet",
               "--extractor", f"long={LONG_BLOCKS}", "--dask-scheduler", dask_cluster.address]  # fmt: skip
    assert cli_main(command) == 0
    assert comparable(read_stage(str(out), "extracted")) == comparable(reference_run["extracted"])
    marker = json.loads((out / "extracted" / "part-00000.done.json").read_text())
    assert marker["worker_pid"] != os.getpid()


def test_worker_killed_mid_stage_leaves_a_complete_identical_output(dask_cluster, reference_run, tmp_path):  # noqa: F811
    from distributed import Client

    root = str(tmp_path / "run")
    outcome: dict = {}

    def run_stage():
        try:
            outcome["report"] = simplify_stage(
                SAMPLE_SNAPSHOT, root, scheduler=dask_cluster.address, progress=False
            )
        except BaseException as error:  # re-raised below
            outcome["error"] = error

    try:
        with Client(dask_cluster.address) as client:
            thread = threading.Thread(target=run_stage)
            thread.start()
            deadline = time.monotonic() + 120
            busy = []
            while not busy and time.monotonic() < deadline:
                busy = [address for address, keys in client.processing().items() if keys]
                time.sleep(0.05)
            assert busy, "no worker picked up a shard"
            time.sleep(0.5)  # inside the shard (each takes seconds)
            victim = client.scheduler_info()["workers"][busy[0]]["name"]
            done_at_kill = len(list((tmp_path / "run" / "simplified").glob("part-*.done.json")))
            dask_cluster.kill_worker(victim)
            thread.join(timeout=300)
            assert not thread.is_alive()
        if "error" in outcome:
            # Dask gave up on the shard: a rerun on the surviving worker finishes it.
            report = simplify_stage(SAMPLE_SNAPSHOT, root, scheduler=dask_cluster.address, progress=False)
        else:
            report = outcome["report"]
        assert done_at_kill < 4  # killed mid-stage
        assert report.failed == {} and report.summary["complete"] is True
        assert comparable(read_stage(root, "simplified")) == comparable(reference_run["simplified"])
        print(
            f"killed worker {victim} with {done_at_kill} of 4 shards done; "
            f"written {report.written}, skipped {report.skipped}"
        )
    finally:
        dask_cluster.restore()


@pytest.fixture(autouse=True)
def _all_workers(dask_cluster):
    dask_cluster.restore()


def test_gpu_extract_tasks_run_only_on_the_gpu_worker(dask_cluster, reference_run, tmp_path):  # noqa: F811
    """A spec that needs a GPU (``gpu=true`` here; ``vllm``, ``torch`` on CUDA by default) asks for the
    ``GPU`` resource: every extract task lands on ``w1``, the worker started with ``--resources GPU=1``,
    while a CPU spec's tasks spread over both (the test above)."""
    from distributed import Client, get_task_stream

    root = tmp_path / "run"
    shutil.copytree(f"{reference_run['root']}/simplified", root / "simplified")
    spec = {"name": "gpu-only", "labeler": LONG_BLOCKS, "gpu": True}
    with Client(dask_cluster.address) as client, get_task_stream(client) as stream:
        config = ExtractStageConfig(extractor=spec)
        report = run_extractor(str(root), config, scheduler=dask_cluster.address, progress=False)
        names = {address: info["name"] for address, info in client.scheduler_info()["workers"].items()}
    assert (report.written, report.failed) == (4, {})
    ran_on = [names.get(item["worker"]) for item in stream.data if "extracted" in item["key"]]
    assert len(ran_on) == 4 and set(ran_on) == {"w1"}, ran_on
    expected = comparable(reference_run["extracted"])
    assert comparable(read_stage(str(root / "extractors" / "gpu-only"), "extracted")) == expected


def test_a_resource_no_worker_has_runs_anywhere_and_says_so(dask_cluster, reference_run, tmp_path, caplog):  # noqa: F811
    root = tmp_path / "run"
    shutil.copytree(f"{reference_run['root']}/simplified", root / "simplified")
    with caplog.at_level("WARNING", logger="dripper.stages.runner"):
        report = extract_stage(
            str(root), config=LONG_BLOCKS_CONFIG, scheduler=dask_cluster.address, progress=False,
            task_resources={"TPU": 1},
        )  # fmt: skip
    assert (report.written, report.failed) == (4, {})  # not waiting forever for a TPU worker
    assert "no worker of the cluster advertises the TPU resource" in caplog.text
