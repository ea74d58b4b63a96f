"""The Slurm job machinery on the real one-node cluster: a failing job fails the task with its state, exit
code and log tail; a job whose dependency failed counts as failed (it would pend forever); the trigger's
``on_kill`` (task marked failed or cleared while deferred) cancels the job; a retried task whose job is
still running waits for that job instead of submitting a second one into the same run folder."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from dripper.airflow.jobs import ModuleJobOperator
from dripper.airflow.slurm import SlurmJobTrigger, job_outcome, slurm_environment, submit_module_job
from dripper.pretrain import slurm as slurm_jobs


class FakeOperator:
    log = logging.getLogger("tests.cluster.fake_operator")


def first_event(trigger: SlurmJobTrigger, timeout: float = 120) -> dict:
    async def wait():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(asyncio.wait_for(wait(), timeout))


@pytest.fixture
def slurm_env(slurm_cluster, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    return slurm_cluster.env


def test_a_failing_job_and_its_dependent_fail_the_task_with_the_log(slurm_cluster, slurm_env, tmp_path):
    log = tmp_path / "slurm-%j.out"
    failing = slurm_jobs.submit(
        "#!/bin/bash\necho 'step 3: loss is nan' >&2\nexit 3\n",
        tmp_path / "fail.sbatch",
        slurm_env,
        f"--output={log}",
    )
    dependent = slurm_jobs.submit(
        "#!/bin/bash\necho never\n", tmp_path / "next.sbatch", slurm_env, f"--dependency=afterok:{failing}"
    )
    job_log = str(log).replace("%j", failing)
    event = first_event(SlurmJobTrigger([failing, dependent], slurm_environment(), 0.5, [job_log]))
    assert event["status"] == "failed"
    states = {job["job_id"]: job for job in event["jobs"]}
    assert states[failing]["state"] == "FAILED" and states[failing]["exit_code"] == "3:0"
    assert states[dependent]["state"] == "PENDING"
    # Left alone, the dependent job would pend forever: it counts as failed (not active) once Slurm says so.
    deadline = time.monotonic() + 60
    while (state := slurm_jobs.job_state(dependent, slurm_env)).active and time.monotonic() < deadline:
        time.sleep(0.5)
    assert (state.state, state.reason) == ("PENDING", "DependencyNeverSatisfied"), state
    assert SlurmJobTrigger([dependent], slurm_environment()).poll()[0] == "failed"
    with pytest.raises(AirflowException) as failure:
        job_outcome(FakeOperator(), event, "refine: refinement")
    message = str(failure.value)
    assert f"Slurm job {failing} FAILED" in message and "exit code 3:0" in message
    assert "step 3: loss is nan" in message  # the log's tail
    slurm_jobs.cancel(dependent, slurm_env)


def test_trigger_on_kill_cancels_the_job(slurm_cluster, slurm_env, tmp_path):
    job = slurm_jobs.submit("#!/bin/bash\nsleep 300\n", tmp_path / "sleep.sbatch", slurm_env)
    deadline = time.monotonic() + 60
    while slurm_jobs.job_state(job, slurm_env).state != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.3)
    asyncio.run(SlurmJobTrigger([job], slurm_environment(), 1).on_kill())
    deadline = time.monotonic() + 60
    while slurm_jobs.job_state(job, slurm_env).active and time.monotonic() < deadline:
        time.sleep(0.3)
    assert slurm_jobs.job_state(job, slurm_env).state == "CANCELLED"
    assert job not in slurm_cluster.job_ids()


def test_unknown_job_is_reported_not_raised(slurm_cluster, slurm_env):
    assert slurm_jobs.job_state("999999", slurm_env).state == "UNKNOWN"


def test_a_retry_adopts_the_job_still_running_for_its_run(slurm_cluster, slurm_env, tmp_path):
    def attempt():
        operator = ModuleJobOperator(
            task_id="job", module="timeit", argv=["-n", "1", "import time; time.sleep(300)"]
        )
        operator.slurm = {"partition": slurm_cluster.partition, "time": "10:00", "poll_seconds": 1}
        with pytest.raises(TaskDeferred) as deferred:
            submit_module_job(
                operator, log_dir=str(tmp_path / "slurm"), job_name="sleepy-run", launcher="python"
            )
        return deferred.value.kwargs["job_id"]

    first = attempt()
    try:
        # The worker died after sbatch, before the task deferred: the retry finds the job and waits for it.
        assert attempt() == first
        assert slurm_cluster.job_ids() == [first]
        # Another run folder is another run: a job of its own.
        other = ModuleJobOperator(task_id="job", module="timeit", argv=["-n", "1", "pass"])
        other.slurm = {"partition": slurm_cluster.partition, "time": "10:00"}
        with pytest.raises(TaskDeferred) as deferred:
            submit_module_job(
                other, log_dir=str(tmp_path / "other"), job_name="sleepy-run", launcher="python"
            )
        assert deferred.value.kwargs["job_id"] != first
    finally:
        slurm_cluster.cancel_all()
