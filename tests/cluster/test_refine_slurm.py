"""Refinement on the real one-node Slurm through datatrove's own ``SlurmPipelineExecutor``
(:class:`dripper.airflow.corpus.SlurmRefineOperator`): the passes go out as a chain of array jobs, the task waits
in the trigger, and the corpus equals the local executor's on the sample's extracted shards."""

from __future__ import annotations

import shutil
import time

import pytest
from airflow.sdk.exceptions import AirflowException

from dripper.airflow.corpus import SlurmRefineOperator
from dripper.config.refine import RefineStageConfig
from tests.airflow.test_stages import FakeContext
from tests.cluster.test_pretrain_slurm import run_deferred
from tests.refine.conftest import extracted_root  # noqa: F401 - the fixture

#: Every kind of pass (URL signatures/duplicates, the filter, MinHash signatures/buckets/clusters, finalize)
#: with few tasks: each array task is a process start on a 2-CPU node.
STEPS = ["url_dedup", "gopher_quality", "minhash"]
OPTIONS = {"minhash": {"num_buckets": 2}}


def read_corpus(root):
    import pyarrow.parquet as pq

    rows = [
        row for path in sorted((root / "corpus").glob("*.parquet")) for row in pq.read_table(path).to_pylist()
    ]
    return sorted(rows, key=lambda row: row["id"])


@pytest.fixture
def roots(extracted_root, tmp_path):  # noqa: F811 - the imported fixture
    local, slurm = tmp_path / "local", tmp_path / "slurm"
    for root in (local, slurm):
        shutil.copytree(extracted_root / "extracted", root / "extracted")
    return local, slurm


def test_refine_on_slurm_equals_local(slurm_cluster, roots, monkeypatch):
    from dripper.refine import run_refine

    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    local_root, slurm_root = roots
    local = run_refine(
        str(local_root), str(local_root), {"steps": STEPS, "tasks": 2, "workers": 1, **OPTIONS}
    )
    operator = SlurmRefineOperator(
        task_id="refine",
        root=str(slurm_root),
        config=RefineStageConfig(steps=STEPS, tasks=2, workers=1, options=OPTIONS),
        slurm={"partition": slurm_cluster.partition, "time": "10:00", "mem_per_cpu_gb": 1, "poll_seconds": 1},
    )
    started = time.perf_counter()
    result = run_deferred(operator, FakeContext())
    seconds = time.perf_counter() - started
    assert len(result["slurm_jobs"]) == 7  # one array job per pass
    assert result["documents_out"] == local["documents_out"] > 0
    assert result["documents_in"] == local["documents_in"]
    assert read_corpus(slurm_root) == read_corpus(local_root)
    # datatrove's own executor ran there: its launch script and per-task Slurm logs.
    assert (slurm_root / "refine" / "logs" / "finalize" / "launch_script.slurm").exists()
    assert list((slurm_root / "refine" / "logs" / "finalize" / "slurm_logs").glob("*.out"))
    print(f"refine on Slurm: {seconds:.1f} s, {len(result['slurm_jobs'])} jobs")

    # A rerun finds every task finished: nothing is submitted, the same summary comes back.
    again = run_deferred(
        SlurmRefineOperator(
            task_id="refine",
            root=str(slurm_root),
            config={"steps": STEPS, "tasks": 2, "workers": 1, "options": OPTIONS},
            slurm={"partition": slurm_cluster.partition, "time": "10:00", "mem_per_cpu_gb": 1},
        ),
        FakeContext(),
    )
    assert again["slurm_jobs"] == [] and again["documents_out"] == result["documents_out"]


def test_slurm_refine_needs_partition_and_time(tmp_path):
    operator = SlurmRefineOperator(task_id="refine", root=str(tmp_path), slurm={"partition": "cpu"})
    with pytest.raises(AirflowException, match=r"\['time'\] are required"):
        operator.execute(FakeContext())  # refused before anything is submitted
