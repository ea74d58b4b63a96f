"""A Slurm job through Airflow's own deferral machinery: ``dag.test()`` runs the task, Airflow serializes the
:class:`~dripper.airflow.slurm.SlurmJobTrigger`, runs it in its triggerer loop, and resumes the task with the
event and the kwargs; the result lands in XCom. A failing job fails the task."""

from __future__ import annotations

from typing import Any

import pytest

import tests.dags  # noqa: F401 - the session's own Airflow home (SQLite), set before Airflow loads its config
from dripper.airflow.jobs import ModuleJobOperator
from dripper.airflow.slurm import job_outcome, resume_kwargs, submit_module_job


class SlurmModuleOperator(ModuleJobOperator):
    """``python -m MODULE ARGS…`` as a one-process Slurm job (the machinery Pretrain/Evaluate use)."""

    def __init__(self, *, slurm: dict[str, Any], log_dir: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slurm = slurm
        self.log_dir = log_dir

    def execute(self, context: Any) -> None:
        submit_module_job(self, log_dir=self.log_dir, job_name=f"test-{self.task_id}", launcher="python")

    def execute_slurm_complete(self, context: Any, event: dict[str, Any], **job: Any) -> dict[str, Any]:
        job = resume_kwargs(event, job)
        return {**job_outcome(self, event, f"{self.task_id}: test job"), "job_id": job["job_id"]}


@pytest.fixture(scope="module")
def airflow_db():
    from airflow.utils.db import initdb

    initdb()


def build_dag(dag_id: str, module: str, arguments: list[str], partition: str, log_dir: str):
    from airflow.sdk import DAG

    with DAG(dag_id, schedule=None, catchup=False) as dag:
        SlurmModuleOperator(
            task_id="job",
            module=module,
            argv=arguments,
            log_dir=log_dir,
            slurm={"partition": partition, "time": "10:00", "poll_seconds": 1},
        )
    return dag


def registered_dag(folder, dag_id: str, *args: Any):
    """``build_dag(dag_id, *args)`` from a DAG file, written to the metadata DB as the DAG processor
    would (``dag.test()`` runs only serialized DAGs)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dag_id}.py"
    path.write_text(
        "# An Airflow DAG (the DagBag's safe mode looks for both words).\n"
        "from tests.cluster.test_slurm_deferral import build_dag\n"
        f"dag = build_dag({dag_id!r}, {', '.join(map(repr, args))})\n"
    )
    bag = DagBag(dag_folder=str(path))
    assert bag.import_errors == {}, bag.import_errors
    sync_bag_to_db(bag, "dags-folder", None)
    return bag.dags[dag_id]


def test_deferred_slurm_job_in_dag_test(airflow_db, slurm_cluster, tmp_path, monkeypatch):
    from tests.dags import dag_run_xcoms

    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    # `python -m json.tool --help` prints its usage and exits 0: a job that succeeds.
    ok = tmp_path / "ok"
    dag = registered_dag(
        tmp_path / "dags", "slurm_deferral_ok", "json.tool", ["--help"], slurm_cluster.partition, str(ok)
    )
    run = dag.test()
    assert run.state == "success"
    result = dag_run_xcoms(run)[("job", -1)]
    assert result["jobs"] == [result["job_id"]]
    (log,) = ok.glob("slurm-*.out")
    assert "usage:" in log.read_text()

    bad = str(tmp_path / "bad")
    failing = registered_dag(
        tmp_path / "dags", "slurm_deferral_failed", "no_such_module_here", [], slurm_cluster.partition, bad
    )
    run = failing.test()
    assert run.state == "failed"
    assert [ti.state for ti in run.get_task_instances()] == ["failed"]
    assert slurm_cluster.job_ids() == []
