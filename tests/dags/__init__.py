"""Tests of the DAG files. Airflow gets a home of its own for the test session (a temporary folder with a
SQLite database), set here before anything imports Airflow, so a developer's Airflow is never touched."""

from __future__ import annotations

import atexit
import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DAGS_DIR = REPO / "dags"
SAMPLE = REPO / "data" / "sample"
DAG_IDS = ("cc_snapshot_refresh", "corpus_build", "extraction_benchmark", "extractor_ablation")

#: Pages the WARC reader keeps per sample file (data/sample/README.md), in the sample listing's order.
PAGES_PER_FILE = {"1741910000000.11/warc/CC-MAIN-20250314001422-20250314031422-00000": 47,
                  "1741910000000.11/warc/CC-MAIN-20250314001422-20250314031422-00001": 50,
                  "1741910000000.42/warc/CC-MAIN-20250314031422-20250314061422-00000": 50,
                  "1741910000000.42/warc/CC-MAIN-20250314031422-20250314061422-00001": 49}  # fmt: skip


def expected_pages(warc_files: list[str]) -> int:
    """Pages the WARC reader keeps from these sample files (by :data:`PAGES_PER_FILE`)."""
    return sum(n for name, n in PAGES_PER_FILE.items() if any(name in path for path in warc_files))


def small_crawl(base: Path, pages: int, crawl_id: str = "CC-MAIN-SMALL") -> Path:
    """A crawl folder laid out like Common Crawl with one WARC file of the sample's first ``pages`` HTML
    responses (their request and metadata records too): for runs whose LM labelling is slow on CPU."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.warcwriter import WARCWriter

    listing = [
        line
        for line in gzip.decompress((SAMPLE / "crawl-data" / "CC-MAIN-SAMPLE" / "warc.paths.gz").read_bytes())
        .decode()
        .split()
    ]
    relative = f"crawl-data/{crawl_id}/segments/0/warc/{crawl_id}-00000.warc.gz"
    target = base / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    responses = 0
    with (SAMPLE / listing[0]).open("rb") as source, target.open("wb") as out:
        writer = WARCWriter(out, gzip=True)
        for record in ArchiveIterator(source):
            if record.rec_type == "response":
                if responses == pages:
                    break
                responses += 1
            writer.write_record(record)
    (base / "crawl-data" / crawl_id / "warc.paths.gz").write_bytes(gzip.compress((relative + "\n").encode()))
    return base


def dag_run_xcoms(dag_run) -> dict[tuple[str, int], object]:
    """``{(task_id, map_index): return value}`` of a finished ``dag.test()`` run."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter_by(
            dag_id=dag_run.dag_id, run_id=dag_run.run_id, key="return_value"
        )
        return {(row.task_id, row.map_index): xcom_value(row.value) for row in rows}


def task_seconds(dag_run) -> str:
    """Each task instance's run time, longest first (printed by the long DAG tests: where their time goes)."""
    rows = [
        (ti.duration or 0.0, ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]")
        for ti in dag_run.get_task_instances()
    ]
    return ", ".join(f"{name} {seconds:.0f}s" for seconds, name in sorted(rows, reverse=True))


def xcom_value(raw):
    import json

    return json.loads(raw) if isinstance(raw, str | bytes) else raw


def airflow_test_environment(home: Path) -> dict[str, str]:
    """Airflow settings for tests: this repository's DAGs, SQLite under ``home``, the bundled sample."""
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_DIR),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "DRIPPER_CRAWL_INDEX": str(SAMPLE / "collinfo.json"),
        "DRIPPER_CRAWL_BASE": str(SAMPLE),
        "DRIPPER_CRAWL_ID": "CC-MAIN-SAMPLE",
        "DRIPPER_RUN_ROOT": str(home / "runs"),
    }


if "airflow" not in sys.modules:
    _HOME = Path(tempfile.mkdtemp(prefix="dripper-airflow-tests-"))
    atexit.register(shutil.rmtree, _HOME, True)
    for _key in [k for k in os.environ if k.startswith("AIRFLOW__") or k.startswith("AIRFLOW_CONN_")]:
        del os.environ[_key]
    os.environ.update(airflow_test_environment(_HOME))
# DAG files import their shared module as Airflow's DAG processor does: from the DAGs folder.
if str(DAGS_DIR) not in sys.path:
    sys.path.insert(0, str(DAGS_DIR))
