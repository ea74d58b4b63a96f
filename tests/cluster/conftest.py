"""Real cluster engines on 127.0.0.1 for the tests of ``tests/cluster/``, each started once per test run and
only when a collected test asks for it (fixtures scoped to this package: started by the first test that
needs one, stopped when ``tests/cluster/`` is done, so no idle daemon outlives it through the rest of the
suite):

- ``slurm_cluster``: a one-node Slurm cluster (Debian's slurm-wlm 22.05: ``slurmctld``, ``slurmd``, and a
  ``munged`` of its own on a socket in the cluster's folder), ``CPUs=2``, one default partition;
- ``postgres_server``: a throwaway PostgreSQL cluster (``initdb`` in a temporary folder, run as the
  ``postgres`` user when this runs as root: the server refuses root);
- ``dask_cluster``: ``dask scheduler`` and two ``dask worker`` processes, started as the command line starts
  them (workers with ``DASK_DISTRIBUTED__WORKER__DAEMON=False``, so they may start processes of their own).

Missing Debian packages are installed with ``apt-get`` when this runs as root where apt-get exists (as
``make cluster-engines`` does, and as CI runs); elsewhere the tests that need the engine skip with a one-line
reason. Every server listens on 127.0.0.1 only, keeps its state in a temporary folder, and is stopped by its
own process id at the end (Slurm jobs still queued are cancelled first).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port

SLURM_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
SLURM_BINARIES = ("slurmctld", "slurmd", "munged", "sbatch", "srun", "squeue", "scontrol", "scancel")
POSTGRES_PACKAGES = ("postgresql",)
POSTGRES_VERSION = "15"
POSTGRES_BIN = Path(f"/usr/lib/postgresql/{POSTGRES_VERSION}/bin")

_apt_results: dict[tuple[str, ...], str | None] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cluster: needs a cluster engine started by tests/cluster/conftest.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)


# -- packages ----------------------------------------------------------------------------------------------


def _missing(binaries: Sequence[str], extra_paths: Sequence[Path] = ()) -> list[str]:
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", *map(str, extra_paths)])
    return [name for name in binaries if shutil.which(name, path=path) is None]


def ensure_debian_packages(
    engine: str, packages: Sequence[str], binaries: Sequence[str], extra_paths: Sequence[Path] = ()
) -> None:
    """Install ``packages`` with apt-get when ``binaries`` are missing and this runs as root; else skip.

    Tried once per session per package set: a failed install skips every test of the engine with the
    apt-get error's last line.
    """
    if not _missing(binaries, extra_paths):
        return
    key = tuple(packages)
    if key not in _apt_results:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            _apt_results[key] = (
                f"{engine}: {', '.join(_missing(binaries, extra_paths))} not installed and not root with apt-get "
                f"(install the Debian packages {' '.join(packages)}, or run `make cluster-engines` as root)"
            )
        else:
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            done = subprocess.run(
                f"apt-get update -q && apt-get install -y -q {' '.join(packages)}",
                shell=True,
                env=env,
                capture_output=True,
                text=True,
            )
            last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or [""]
            _apt_results[key] = (
                None if done.returncode == 0 else f"{engine}: apt-get install failed: {last[0]}"
            )
    if _apt_results[key] is None and _missing(binaries, extra_paths):
        _apt_results[key] = (
            f"{engine}: {', '.join(_missing(binaries, extra_paths))} still missing after apt-get"
        )
    if _apt_results[key] is not None:
        pytest.skip(_apt_results[key])


# -- processes ---------------------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone once reaped.
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    return True


def stop_pid(pid: int | None, timeout: float = 20.0) -> None:
    """SIGTERM ``pid``, wait up to ``timeout`` seconds, then SIGKILL it."""
    if not pid or not _pid_alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _pid_alive(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
            return
        time.sleep(0.1)


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def _wait_for(what: str, check, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            pass
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{what} did not come up within {timeout:.0f} s\n{tail}")
        time.sleep(0.3)


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# -- Slurm -------------------------------------------------------------------------------------------------


@dataclass
class SlurmCluster:
    """A running one-node Slurm cluster.

    Attributes:
        root: Its folder: ``slurm.conf``, state, spool, logs, pid files, munge socket and key.
        env: An environment whose Slurm commands talk to this cluster (``SLURM_CONF`` set).
        partition: The default partition's name.
        node: The node's name (the short hostname).
    """

    root: Path
    env: dict[str, str]
    partition: str = "debug"
    node: str = field(default_factory=lambda: socket.gethostname().split(".")[0])

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def command(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        """Run a Slurm command (``squeue``, ``scontrol`` …) against this cluster; returns its stdout."""
        done = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited with {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def job_ids(self) -> list[str]:
        return self.command("squeue", "-h", "-o", "%i").split()

    def cancel_all(self, timeout: float = 60) -> None:
        """Cancel every job and wait until the queue is empty."""
        ids = self.job_ids()
        if ids:
            self.command("scancel", *ids, check=False)
        deadline = time.monotonic() + timeout
        while self.job_ids() and time.monotonic() < deadline:
            time.sleep(0.5)


def _slurm_conf(root: Path, node: str, ctld_port: int, slurmd_port: int, partition: str) -> str:
    return f"""\
