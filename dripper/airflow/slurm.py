"""Slurm jobs from Airflow tasks: submit with ``sbatch``, wait in the triggerer (no worker slot held), fail
with the job's log tail, cancel with ``scancel`` when the task is killed or cleared.

- :class:`SlurmJobTrigger` polls ``scontrol show job`` (``sacct`` once Slurm forgot the job) for a list of
  jobs every ``poll_seconds`` and fires once all have finished, or one has failed or can never start (a
  failed dependency). Its ``on_kill`` (the task marked failed or cleared while deferred) cancels the jobs.
- :func:`submit_and_defer` submits a script and defers the task to that trigger; :func:`job_outcome` turns
  the trigger's event back into the job's result, or into the task's failure naming the job, its state,
  reason and exit code, and the end of its log.
- :func:`submit_refine` is the refine task's ``run_on="slurm"`` (:class:`dripper.airflow.corpus.SlurmRefineOperator`): datatrove's own ``SlurmPipelineExecutor``
  submits the passes as a chain of jobs (:func:`dripper.refine.run_refine` with ``executor="slurm"``),
  the trigger waits for them, and :func:`dripper.refine.pipeline.complete_refine` checks every task
  and writes the summary; a failed job cancels the rest of the chain.
- :func:`submit_pretrain` is :class:`dripper.airflow.jobs.PretrainOperator`'s ``run_on="slurm"``: the training
  command it would run locally, as an ``sbatch`` script from :mod:`dripper.pretrain.slurm` (``srun`` + ``torchrun``
  on every node). A retried or cleared task submits again and training resumes from the run's latest
  checkpoint.

The Slurm client commands must be on the PATH of the Airflow worker and triggerer; ``SLURM_CONF`` in the
submitting process's environment is passed on to the trigger.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from dripper.airflow.storage import aws_environment
from dripper.pretrain import slurm as slurm_jobs

__all__ = [
    "SlurmJobTrigger",
    "job_outcome",
    "resume_kwargs",
    "slurm_environment",
    "submit_and_defer",
    "submit_module_job",
    "submit_pretrain",
    "submit_refine",
]

#: Environment variables of the submitting process that say which Slurm cluster to talk to.
_SLURM_VARIABLES = ("SLURM_CONF", "PATH")


def slurm_environment() -> dict[str, str]:
    """The variables of this process that select the Slurm cluster (passed to the trigger)."""
    return {name: os.environ[name] for name in _SLURM_VARIABLES if name in os.environ}


class SlurmJobTrigger(BaseTrigger):
    """Wait for Slurm jobs to finish.

    Fires one event: ``{"status": "success" | "failed", "jobs": [state dicts…], "logs": [paths…], "carry":
    {…}}``; ``failed`` as soon as one job failed or will never start.

    Args:
        job_ids: The jobs (array jobs count as done when all their tasks are).
        env: Environment of the Slurm commands (``SLURM_CONF``, ``PATH``); ``None``: the triggerer's.
        poll_seconds: Seconds between two looks.
        logs: The jobs' log files, carried into the event.
        carry: What the resumed task needs (the defer kwargs), carried into the event too: Airflow's
            triggerer merges the defer kwargs with the event, ``dag.test()`` passes only the event.
    """

    def __init__(
        self,
        job_ids: Sequence[str],
        env: dict[str, str] | None = None,
        poll_seconds: float = 30.0,
        logs: Sequence[str] = (),
        carry: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.job_ids = [str(j) for j in job_ids]
        self.env = dict(env) if env else None
        self.poll_seconds = float(poll_seconds)
        self.logs = [str(p) for p in logs]
        self.carry = dict(carry or {})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "dripper.airflow.slurm.SlurmJobTrigger",
            {
                "job_ids": self.job_ids,
                "env": self.env,
                "poll_seconds": self.poll_seconds,
                "logs": self.logs,
                "carry": self.carry,
            },
        )

    def _env(self) -> dict[str, str] | None:
        return {**os.environ, **self.env} if self.env else None

    def poll(self) -> tuple[str | None, list[slurm_jobs.SlurmJobState]]:
        """One look at every job: ``("success" | "failed" | None, states)`` (None: still running)."""
        states = [slurm_jobs.job_state(job, self._env()) for job in self.job_ids]
        if any(not s.active and not s.succeeded for s in states):
            return "failed", states
        if all(s.succeeded for s in states):
            return "success", states
        return None, states

    async def run(self) -> AsyncIterator[TriggerEvent]:
        last = None
        while True:
            try:
                status, states = await asyncio.to_thread(self.poll)
            except slurm_jobs.SlurmError as error:  # the controller restarting: look again later
                self.log.warning("slurm: %s; retrying in %.0f s", error, self.poll_seconds)
                status, states = None, []
            summary = ", ".join(f"{s.job_id} {s.state}" for s in states)
            if summary and summary != last:
                self.log.info("slurm: %s", summary)
                last = summary
            if status is not None:
                jobs = [vars(s) for s in states]
                yield TriggerEvent({"status": status, "jobs": jobs, "logs": self.logs, "carry": self.carry})
                return
            await asyncio.sleep(self.poll_seconds)

    async def on_kill(self) -> None:
        """The task was marked failed, cleared or killed while waiting: cancel the jobs."""
        for job in self.job_ids:
            with contextlib.suppress(slurm_jobs.SlurmError):
                await asyncio.to_thread(slurm_jobs.cancel, job, self._env())


def submit_and_defer(
    operator: Any,
    script: str,
    script_path: str,
    log_path: str,
    *,
    method_name: str,
    poll_seconds: float = 30.0,
    kwargs: dict[str, Any] | None = None,
    adopt_name: str | None = None,
) -> None:
    """Submit ``script`` (written to ``script_path``) and defer ``operator`` until the job ends.

    ``operator.{method_name}(context, event, **kwargs)`` is called when it does; ``kwargs`` gets
    ``job_id`` and ``log``. ``operator._slurm_job_id`` is set so that ``on_kill`` can cancel the job.
    With ``adopt_name``, a job of that name still pending or running with its log beside ``log_path``
    (an earlier attempt of the task that died before it could defer) is waited for instead of submitting a
    second one into the same run folder.
    """
    env = {**os.environ, **slurm_environment()}
    running = slurm_jobs.active_jobs(adopt_name, os.path.dirname(log_path), env) if adopt_name else []
    if running:
        job_id = running[0]
        operator.log.info(
            "Slurm job %s (%s) of an earlier attempt is still active: waiting for it", job_id, adopt_name
        )
    else:
        job_id = slurm_jobs.submit(script, script_path, env)
        operator.log.info("submitted Slurm job %s (script %s)", job_id, script_path)
    operator._slurm_job_id = job_id
    log = log_path.replace("%j", job_id)
    operator.log.info("Slurm job %s logs to %s", job_id, log)
    carry = {**(kwargs or {}), "job_id": job_id, "log": log}
    operator.defer(
        trigger=SlurmJobTrigger([job_id], slurm_environment(), poll_seconds, [log], carry),
        method_name=method_name,
        kwargs=carry,
    )


def resume_kwargs(event: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The defer kwargs of a resumed task: as passed (Airflow's triggerer), else from the event's carry
    (``dag.test()`` passes only the event)."""
    return {**(event.get("carry") or {}), **kwargs}


