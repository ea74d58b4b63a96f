"""The harness itself: each engine starts on 127.0.0.1 and does the smallest real piece of work."""

from __future__ import annotations

import subprocess
import time

from tests.cluster.conftest import POSTGRES_BIN


def test_slurm_runs_srun_and_sbatch(slurm_cluster, tmp_path):
    assert slurm_cluster.command("srun", "-n", "2", "hostname").split() == [slurm_cluster.node] * 2
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nsrun -n 2 bash -c 'echo rank $SLURM_PROCID of $SLURM_NTASKS'\n")
    job = slurm_cluster.command(
        "sbatch", "--parsable", "-n", "2", "-o", str(tmp_path / "out-%j.txt"), str(script)
    ).strip()
    deadline = time.monotonic() + 60
    while job in slurm_cluster.job_ids() and time.monotonic() < deadline:
        time.sleep(0.5)
    state = slurm_cluster.command("scontrol", "show", "job", job)
    assert "JobState=COMPLETED" in state, state
    lines = sorted((tmp_path / f"out-{job}.txt").read_text().split("\n"))
    assert [line for line in lines if line] == ["rank 0 of 2", "rank 1 of 2"]


def test_postgres_answers_and_restarts(postgres_server):
    def query() -> str:
        return subprocess.run(
            [str(POSTGRES_BIN / "psql"), "-h", "127.0.0.1", "-p", str(postgres_server.port)]
            + ["-U", postgres_server.user, "-d", "postgres", "-tAc", "select 40 + 2"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    assert query() == "42"
    first = postgres_server.pid
    postgres_server.restart()
    assert postgres_server.pid != first
    assert query() == "42"


def test_dask_cluster_runs_tasks_on_both_workers(dask_cluster):
    from distributed import Client

    with Client(dask_cluster.address) as client:
        workers = client.run(lambda dask_worker: dask_worker.name)
        assert sorted(workers.values()) == ["w0", "w1"]
        assert client.submit(sum, [1, 2, 3]).result() == 6
