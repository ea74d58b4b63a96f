"""A real Airflow for the tests that need its servers (REST trigger, the browser test): started once with
``scripts/airflow_demo.py``'s machinery, on a free 127.0.0.1 port, with SQLite and every path under a
temporary folder, so a running ``make demo`` (port 8080, ``out/airflow``) is never touched."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scripts import airflow_demo
from tests.conftest import free_port

#: The smallest useful corpus_build: one WARC file of the bundled sample, everything inside the tasks.
#: The browser test types the same values into the trigger form, so whichever run comes second resumes.
SMALL_BUILD = {
    "warc_count": 1,
    "seed": 0,
    "extractor": "trafilatura",
    "refine_tasks": 1,
    "refine_workers": 1,
    "simplify_workers": 0,
    "extract_workers": 0,
}


@dataclass
class AirflowServer:
    """The running servers: their environment, a logged-in REST client, and the UI's login."""

    env: dict[str, str]
    api: airflow_demo.Api
    password: str

    @property
    def url(self) -> str:
        return self.api.base_url

    @property
    def run_root(self) -> str:
        return self.env["DRIPPER_RUN_ROOT"]

    def run(self, run_id: str, dag_id: str = airflow_demo.DAG_ID) -> dict[str, Any]:
        return airflow_demo.get_run(self.api, run_id, dag_id)

    def published(self, run_id: str) -> dict[str, Any]:
        """What ``publish_corpus`` returned (paths and counts)."""
        return airflow_demo.published(self.api, run_id)

    def failure_report(self, run_id: str, chars: int = 3000, dag_id: str = airflow_demo.DAG_ID) -> str:
        """The end of every task log of ``run_id``, for an assertion message."""
        logs = Path(self.env["AIRFLOW_HOME"]) / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        parts = [
            f"--- {p.relative_to(logs)}\n{p.read_text(errors='replace')[-chars:]}"
            for p in sorted(logs.rglob("*.log"))
        ]
        return "\n".join(parts) or f"no task logs under {logs}"


@pytest.fixture(scope="package")
def airflow_db():
    """The metadata database of the test session's Airflow home (tests/dags/__init__.py)."""
    from airflow.utils.db import initdb

    initdb()


@pytest.fixture(scope="package")
def tokenizer_dir(tmp_path_factory) -> str:
    """A small byte-level BPE trained on the sample's ground truth (``make demo``'s): nothing downloaded."""
    return airflow_demo.sample_tokenizer(tmp_path_factory.mktemp("tokenizer"), vocab_size=800)


# Module scope: only test_airflow_server.py uses it, and it stops when that module is done, so four idle
# servers do not poll the CPU through the rest of tests/dags/ (a pytest-xdist worker runs other files here).
@pytest.fixture(scope="module")
def airflow_server(tmp_path_factory) -> AirflowServer:
    """API server, scheduler, DAG processor and triggerer on 127.0.0.1 (``scripts/airflow_demo.py``), their
    Airflow home, runs and tokenizer in a temporary folder."""
    home = tmp_path_factory.mktemp("airflow-server")
    tokenizer = airflow_demo.sample_tokenizer(home / "tokenizer", vocab_size=800)
    env = airflow_demo.airflow_environment(
        {
            "AIRFLOW_HOME": str(home / "airflow"),
            "DRIPPER_AIRFLOW_PORT": str(free_port()),
            "DRIPPER_RUN_ROOT": str(home / "runs"),
            "DRIPPER_TOKENIZER": tokenizer,
            "DRIPPER_DASK_WORKERS": "0",
            "DRIPPER_EXTRACT_WORKERS": "0",
            # datatrove in the refine task's process: on the sample, spawning a process per pass costs more
            # than the pass (imports); the environment's default, as a small deployment would set it.
            "DRIPPER_REFINE_WORKERS": "1",
            "DRIPPER_LABELER": "trafilatura",
        }
    )
    try:
        api = airflow_demo.start_airflow(env)
        yield AirflowServer(env=env, api=api, password=airflow_demo.admin_password(env))
    finally:
        airflow_demo.stop_servers(env)