# One-node Slurm cluster of the tests (tests/cluster/conftest.py); everything under {root}.
ClusterName=dripper-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SchedulerType=sched/backfill
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ReturnToService=2
MinJobAge=600
KillWait=5
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.txt
NodeName={node} NodeAddr=127.0.0.1 CPUs=2 RealMemory=8000 State=UNKNOWN
PartitionName={partition} Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _munge_key(root: Path) -> Path:
    system = Path("/etc/munge/munge.key")
    if system.exists():
        return system
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    return key


def _stop_slurm(cluster: SlurmCluster) -> None:
    root = cluster.root
    with contextlib.suppress(Exception):
        cluster.cancel_all()
    for name in ("slurmd.pid", "slurmctld.pid", "munge/munged.pid"):
        stop_pid(_read_pid(root / name))


@pytest.fixture(scope="package")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A one-node Slurm cluster on 127.0.0.1 (2 CPUs, partition ``debug``), as root; skips elsewhere."""
    if os.geteuid() != 0:
        pytest.skip("slurm: slurmd runs jobs as other users only as root; run the tests as root")
    ensure_debian_packages("slurm", SLURM_PACKAGES, SLURM_BINARIES)
    root = Path(tempfile.mkdtemp(prefix="dripper-slurm-"))
    for name in ("state", "spool", "log", "munge"):
        (root / name).mkdir()
    # The munge socket's folders must be reachable by every user (munged warns otherwise).
    root.chmod(0o755)
    (root / "munge").chmod(0o755)
    node = socket.gethostname().split(".")[0]
    partition = "debug"
    (root / "slurm.conf").write_text(_slurm_conf(root, node, free_port(), free_port(), partition))
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    cluster = SlurmCluster(root=root, env=env, partition=partition, node=node)
    try:
        munge = root / "munge"
        subprocess.run(
            [
                "munged",
                "--force",
                f"--socket={munge}/munge.socket",
                f"--key-file={_munge_key(root)}",
                f"--pid-file={munge}/munged.pid",
                f"--log-file={munge}/munged.log",
                f"--seed-file={munge}/munged.seed",
            ],
            check=True,
            capture_output=True,
            env=env,
        )
        _wait_for("munged", lambda: (munge / "munge.socket").exists(), 20, munge / "munged.log")
        subprocess.run(["slurmctld"], check=True, env=env, capture_output=True)
        _wait_for("slurmctld", lambda: cluster.command("sinfo", "-h"), 30, root / "log" / "slurmctld.log")
        subprocess.run(["slurmd"], check=True, env=env, capture_output=True)
        _wait_for(
            "slurmd (node idle)",
            lambda: cluster.command("sinfo", "-h", "-o", "%t").strip() == "idle",
            60,
            root / "log" / "slurmd.log",
        )
        yield cluster
    finally:
        _stop_slurm(cluster)
        shutil.rmtree(root, ignore_errors=True)


# -- PostgreSQL --------------------------------------------------------------------------------------------


@dataclass
class PostgresServer:
    """A running throwaway PostgreSQL cluster on 127.0.0.1 (trust authentication, superuser ``user``).

    Attributes:
        root: Its folder (``data/``, ``log``, the socket).
        port: Its TCP port on 127.0.0.1.
        user: The superuser.
        run_as: The OS user the server runs as (``postgres`` when the tests run as root).
    """

    root: Path
    port: int
    user: str = "airflow"
    run_as: str | None = None

    def url(self, database: str = "postgres", driver: str = "postgresql+psycopg2") -> str:
        """A SQLAlchemy URL of ``database`` on this server."""
        return f"{driver}://{self.user}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", self.run_as, "--"] if self.run_as else []
        done = subprocess.run([*prefix, *args], capture_output=True, text=True, cwd=self.root, timeout=120)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited with {done.returncode}: {done.stderr.strip()}")
        return done

    def create_database(self, name: str) -> str:
        """Create ``name`` (owned by :attr:`user`); returns its SQLAlchemy URL."""
        self._run(
            str(POSTGRES_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, name
        )
        return self.url(name)

    @property
    def pid(self) -> int | None:
        return _read_pid(self.root / "data" / "postmaster.pid")

    def start(self) -> None:
        self._run(
            str(POSTGRES_BIN / "pg_ctl"),
            "-D",
            str(self.root / "data"),
            "-o",
            f"-h 127.0.0.1 -p {self.port} -k {self.root}",
            "-l",
            str(self.root / "log"),
            "-w",
            "start",
        )

    def stop(self) -> None:
        """Stop the server (fast shutdown: open connections are cut)."""
        pid = self.pid
        self._run(
            str(POSTGRES_BIN / "pg_ctl"),
            "-D",
            str(self.root / "data"),
            "-m",
            "fast",
            "-w",
            "stop",
            check=False,
        )
        stop_pid(pid)

    def restart(self) -> None:
        """Stop and start again on the same port and data (a database restart under a running client)."""
        self.stop()
        self.start()


@pytest.fixture(scope="package")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL 15 cluster in a temporary folder on a free 127.0.0.1 port; skips where it cannot run."""
    ensure_debian_packages("postgresql", POSTGRES_PACKAGES, ("initdb", "pg_ctl", "postgres"), [POSTGRES_BIN])
    run_as = None
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("postgresql: running as root and there is no `postgres` user to run the server as")
        run_as = "postgres"
    root = Path(tempfile.mkdtemp(prefix="dripper-postgres-"))
    if run_as:
        os.chown(root, account.pw_uid, account.pw_gid)
    server = PostgresServer(root=root, port=free_port(), run_as=run_as)
    try:
        server._run(
            str(POSTGRES_BIN / "initdb"),
            "-D",
            str(root / "data"),
            "-A",
            "trust",
            "-U",
            server.user,
            "-E",
            "UTF8",
        )
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


