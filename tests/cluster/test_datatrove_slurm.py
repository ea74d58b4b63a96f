"""The FineWeb-shaped datatrove pipeline (DripperWarcReader → DripperExtractor → filters → writer) under datatrove's
own SlurmPipelineExecutor on the one-node test Slurm: the same accounting and the same documents as under the
local executor (tests/datatrove/test_recipes.py)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from dripper.datatrove import fineweb_pipeline, pipeline_accounting
from tests.datatrove.test_recipes import SAMPLE, records_in_sample, written


def test_fineweb_pipeline_on_slurm(slurm_cluster, tmp_path, monkeypatch):
    from datatrove.executor import SlurmPipelineExecutor

    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    logs = tmp_path / "logs"
    executor = SlurmPipelineExecutor(
        pipeline=fineweb_pipeline(str(SAMPLE / "crawl-data"), str(tmp_path / "out"), "cpu"),
        tasks=2,
        time="15:00",
        partition=slurm_cluster.partition,
        cpus_per_task=1,
        mem_per_cpu_gb=1,
        job_name="dripper_fineweb",
        logging_dir=str(logs),
        slurm_logs_folder=str(tmp_path / "slurm_logs"),
        # The jobs run datatrove's launch_pickled_pipeline from this interpreter's environment.
        env_command=f'export PATH="{os.path.dirname(sys.executable)}:$PATH"',
    )
    executor.run()
    assert executor.job_id
    deadline = time.monotonic() + 600
    while not (logs / "stats.json").exists():
        assert time.monotonic() < deadline, sorted(p.name for p in Path(tmp_path / "slurm_logs").glob("*"))
        time.sleep(2)
    accounting = pipeline_accounting(str(logs / "stats.json"))
    assert accounting["balanced"], accounting
    assert accounting["records"] == records_in_sample()
    documents = written(tmp_path / "out")
    assert len(documents) == accounting["written"] > 50
    assert len(list((logs / "completions").glob("*"))) == 2
