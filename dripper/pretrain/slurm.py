"""Pretraining as a Slurm job: an ``sbatch`` script that runs ``srun`` + ``torchrun`` on every node, and the
Slurm commands to submit, follow and cancel jobs (no Airflow here: :mod:`dripper.airflow.slurm` builds on this).

The script asks for ``nodes`` nodes with one Slurm task per node; each task starts ``torchrun`` with
``gpus_per_node`` processes (``processes_per_node`` on CPU nodes) and the rendezvous taken from Slurm's
environment: the first host of ``$SLURM_JOB_NODELIST`` (``scontrol show hostnames … | head -1``) as
``MASTER_ADDR``, ``--nnodes $SLURM_NNODES --node-rank $SLURM_NODEID`` and a c10d rendezvous keyed by
``$SLURM_JOB_ID``. The training command is ``python -m dripper.pretrain train …`` with the arguments
:class:`dripper.airflow.jobs.PretrainOperator` builds; the run folder resumes from its latest checkpoint, so a
resubmitted job continues where a cancelled or timed-out one stopped.

Example::

    config = SlurmJobConfig(nodes=4, gpus_per_node=8, partition="h100", account="llm", time="2-00:00:00")
    script = render_sbatch(config, ["train", "--out-dir", run_dir, …], job_name="pretrain-dripper",
                           log_dir=f"{run_dir}/slurm")
    job_id = submit(script, f"{run_dir}/slurm/job.sbatch")
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = [
    "ACTIVE_STATES",
    "SlurmError",
    "SlurmJobConfig",
    "SlurmJobState",
    "active_jobs",
    "cancel",
    "slurm_job_name",
    "job_state",
    "log_tail",
    "render_sbatch",
    "submit",
]

#: Job states in which a job may still run (``squeue``'s long names).
ACTIVE_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING",
     "STAGE_OUT", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "STOPPED"}
)  # fmt: skip
#: Pending reasons that mean the job will never start (a dependency failed).
NEVER_STARTS = ("DependencyNeverSatisfied",)
_TIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){0,2}$|^\d+$")
_JOB_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class SlurmError(RuntimeError):
    """A Slurm command failed (``sbatch`` refused the job, the controller is unreachable…)."""


@dataclass(frozen=True)
class SlurmJobConfig:
    """Where and how a pretraining job runs on Slurm.

    Attributes:
        nodes: Nodes of the job (``--nodes``); one ``torchrun`` per node.
        gpus_per_node: GPUs per node (``--gpus-per-node``) and ``torchrun`` processes per node; 0 for CPU
            nodes (then ``processes_per_node`` processes, gloo).
        processes_per_node: ``torchrun`` processes per node when ``gpus_per_node`` is 0.
        cpus_per_node: CPUs given to each node's ``torchrun`` (``--cpus-per-task``); ``None``: the site's
            default.
        partition: ``--partition`` (``None``: the cluster's default partition).
        account: ``--account`` to charge (``None``: the user's default).
        qos: ``--qos`` (``None``: the default).
        time: Wall-time limit (``--time``: ``MM``, ``HH:MM:SS``, ``D-HH:MM:SS``); ``None``: the partition's.
        mem: ``--mem`` per node (``"0"``: all of it; ``None``: the site's default).
        job_name: ``--job-name``; ``None``: the operator names it after the run (``pretrain-{run}``).
        sbatch_lines: More ``#SBATCH`` options, one per entry, with or without the ``#SBATCH`` prefix
            (``"--exclusive"``, ``"--constraint=h100"``, ``"--reservation=ablation"``).
        env: Environment variables exported in the job (``NCCL_*``, ``HF_HOME``…).
        setup: Shell lines run before ``srun`` (``module load cuda``, ``source /venv/bin/activate``).
        python: The Python on the nodes that has the project installed (``None``: the submitting
            process's interpreter, fine on a shared filesystem).
        master_addr: Overrides the rendezvous host (default: the job's first node).
        master_port: The rendezvous port; ``None``: ``20000 + job id % 20000`` (two jobs sharing a node do
            not collide).
        rdzv_backend: torchrun's rendezvous backend.
        workdir: The job's working directory (``--chdir``); ``None``: where it was submitted.
        poll_seconds: How often the operator asks Slurm about the job.
    """

    nodes: int = 1
    gpus_per_node: int = 0
    processes_per_node: int = 1
    cpus_per_node: int | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    mem: str | None = None
    job_name: str | None = None
    sbatch_lines: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    setup: tuple[str, ...] = ()
    python: str | None = None
    master_addr: str | None = None
    master_port: int | None = None
    rdzv_backend: str = "c10d"
    workdir: str | None = None
    poll_seconds: float = 30.0

    def __post_init__(self) -> None:
        for name in ("nodes", "processes_per_node"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"slurm {name}={getattr(self, name)}: must be at least 1")
        if int(self.gpus_per_node) < 0:
            raise ValueError(f"slurm gpus_per_node={self.gpus_per_node}: must be 0 (CPU nodes) or more")
        if self.cpus_per_node is not None and int(self.cpus_per_node) < 1:
            raise ValueError(f"slurm cpus_per_node={self.cpus_per_node}: must be at least 1, or None")
        if self.time is not None and not _TIME.match(str(self.time)):
            raise ValueError(
                f"slurm time={self.time!r}: use Slurm's format, e.g. '30' (minutes), '04:00:00' or '2-00:00:00'"
            )
        if self.master_port is not None and not 0 < int(self.master_port) < 65536:
            raise ValueError(f"slurm master_port={self.master_port}: must be a TCP port (1-65535), or None")
        if float(self.poll_seconds) <= 0:
            raise ValueError(f"slurm poll_seconds={self.poll_seconds}: must be positive")
        if isinstance(self.sbatch_lines, str):
            object.__setattr__(self, "sbatch_lines", (self.sbatch_lines,))
        if isinstance(self.setup, str):
            object.__setattr__(self, "setup", (self.setup,))
        object.__setattr__(self, "sbatch_lines", tuple(self.sbatch_lines))
        object.__setattr__(self, "setup", tuple(self.setup))
        object.__setattr__(self, "env", {str(k): str(v) for k, v in dict(self.env).items()})

    @property
    def processes(self) -> int:
        """``torchrun`` processes per node."""
        return int(self.gpus_per_node) or int(self.processes_per_node)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | SlurmJobConfig | None) -> SlurmJobConfig:
        """Build from a dict (Airflow params, JSON), refusing unknown keys by name."""
        if isinstance(data, SlurmJobConfig):
            return data
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"slurm options {unknown} are not known; use some of {sorted(known)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def slurm_job_name(config: SlurmJobConfig, default: str) -> str:
    """The ``--job-name`` of a job: ``config.job_name`` or ``default``, as Slurm-safe characters."""
    return _JOB_NAME.sub("-", config.job_name or default).strip("-")[:128] or "pretrain"


def render_sbatch(
    config: SlurmJobConfig,
    arguments: Sequence[Any],
    *,
    job_name: str,
    log_dir: str | os.PathLike,
    module: str = "dripper.pretrain",
    launcher: str = "torchrun",
) -> str:
    """The ``sbatch`` script running ``python -m {module} {arguments…}`` under ``torchrun`` on every node
    (``launcher="torchrun"``), or once in a single process (``launcher="python"``: evaluation, export).

    Args:
        config: Resources and environment of the job.
        arguments: The module's command-line arguments (``train --out-dir … --data …``); ``None`` entries
            are dropped.
        job_name: ``--job-name`` unless ``config.job_name`` is set.
        log_dir: Folder of the job's log (``{log_dir}/slurm-{job id}.out``, stdout and stderr); it must
            exist on a filesystem the nodes and the submitting machine share.
        module: The Python module to run.
        launcher: ``torchrun`` (one per node, rendezvous from Slurm's environment) or ``python`` (one
            process on the first node; ``config.nodes`` must be 1).

    Returns:
        The script's text (starts with ``#!/bin/bash``: ``sbatch`` refuses scripts without one).
    """
    if launcher not in ("torchrun", "python"):
        raise ValueError(f"launcher={launcher!r}: use 'torchrun' or 'python'")
    if launcher == "python" and int(config.nodes) != 1:
        raise ValueError(f"slurm nodes={config.nodes}: a single-process job ({module}) runs on 1 node")
    python = config.python or _default_python()
    name = slurm_job_name(config, job_name)
    directives = [
        f"--job-name={name}",
        f"--nodes={int(config.nodes)}",
        "--ntasks-per-node=1",
        f"--output={Path(log_dir) / 'slurm-%j.out'}",
        "--open-mode=append",
    ]
    if int(config.gpus_per_node):
        directives.append(f"--gpus-per-node={int(config.gpus_per_node)}")
    optional = {
        "cpus-per-task": config.cpus_per_node,
        "partition": config.partition,
        "account": config.account,
        "qos": config.qos,
        "time": config.time,
        "mem": config.mem,
        "chdir": config.workdir,
    }
    directives += [f"--{key}={value}" for key, value in optional.items() if value not in (None, "")]
    directives += [line.strip().removeprefix("#SBATCH").strip() for line in config.sbatch_lines]
    env_lines = [f"export {key}={shlex.quote(value)}" for key, value in config.env.items()]
    if config.master_addr:
        master_addr = f"export MASTER_ADDR={shlex.quote(config.master_addr)}"
    else:
        master_addr = 'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"'
    if config.master_port:
        master_port = f"export MASTER_PORT={int(config.master_port)}"
    else:
        master_port = "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))"
    # Evaluated by each node's task (single-quoted for srun's bash): its own $SLURM_NODEID.
    torchrun = " ".join(
        [
            shlex.quote(python),
            "-m torch.distributed.run",
            '--nnodes "$SLURM_NNODES"',
            '--node-rank "$SLURM_NODEID"',
            f"--nproc-per-node {config.processes}",
            f"--rdzv-backend {shlex.quote(config.rdzv_backend)}",
            '--rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT"',
            '--rdzv-id "$SLURM_JOB_ID"',
            f"-m {shlex.quote(module)}",
            *(shlex.quote(str(a)) for a in arguments if a is not None),
        ]
    )
    if launcher == "python":
        command = " ".join(
            [
                shlex.quote(python),
                "-m",
                shlex.quote(module),
                *(shlex.quote(str(a)) for a in arguments if a is not None),
            ]
        )
        return "\n".join(
            [
                "#!/bin/bash",
                f"# {name}: python -m {module} in one process, written by dripper.pretrain.slurm",
                *(f"#SBATCH {d}" for d in directives),
                "set -euo pipefail",
                *env_lines,
                "export PYTHONUNBUFFERED=1",
                *config.setup,
                'echo "dripper.pretrain.slurm: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"',
                f"srun --ntasks=1 {command}",
                "",
            ]
        )
    lines = [
        "#!/bin/bash",
        f"# {name}: python -m {module} on {int(config.nodes)} node(s) x {config.processes} process(es), "
        "written by dripper.pretrain.slurm",
        *(f"#SBATCH {d}" for d in directives),
        "set -euo pipefail",
        *env_lines,
        "export PYTHONUNBUFFERED=1",
        master_addr,
        master_port,
        *config.setup,
        'echo "dripper.pretrain.slurm: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST ($SLURM_NNODES nodes), '
        'rendezvous $MASTER_ADDR:$MASTER_PORT"',
        f"srun --kill-on-bad-exit=1 --ntasks-per-node=1 bash -c {shlex.quote('exec ' + torchrun)}",
        "",
    ]
    return "\n".join(lines)


def _default_python() -> str:
    import sys

    return sys.executable


# -- Slurm commands ----------------------------------------------------------------------------------------


def _run(
    args: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 120, cwd: str | None = None
) -> str:
    try:
        done = subprocess.run(
            list(args),
            capture_output=True,
            text=True,
            env=dict(env) if env else None,
            timeout=timeout,
            cwd=cwd,
        )
    except FileNotFoundError:
        raise SlurmError(
            f"`{args[0]}` is not installed here: the Slurm client commands (sbatch, squeue, scontrol, scancel) "
            "must be on PATH of the machine that submits (the Airflow worker)"
        ) from None
    if done.returncode != 0:
        raise SlurmError(f"`{' '.join(args)}` exited with {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def submit(script: str, path: str | os.PathLike, env: Mapping[str, str] | None = None, *args: str) -> str:
    """Write ``script`` to ``path`` and submit it with ``sbatch --parsable``; returns the job id."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script, encoding="utf-8")
    # From the script's folder: a script without --output logs there (slurm-JOB.out), not where Airflow runs.
    out = _run(["sbatch", "--parsable", *args, str(path.resolve())], env, cwd=str(path.parent)).strip()
    return out.split(";")[0]  # "ID;cluster" on federated clusters


def active_jobs(name: str, log_dir: str | os.PathLike, env: Mapping[str, str] | None = None) -> list[str]:
    """This user's jobs named ``name`` that are pending or running and log into ``log_dir``: a job
    submitted for the same run by an earlier attempt of the task (adopted rather than doubled)."""
    out = _run(
        ["squeue", "--me", "-h", "-n", name, "-t", "PENDING,CONFIGURING,RUNNING,SUSPENDED", "-o", "%i"], env
    )
    folder = os.path.normpath(os.fspath(log_dir))
    found = []
    for job in out.split():
        state = job_state(job, env)
        if state.active and state.log and os.path.dirname(os.path.normpath(state.log)) == folder:
            found.append(job)
    return found


def cancel(job_id: str, env: Mapping[str, str] | None = None) -> None:
    """``scancel JOB`` (a finished or unknown job is not an error)."""
    try:
        _run(["scancel", str(job_id)], env)
    except SlurmError as error:
        if "Invalid job id" not in str(error):
            raise


@dataclass(frozen=True)
class SlurmJobState:
    """What Slurm says about a job (for an array: its worst task).

    Attributes:
        job_id: The job.
        state: ``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ``CANCELLED``, ``TIMEOUT``… or
            ``UNKNOWN`` (Slurm forgot it: no accounting and past ``MinJobAge``).
        reason: Slurm's reason (``DependencyNeverSatisfied``, ``NonZeroExitCode``…), if any.
        exit_code: ``EXIT:SIGNAL``, if known.
        log: The job's stdout file, if known.
    """

    job_id: str
    state: str
    reason: str | None = None
    exit_code: str | None = None
    log: str | None = None

    @property
    def active(self) -> bool:
        """May still run (pending, running, completing) and can still start."""
        return self.state in ACTIVE_STATES and not (self.reason or "").startswith(NEVER_STARTS)

    @property
    def succeeded(self) -> bool:
        return self.state == "COMPLETED"

    def describe(self) -> str:
        parts = [f"Slurm job {self.job_id} {self.state}"]
        if self.reason and self.reason != "None":
            parts.append(f"reason {self.reason}")
        if self.exit_code and self.exit_code != "0:0":
            parts.append(f"exit code {self.exit_code}")
        return ", ".join(parts)


_SEVERITY = {"COMPLETED": 0, "UNKNOWN": 2}


def _worst(states: list[SlurmJobState]) -> SlurmJobState:
    """Of an array's tasks: an active one if any, else a failed one, else a completed one."""
    active = [s for s in states if s.active]
    if active:
        return active[0]
    failed = [s for s in states if not s.succeeded]
    return (failed or states)[0]


def job_state(job_id: str, env: Mapping[str, str] | None = None) -> SlurmJobState:
    """The state of ``job_id`` from ``scontrol show job`` (active and recently finished jobs), else from
    ``sacct`` (where accounting is configured), else ``UNKNOWN``."""
    try:
        text = _run(["scontrol", "show", "job", "-o", str(job_id)], env)
    except SlurmError as error:
        if "Invalid job id" not in str(error):
            raise
        text = ""
    states = []
    for line in text.splitlines():
        values = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "JobState" in values:
            states.append(
                SlurmJobState(
                    job_id=str(job_id),
                    state=values["JobState"],
                    reason=values.get("Reason"),
                    exit_code=values.get("ExitCode"),
                    log=values.get("StdOut"),
                )
            )
    if states:
        return _worst(states)
    try:
        rows = _run(["sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "State,ExitCode"], env).split("\n")
    except SlurmError:
        rows = []
    states = [
        SlurmJobState(str(job_id), row.split("|")[0].split()[0], exit_code=row.split("|")[1])
        for row in rows
        if row.strip() and "|" in row
    ]
    return _worst(states) if states else SlurmJobState(str(job_id), "UNKNOWN")


def log_tail(path: str | os.PathLike | None, lines: int = 30) -> str:
    """The last ``lines`` lines of a job's log ('' when it is not there)."""
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip("\n")
    except OSError:
        return ""
