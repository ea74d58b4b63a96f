"""Airflow on PostgreSQL: the metadata database of the harness's PostgreSQL server, migrated by
``airflow db migrate``; ``corpus_build`` triggered through the REST API on the API server, scheduler, DAG
processor and triggerer (``scripts/airflow_demo.py``'s machinery, the connection taken from
``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` by ``scripts/airflow_env.sh``), with PostgreSQL restarted while the
run is between two tasks: the run goes on to success.

Airflow 3.3's scheduler, triggerer and DAG processor exit when a query meets the database down (the API
server answers 500 meanwhile); the test starts the ones that exited again, as their supervisor would in a
deployment, and the run carries on from the state in PostgreSQL."""

from __future__ import annotations

import contextlib
import io
import subprocess
import threading
import time
import urllib.error
from pathlib import Path

import pytest

from scripts import airflow_demo
from tests.cluster.conftest import POSTGRES_BIN
from tests.conftest import free_port
from tests.dags.conftest import SMALL_BUILD, AirflowServer

RUN_SECONDS = 600


@pytest.fixture(scope="module")
def airflow_on_postgres(postgres_server, tmp_path_factory):
    pytest.importorskip("psycopg2")
    url = postgres_server.create_database("airflow")
    home = tmp_path_factory.mktemp("airflow-postgres")
    tokenizer = airflow_demo.sample_tokenizer(home / "tokenizer", vocab_size=800)
    env = airflow_demo.airflow_environment(
        {
            "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
            "DRIPPER_AIRFLOW_PORT": str(free_port()),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "DRIPPER_RUN_ROOT": str(home / "runs"),
            "DRIPPER_TOKENIZER": tokenizer,
            "DRIPPER_DASK_WORKERS": "0",
            "DRIPPER_EXTRACT_WORKERS": "0",
            "DRIPPER_LABELER": "trafilatura",
        }
    )
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == url
    try:
        started = time.perf_counter()
        api = airflow_demo.start_airflow(env)
        print(f"Airflow on PostgreSQL up in {time.perf_counter() - started:.0f} s")
        yield AirflowServer(env=env, api=api, password=airflow_demo.admin_password(env))
    finally:
        airflow_demo.stop_servers(env)


def psql(server, sql: str) -> str:
    return subprocess.run(
        [str(POSTGRES_BIN / "psql"), "-h", "127.0.0.1", "-p", str(server.port), "-U", server.user]
        + ["-d", "airflow", "-tAc", sql],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def wait_for_run(server: AirflowServer, run_id: str, seconds: float, restarted: dict) -> dict:
    """The run's final state over REST, riding over the restart: 5xx answers and refused connections while
    the database (or a server) is down are retried; dead servers are started again, as a supervisor
    (systemd ``Restart=always``, Kubernetes, compose ``restart:``) would."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            run = airflow_demo.get_run(server.api, run_id)
            if run["state"] in ("success", "failed"):
                return run
        except urllib.error.HTTPError as error:
            if error.code < 500:
                raise
            restarted["http_5xx"] = restarted.get("http_5xx", 0) + 1
        except urllib.error.URLError:
            restarted["refused"] = restarted.get("refused", 0) + 1
        for name in airflow_demo.SERVERS:
            if airflow_demo.running_pid(airflow_demo.pid_dir(server.env) / f"{name}.pid") is None:
                restarted.setdefault("servers_restarted", []).append(name)
        if restarted.get("servers_restarted") and restarted.get("pid"):
            with contextlib.redirect_stdout(io.StringIO()):
                airflow_demo.start_servers(server.env)  # only those not running
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} not finished after {seconds:.0f} s")
        time.sleep(3)


def test_corpus_build_on_postgres_survives_a_database_restart(airflow_on_postgres, postgres_server):
    server = airflow_on_postgres
    # The migrated schema is in PostgreSQL, not in a SQLite file.
    tables = "select count(*) from information_schema.tables where table_name = 'dag_run'"
    assert int(psql(postgres_server, tables)) == 1
    assert not list(Path(server.env["AIRFLOW_HOME"]).glob("*.db"))

    run_id = f"postgres__{time.strftime('%Y%m%dT%H%M%S')}"
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

    watcher = threading.Thread(target=restart_after_first_task)
    started = time.perf_counter()
    airflow_demo.trigger(server.api, run_id, SMALL_BUILD)
    watcher.start()
    try:
        run = wait_for_run(server, run_id, RUN_SECONDS, restarted)
    finally:
        watcher.join()
    seconds = time.perf_counter() - started
    assert restarted.get("pid"), "PostgreSQL was not restarted during the run"
    assert restarted["pid"][0] != restarted["pid"][1]
    assert run["state"] == "success", f"run {run_id} {run['state']}:\n{server.failure_report(run_id)}"
    published = server.published(run_id)
    assert published["documents"] > 0 and published["token_count"] > published["documents"]
    states = psql(postgres_server, f"select distinct state from task_instance where run_id = '{run_id}'")
    assert set(states.split()) <= {"success", "skipped"}, states
    print(
        f"corpus_build on PostgreSQL: {seconds:.0f} s, database restarted after {restarted['after_tasks']} "
        f"task(s); servers started again: {sorted(set(restarted.get('servers_restarted', [])))}, "
        f"REST 5xx answers retried: {restarted.get('http_5xx', 0)}"
    )