def _last_json(path: str) -> dict[str, Any] | None:
    from dripper.runs.jobs import last_json_object

    with contextlib.suppress(OSError), open(path, encoding="utf-8", errors="replace") as f:
        return last_json_object(f)
    return None


def job_outcome(operator: Any, event: dict[str, Any], what: str, tail_lines: int = 40) -> dict[str, Any]:
    """The job's result (the last JSON line of its log, as :class:`~dripper.airflow.jobs.ModuleJobOperator`
    returns it) or, when it failed, an ``AirflowException`` naming its state and reason with its log tail.

    The log's tail goes into the task log either way.
    """
    from airflow.sdk.exceptions import AirflowException

    jobs = [slurm_jobs.SlurmJobState(**job) for job in event.get("jobs") or []]
    bad = [j for j in jobs if not j.succeeded] or jobs
    logs = [p for p in event.get("logs") or [] if p]
    if event.get("status") != "success":
        logs += [j.log for j in bad if j.log and j.log not in logs and os.path.exists(j.log)]
    for path in logs:
        tail = slurm_jobs.log_tail(path, tail_lines)
        operator.log.info("--- end of %s ---\n%s", path, tail)
    if event.get("status") != "success":
        described = "; ".join(j.describe() for j in bad) or "Slurm job state unknown"
        tails = "\n".join(slurm_jobs.log_tail(p, tail_lines) for p in logs)
        raise AirflowException(
            f"{what}: {described}. Clearing this task (or its retry) submits the job again"
            f"{' and resumes from the latest checkpoint' if 'pretrain' in what else ''}. "
            f"Log {', '.join(logs) or '(none)'} ends:\n{tails}"
        )
    return {"jobs": [j.job_id for j in jobs], "result": _last_json(logs[-1]) if logs else None}


def on_kill_cancel(operator: Any) -> None:
    """Cancel the job ``operator`` submitted (``on_kill`` while it was still in the worker)."""
    job_id = getattr(operator, "_slurm_job_id", None)
    if job_id:
        with contextlib.suppress(slurm_jobs.SlurmError):
            slurm_jobs.cancel(job_id, {**os.environ, **slurm_environment()})


