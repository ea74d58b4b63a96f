"""The whole stack at once, every engine started for real on 127.0.0.1 (tests/cluster/conftest.py): Airflow
whose metadata database is PostgreSQL (API server, scheduler, DAG processor and triggerer, as
``scripts/airflow_demo.py`` starts them), runs triggered through its REST API, the run root on the S3 server
(moto, reached through the ``aws_default`` connection), simplify and extract on the external Dask cluster
(a scheduler and two workers as the ``dask`` command line starts them), refinement on the one-node Slurm
through datatrove's ``SlurmPipelineExecutor``, and an ablation's pretraining (tiny model, 2 gloo processes
on CPU) and evaluation submitted to Slurm, each awaited in the triggerer.

- ``corpus_build`` on that stack, with PostgreSQL restarted while the run is between two tasks, makes the
  corpus the embedded defaults make from the same WARC file (``dripper run`` in this process, no engine):
  the same documents, the same token counts.
- ``extractor_ablation`` trains and scores on Slurm: each job's script and log are in the run folder.

Airflow 3.3's scheduler, triggerer and DAG processor exit when a query meets the database down (the API
server answers 500 meanwhile); the test starts the ones that exited again, as their supervisor would in a
deployment, and the run carries on from the state in PostgreSQL. The other faults (a Dask worker killed
mid-stage, a Slurm pretraining job cancelled mid-run) are tests of their own on the same engines
(``test_dask_cluster.py``, ``test_pretrain_slurm.py``).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import threading
import time
import urllib.error
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts import airflow_demo
from tests.cluster.conftest import POSTGRES_BIN
from tests.conftest import free_port
from tests.dags import SAMPLE
from tests.dags.conftest import SMALL_BUILD, AirflowServer

RUN_SECONDS = 1800  # a hang guard (a loaded machine is not a hung run), under the Makefile's TEST_TIMEOUT
STUCK_SCHEDULER_SECONDS = 90  # a scheduler unhealthy this long after the restart is stuck, not starting
#: The tiny CPU run of tests/pretrain/test_parallel_cpu.py: 2 data-parallel ranks, gloo.
TINY_TRAINING = [
    "--micro-batch-size", "2", "--global-batch-size", "8", "--lr", "5e-3", "--min-lr", "5e-4",
    "--warmup-steps", "2", "--precision", "fp32",
]  # fmt: skip


@pytest.fixture(scope="module")
def stack(postgres_server, slurm_cluster, dask_cluster, moto_server, s3_filesystem, tmp_path_factory):
    pytest.importorskip("psycopg2")
    url = postgres_server.create_database("airflow")
    home = tmp_path_factory.mktemp("stack")
    bucket = f"dripper-stack-{uuid.uuid4().hex[:8]}"
    s3_filesystem.mkdir(bucket, region_name="eu-west-1")
    tokenizer = airflow_demo.sample_tokenizer(home / "tokenizer", vocab_size=800)
    connection = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"endpoint_url": moto_server, "region_name": "eu-west-1"},
    }
    env = airflow_demo.airflow_environment(
        {
            "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
            "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(connection),
            "DRIPPER_AIRFLOW_PORT": str(free_port()),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "DRIPPER_RUN_ROOT": f"s3://{bucket}",
            "DRIPPER_DASK_SCHEDULER": dask_cluster.address,
            "DRIPPER_TOKENIZER": tokenizer,
            "DRIPPER_LABELER": "trafilatura",
            "SLURM_CONF": str(slurm_cluster.conf),
            "DRIPPER_SLURM_LOGS": str(home / "slurm-logs"),  # the S3 root's refine job logs
        }
    )
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == url
    try:
        started = time.perf_counter()
        api = airflow_demo.start_airflow(env)
        print(f"Airflow on PostgreSQL up in {time.perf_counter() - started:.0f} s")
        yield Stack(
            AirflowServer(env=env, api=api, password=airflow_demo.admin_password(env)),
            home,
            bucket,
            tokenizer,
            slurm_cluster.partition,
        )
    finally:
        airflow_demo.stop_servers(env)
        slurm_cluster.cancel_all()


@dataclass
class Stack:
    """The running stack: Airflow (on PostgreSQL), the S3 bucket of its run root, the tokenizer, Slurm's
    partition."""

    server: AirflowServer
    home: Path
    bucket: str
    tokenizer: str
    partition: str

    def slurm(self, **more) -> dict:
        """Slurm options of a job on the one-node cluster (polled every second)."""
        return {"partition": self.partition, "time": "10:00", "poll_seconds": 1, **more}


def psql(server, sql: str) -> str:
    return subprocess.run(
        [str(POSTGRES_BIN / "psql"), "-h", "127.0.0.1", "-p", str(server.port), "-U", server.user]
        + ["-d", "airflow", "-tAc", sql],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def wait_for_run(server: AirflowServer, run_id: str, restarted: dict, dag_id: str = "corpus_build") -> dict:
    """The run's final state over REST, riding over a restart: 5xx answers and refused connections while
    the database (or a server) is down are retried; dead servers are started again, as a supervisor
    (systemd ``Restart=always``, Kubernetes, compose ``restart:``) would."""
    deadline = time.monotonic() + RUN_SECONDS
    while True:
        try:
            run = airflow_demo.get_run(server.api, run_id, dag_id)
            if run["state"] in ("success", "failed"):
                return run
        except urllib.error.HTTPError as error:
            if error.code < 500:
                raise
            restarted["http_5xx"] = restarted.get("http_5xx", 0) + 1
        except urllib.error.URLError:
            restarted["refused"] = restarted.get("refused", 0) + 1
        if restarted.get("pid"):
            _kill_a_stuck_scheduler(server, restarted)
        for name in airflow_demo.SERVERS:
            if airflow_demo.running_pid(airflow_demo.pid_dir(server.env) / f"{name}.pid") is None:
                restarted.setdefault("servers_restarted", []).append(name)
        if restarted.get("servers_restarted") and restarted.get("pid"):
            with contextlib.redirect_stdout(io.StringIO()):
                airflow_demo.start_servers(server.env)  # only those not running
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} not finished after {RUN_SECONDS} s")
        time.sleep(3)


def _kill_a_stuck_scheduler(server: AirflowServer, restarted: dict) -> None:
    """Kill the scheduler (and its executor's workers) when it has been unhealthy for
    ``STUCK_SCHEDULER_SECONDS`` after the database restart, as a supervisor's health check would: under
    load the scheduler can hang alive in its own shutdown, waiting on a LocalExecutor worker that never
    exits, and a supervisor that restarts only dead servers would wait for it forever."""
    import psutil

    try:
        health = server.api.call("GET", "/api/v2/monitor/health", timeout=5) or {}
    except (urllib.error.URLError, OSError, ValueError):
        return  # the API server itself is down: restarted as a dead server
    pid = airflow_demo.running_pid(airflow_demo.pid_dir(server.env) / "scheduler.pid")
    if pid is None or (health.get("scheduler") or {}).get("status") == "healthy":
        restarted.pop("scheduler_unhealthy", None)
        return
    # Timed per process: a scheduler just started again gets its own STUCK_SCHEDULER_SECONDS.
    watched, since = restarted.setdefault("scheduler_unhealthy", (pid, time.monotonic()))
    if watched != pid:
        restarted["scheduler_unhealthy"] = (pid, time.monotonic())
        return
    if time.monotonic() - since < STUCK_SCHEDULER_SECONDS:
        return
    try:
        process = psutil.Process(pid)
        for member in [*process.children(recursive=True), process]:
            member.kill()
    except psutil.NoSuchProcess:
        pass
    restarted["scheduler_killed"] = restarted.get("scheduler_killed", 0) + 1
    restarted.pop("scheduler_unhealthy", None)


def _dripper(capsys, *argv: str) -> dict:
    """``dripper run ARGV`` in this process; the JSON object it printed last."""
    from dripper.cli import main

    code = main(["run", *argv, "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    return json.loads(out[out.rfind("\n{") + 1 :])


def _documents(fs, corpus: str) -> list[tuple[str, str]]:
    import pyarrow.parquet as pq

    rows = []
    for path in sorted(fs.glob(f"{corpus.rstrip('/')}/*.parquet")):
        with fs.open(path, "rb") as f:
            rows += [(row["id"], row["text"]) for row in pq.read_table(f, columns=["id", "text"]).to_pylist()]
    return sorted(rows)


def test_corpus_build_on_the_stack_equals_the_embedded_defaults(stack, postgres_server, tmp_path, capsys):
    import fsspec

    server = stack.server
    tables = "select count(*) from information_schema.tables where table_name = 'dag_run'"
    assert int(psql(postgres_server, tables)) == 1  # the migrated schema is in PostgreSQL …
    assert not list(Path(server.env["AIRFLOW_HOME"]).glob("*.db"))  # … not in a SQLite file

    run_id = f"stack__{time.strftime('%Y%m%dT%H%M%S')}"
    restarted: dict = {}

    def restart_after_first_task():
        deadline = time.monotonic() + RUN_SECONDS
        while time.monotonic() < deadline:
            done = psql(
                postgres_server,
                f"select count(*) from task_instance where run_id = '{run_id}' and state = 'success'",
            )
            if int(done or 0) >= 1:
                before = postgres_server.pid
                postgres_server.restart()
                restarted.update(pid=(before, postgres_server.pid), after_tasks=int(done))
                return
            time.sleep(0.5)

    conf = {
        **{k: v for k, v in SMALL_BUILD.items() if not k.endswith("_workers") or k == "refine_workers"},
        "refine_run_on": "slurm",
        "refine_slurm": stack.slurm(mem_per_cpu_gb=1),
    }
    watcher = threading.Thread(target=restart_after_first_task)
    started = time.perf_counter()
    airflow_demo.trigger(server.api, run_id, conf)
    watcher.start()
    try:
        run = wait_for_run(server, run_id, restarted)
    finally:
        watcher.join()
    seconds = time.perf_counter() - started
    assert run["state"] == "success", f"run {run_id} {run['state']}:\n{server.failure_report(run_id)}"
    assert restarted.get("pid") and restarted["pid"][0] != restarted["pid"][1], "PostgreSQL was not restarted"
    states = psql(postgres_server, f"select distinct state from task_instance where run_id = '{run_id}'")
    assert set(states.split()) <= {"success", "skipped"}, states

    published = server.published(run_id)
    root = f"s3://{stack.bucket}/runs/CC-MAIN-SAMPLE/n1-seed0/extractors/trafilatura"
    assert published["corpus"].rstrip("/") == f"{root}/corpus", published
    refine = airflow_demo.published(server.api, run_id, "corpus_build", "refine")
    assert refine["slurm_jobs"], refine  # the passes went to Slurm, their logs on the nodes' filesystem
    assert list((stack.home / "slurm-logs").glob("*/finalize/*.out"))

    # The embedded defaults on the same WARC file, in this process: the same documents and token counts.
    local = str(tmp_path / "runs" / "CC-MAIN-SAMPLE" / "n1-seed0")
    _dripper(capsys, "simplify", "--input", f"snapshot:CC-MAIN-SAMPLE@{SAMPLE}", "--warc-count", "1", "--output", local,
             "--workers", "0")  # fmt: skip
    _dripper(capsys, "extract", "--input", local, "--extractor", "trafilatura", "--workers", "0")
    _dripper(
        capsys, "refine", "--input", local, "--extractor", "trafilatura", "--tasks", "1", "--workers", "1"
    )
    tokens = _dripper(
        capsys, "tokenize", "--input", local, "--extractor", "trafilatura", "--tokenizer", stack.tokenizer
    )
    s3 = fsspec.filesystem("s3", **_s3_options(server.env))
    ours = _documents(s3, f"{root}/corpus")
    reference = _documents(fsspec.filesystem("file"), f"{local}/extractors/trafilatura/corpus")
    assert len(ours) == tokens["documents"] > 0
    assert ours == reference
    with s3.open(f"{root}/tokens/_summary.json") as f:
        summary = json.load(f)
    assert (summary["documents"], summary["tokens"]) == (tokens["documents"], tokens["token_count"])
    assert published["token_count"] == tokens["token_count"]
    print(
        f"corpus_build on the stack: {seconds:.0f} s, {len(ours)} documents, {tokens['token_count']} tokens; "
        f"{len(refine['slurm_jobs'])} refine jobs on Slurm; database restarted after {restarted['after_tasks']} "
        f"task(s), servers started again: {sorted(set(restarted.get('servers_restarted', [])))}, "
        f"stuck schedulers killed: {restarted.get('scheduler_killed', 0)}, "
        f"REST 5xx answers retried: {restarted.get('http_5xx', 0)}"
    )


def _s3_options(env: dict[str, str]) -> dict:
    connection = json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])
    return {
        "key": connection["login"],
        "secret": connection["password"],
        "client_kwargs": {
            "endpoint_url": connection["extra"]["endpoint_url"],
            "region_name": connection["extra"]["region_name"],
        },
    }


def test_ablation_trains_and_scores_on_slurm(stack):
    pytest.importorskip("megatron.core")
    pytest.importorskip("lm_eval")
    pytest.importorskip("matplotlib")
    server = stack.server
    run_id = f"stack_ablation__{time.strftime('%Y%m%dT%H%M%S')}"
    shared = stack.home / "shared-runs"  # Megatron and lm-eval read a filesystem the Slurm nodes mount
    conf = {
        "crawl_id": "CC-MAIN-SAMPLE",
        "crawl_base": str(SAMPLE),
        "warc_count": 1,
        "extractors": ["trafilatura"],
        "storage_root": str(shared),
        "refine_tasks": 1,
        "refine_workers": 1,
        "train_steps": 4,
        "seeds": [1234],  # one training run (seeds are tested on the local DAG run)
        "eval_every": 2,
        "pretrain_device": "cpu",
        "pretrain_nproc": 2,
        "pretrain_arguments": TINY_TRAINING,
        "pretrain_run_on": "slurm",
        "pretrain_slurm": stack.slurm(nodes=1, cpus_per_node=2, env={"OMP_NUM_THREADS": "1"}),
        "eval_limit": 8,
        "eval_run_on": "slurm",
        "eval_slurm": stack.slurm(env={"OMP_NUM_THREADS": "1"}),
        "report_labelled_limit": 1,
        "report_name": "stack",
    }
    started = time.perf_counter()
    airflow_demo.wait_for_dag(server.api, 120, dag_id="extractor_ablation")
    airflow_demo.trigger(server.api, run_id, conf, dag_id="extractor_ablation")
    run = wait_for_run(server, run_id, {}, dag_id="extractor_ablation")
    seconds = time.perf_counter() - started
    assert run["state"] == "success", server.failure_report(run_id, dag_id="extractor_ablation")

    folder = shared / "runs" / "CC-MAIN-SAMPLE" / "n1-seed0" / "extractors" / "trafilatura"
    (training_log,) = (folder / "pretrain" / "tiny-4steps-seed1234" / "slurm").glob("slurm-*.out")
    assert (
        "pretrain"
        in next((folder / "pretrain" / "tiny-4steps-seed1234" / "slurm").glob("*.sbatch")).read_text()
    )
    log = [
        json.loads(line) for line in (folder / "pretrain" / "tiny-4steps-seed1234" / "train_log.jsonl").open()
    ]
    assert [r["step"] for r in log] == [1, 2, 3, 4]
    (eval_log,) = (folder / "eval" / "tiny-4steps-seed1234" / "slurm").glob("slurm-*.out")
    assert eval_log.stat().st_size > 0
    script = next((folder / "eval" / "tiny-4steps-seed1234" / "slurm").glob("eval-*.sbatch")).read_text()
    assert "srun --ntasks=1 " in script and "-m dripper.eval.lm_suite --model-dir" in script  # one process …
    assert "torch.distributed.run" not in script  # … not torchrun
    scores = sorted(p.name for p in (folder / "eval" / "tiny-4steps-seed1234" / "checkpoints").glob("*.json"))
    assert scores == ["iter_0000002.json", "iter_0000004.json"]
    report = airflow_demo.published(server.api, run_id, "extractor_ablation", "ablation_report")
    assert Path(report["html"]).exists(), report
    print(f"extractor_ablation on the stack: {seconds:.0f} s (training log {training_log.name})")


def test_a_scheduler_stuck_unhealthy_after_the_restart_is_killed_with_its_workers(tmp_path, monkeypatch):
    """The supervisor's health check of ``wait_for_run``: a live scheduler that stays unhealthy is killed
    (it and its executor's workers), then started again as a dead server; a healthy one is left alone."""
    import sys

    import psutil

    class Health:
        status = "unhealthy"

        def call(self, method, path, timeout=30):
            assert (method, path) == ("GET", "/api/v2/monitor/health")
            return {"scheduler": {"status": self.status}}

    # A stand-in scheduler process: "airflow" in its command line (what running_pid checks), one child.
    script = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    scheduler = subprocess.Popen([sys.executable, "-c", script, "airflow-scheduler"])
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(scheduler.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)
        (worker,) = psutil.Process(scheduler.pid).children()
        env = {"AIRFLOW_HOME": str(tmp_path)}
        airflow_demo.pid_dir(env).mkdir()
        (airflow_demo.pid_dir(env) / "scheduler.pid").write_text(str(scheduler.pid))
        api = Health()
        server = AirflowServer(env=env, api=api, password="")
        restarted: dict = {"pid": (1, 2)}
        monkeypatch.setattr(sys.modules[__name__], "STUCK_SCHEDULER_SECONDS", 0.2)
        api.status = "healthy"
        _kill_a_stuck_scheduler(server, restarted)
        assert scheduler.poll() is None and "scheduler_killed" not in restarted
        api.status = "unhealthy"
        _kill_a_stuck_scheduler(server, restarted)  # the first unhealthy answer starts the clock
        assert scheduler.poll() is None
        time.sleep(0.3)
        _kill_a_stuck_scheduler(server, restarted)
        assert scheduler.wait(timeout=10) != 0 and restarted["scheduler_killed"] == 1
        worker.wait(timeout=10)  # its worker is gone too (psutil raises TimeoutExpired otherwise)
        assert airflow_demo.running_pid(airflow_demo.pid_dir(env) / "scheduler.pid") is None
    finally:
        scheduler.kill()