# -- Dask --------------------------------------------------------------------------------------------------


@dataclass
class DaskCluster:
    """``dask scheduler`` and ``dask worker`` processes on 127.0.0.1 (one process and thread per worker).

    Attributes:
        address: The scheduler's ``tcp://127.0.0.1:PORT``.
        root: The folder of their logs and worker spill space.
        scheduler: The scheduler's process.
        workers: The worker processes by name.
    """

    address: str
    root: Path
    scheduler: subprocess.Popen
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)
    #: Worker resources by worker name (``w1`` stands for a GPU node: ``--resources GPU=1``).
    resources: dict[str, str] = field(default_factory=lambda: {"w1": "GPU=1"})

    @staticmethod
    def environment() -> dict[str, str]:
        return {
            **os.environ,
            "DASK_DISTRIBUTED__WORKER__DAEMON": "False",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "OMP_NUM_THREADS": "1",
        }

    def start_worker(self, name: str, wait: bool = True) -> subprocess.Popen:
        """Start a worker process (no nanny: the process is the worker) and wait until it joins."""
        log = open(self.root / f"worker-{name}.log", "ab")  # noqa: SIM115 - the process keeps it
        process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("dask")),
                "worker",
                self.address,
                "--name",
                name,
                "--host",
                "127.0.0.1",
                "--nthreads",
                "1",
                "--no-nanny",
                "--no-dashboard",
                "--local-directory",
                str(self.root / f"worker-{name}"),
                *(["--resources", self.resources[name]] if name in self.resources else []),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.environment(),
            cwd=REPO,
        )
        log.close()
        self.workers[name] = process
        if wait:
            _wait_for(
                f"dask worker {name}",
                lambda: name in self.worker_names(),
                60,
                self.root / f"worker-{name}.log",
            )
        return process

    def worker_names(self) -> set[str]:
        from distributed import Client

        with Client(self.address, timeout=5) as client:
            return {info.get("name") for info in client.scheduler_info()["workers"].values()}

    def kill_worker(self, name: str) -> None:
        """SIGKILL a worker (a crash: no goodbye to the scheduler)."""
        process = self.workers.pop(name)
        process.kill()
        process.wait(timeout=20)

    def restore(self, names: Sequence[str] = ("w0", "w1")) -> None:
        """Bring the cluster back to ``names`` (after a test killed a worker)."""
        for name in names:
            if name not in self.workers or self.workers[name].poll() is not None:
                self.workers.pop(name, None)
                self.start_worker(name)

    def stop(self) -> None:
        for process in [*self.workers.values(), self.scheduler]:
            stop_pid(process.pid)
            with contextlib.suppress(Exception):
                process.wait(timeout=5)
        self.workers.clear()


@pytest.fixture(scope="package")
def dask_cluster() -> Iterator[DaskCluster]:
    """A Dask scheduler and two workers (``w0``, and ``w1`` advertising a ``GPU`` resource), each a process of
    its own, on 127.0.0.1."""
    pytest.importorskip("distributed")
    dask_cli = Path(sys.executable).with_name("dask")
    if not dask_cli.exists():
        pytest.skip(f"dask: no `dask` command beside {sys.executable}")
    root = Path(tempfile.mkdtemp(prefix="dripper-dask-"))
    port = free_port()
    log = open(root / "scheduler.log", "ab")  # noqa: SIM115 - the process keeps it
    scheduler = subprocess.Popen(
        [str(dask_cli), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=DaskCluster.environment(),
        cwd=REPO,
    )
    log.close()
    cluster = DaskCluster(address=f"tcp://127.0.0.1:{port}", root=root, scheduler=scheduler)
    try:
        _wait_for("dask scheduler", lambda: _port_open(port), 60, root / "scheduler.log")
        cluster.start_worker("w0", wait=False)
        cluster.start_worker("w1", wait=False)
        _wait_for("dask workers", lambda: cluster.worker_names() >= {"w0", "w1"}, 90, root / "scheduler.log")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