def submit_module_job(
    operator: Any,
    *,
    log_dir: str,
    job_name: str,
    launcher: str = "torchrun",
    method_name: str = "execute_slurm_complete",
    kwargs: dict[str, Any] | None = None,
    processes: int = 1,
) -> None:
    """Submit ``python -m {operator.module} {operator.argv…}`` as an ``sbatch`` job and defer.

    ``operator.slurm`` holds :class:`dripper.pretrain.slurm.SlurmJobConfig`'s fields; the script and the job's log
    go to ``log_dir``; the job is named ``job_name`` unless the options name it. ``launcher``:
    ``torchrun`` on every node, or ``python`` (one process). ``processes``: ``torchrun`` processes per CPU
    node where the options name none (the pretrain config's ``nproc``).
    """
    from airflow.sdk.exceptions import AirflowFailException

    try:
        config = slurm_jobs.SlurmJobConfig.from_dict(operator.slurm)
        if not config.gpus_per_node and processes > 1 and config.processes_per_node == 1:
            config = slurm_jobs.SlurmJobConfig.from_dict(
                {**config.to_dict(), "processes_per_node": processes}
            )
        os.makedirs(log_dir, exist_ok=True)
        script = slurm_jobs.render_sbatch(
            config,
            operator.argv,
            job_name=job_name,
            log_dir=log_dir,
            module=operator.module,
            launcher=launcher,
        )
    except (TypeError, ValueError) as error:
        raise AirflowFailException(f"{operator.task_id}: slurm={operator.slurm!r}: {error}") from None
    stamp = time.strftime("%Y%m%dT%H%M%S")
    submit_and_defer(
        operator,
        script,
        os.path.join(log_dir, f"{slurm_jobs.slurm_job_name(config, job_name)}-{stamp}.sbatch"),
        os.path.join(log_dir, "slurm-%j.out"),
        method_name=method_name,
        poll_seconds=config.poll_seconds,
        kwargs=kwargs,
        adopt_name=slurm_jobs.slurm_job_name(config, job_name),
    )


def submit_pretrain(operator: Any, context: Any, run_dir: str, root: str) -> None:
    """``PretrainOperator(run_on="slurm")``: submit the training as an ``sbatch`` job and defer.

    The script and logs go to ``{run_dir}/slurm/``; the job is named ``pretrain-{run}`` unless the Slurm
    options name it. Resumes in :meth:`~dripper.airflow.jobs.PretrainOperator.execute_slurm_complete`.
    """
    submit_module_job(
        operator,
        log_dir=os.path.join(run_dir, "slurm"),
        job_name=f"pretrain-{os.path.basename(run_dir.rstrip('/'))}",
        kwargs={"run_dir": run_dir, "root": root},
        processes=operator.stage_config().nproc,
    )


def submit_refine(operator: Any, context: Any) -> dict[str, Any]:
    """``RefineOperator(run_on="slurm")``: submit the passes through datatrove's ``SlurmPipelineExecutor``
    as a chain of jobs and defer until the last ended (:func:`refine_jobs_complete` resumes).

    ``operator.slurm``: the executor's options (``partition`` and ``time`` required; ``qos``,
    ``cpus_per_task``, ``mem_per_cpu_gb``, ``sbatch_args``, ``venv_path``, ``job_name``…) plus
    ``poll_seconds`` (30). Returns at once (no job) when every datatrove task finished in an earlier run.
    """
    from airflow.sdk.exceptions import AirflowFailException

    from dripper.refine import run_refine

    options = dict(operator.slurm or {})
    poll = float(options.pop("poll_seconds", 30))
    missing = [name for name in ("partition", "time") if not options.get(name)]
    if missing:
        raise AirflowFailException(
            f"{operator.task_id}: slurm options {missing} are required (e.g. "
            '{"partition": "cpu", "time": "04:00:00"}), as datatrove\'s SlurmPipelineExecutor needs them'
        )
    config = {**operator.refine_config(), "executor": "slurm", "executor_options": options}
    storage_options = operator.hook(operator.root).storage_options
    # datatrove calls sbatch with this process's environment (SLURM_CONF, PATH), which sbatch passes on to
    # the jobs: with it the connection's S3 credentials, as the jobs read their pickled pipeline by them.
    with _environment(aws_environment(storage_options)):
        submitted = run_refine(
            operator.root, operator.root, config, storage_options=storage_options, force=bool(operator.force)
        )
    jobs = submitted["submitted"]
    if not jobs:  # every task finished in an earlier run
        return refine_jobs_complete(operator, {"status": "success", "jobs": []}, jobs=[])
    operator.log.info("refine: submitted Slurm jobs %s (logs under %s)", jobs, submitted["slurm_logs"])
    operator._slurm_job_id = jobs[-1]
    operator.defer(
        trigger=SlurmJobTrigger(jobs, slurm_environment(), poll, carry={"jobs": jobs}),
        method_name="execute_slurm_complete",
        kwargs={"jobs": jobs},
    )


@contextlib.contextmanager
def _environment(variables: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def refine_jobs_complete(operator: Any, event: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """The refine jobs ended: fail (cancelling the rest of the chain, with the log tail), or check every
    datatrove task's completion and write the summary; returns what ``RefineOperator`` returns."""
    from dripper.refine.pipeline import complete_refine

    jobs = resume_kwargs(event, kwargs)["jobs"]
    if event.get("status") != "success":
        for job in jobs:
            with contextlib.suppress(slurm_jobs.SlurmError):
                slurm_jobs.cancel(job, {**os.environ, **slurm_environment()})
    job_outcome(operator, event, f"{operator.task_id}: refinement")
    summary = complete_refine(operator.root, operator.hook(operator.root).storage_options)
    return {**operator.refine_result(summary), "slurm_jobs": list(jobs)}
