"""corpus_build end to end with ``dag.test()`` on the bundled sample snapshot: WARC files → simplified →
extracted → corpus → tokens, then a second run that resumes (everything already done is skipped)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import airflow_demo
from tests.dags import DAGS_DIR, SAMPLE, expected_pages

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def airflow_db():
    """The metadata database of the test session's Airflow home (tests/dags/__init__.py)."""
    from airflow.utils.db import initdb

    initdb()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> str:
    """A small byte-level BPE trained on the sample's ground truth (``make demo``'s): nothing downloaded."""
    return airflow_demo.sample_tokenizer(tmp_path_factory.mktemp("tokenizer"), vocab_size=800)


@pytest.fixture(scope="module")
def corpus_build():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(DAGS_DIR / "corpus_build.py"))
    assert bag.import_errors == {}
    return bag.dags["corpus_build"]


def _xcoms(dag_run) -> dict[tuple[str, int], object]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter_by(
            dag_id=dag_run.dag_id, run_id=dag_run.run_id, key="return_value"
        )
        return {(row.task_id, row.map_index): row.value for row in rows}


def _value(raw):
    return json.loads(raw) if isinstance(raw, str | bytes) else raw


def test_corpus_build_end_to_end_then_resumes(airflow_db, corpus_build, tokenizer_dir, tmp_path):
    conf = {
        "crawl_id": "CC-MAIN-SAMPLE",
        "crawl_base": str(SAMPLE),
        "warc_count": 2,
        "warcs_per_task": 1,  # two simplify tasks: the mapping is exercised
        "seed": 0,
        "labeler": "trafilatura",
        "storage_root": str(tmp_path / "runs"),
        "dask_workers": 0,
        "extract_workers": 0,
        "refine_tasks": 2,
        "refine_workers": 1,
        "tokenizer": tokenizer_dir,
    }
    first = corpus_build.test(run_conf=conf)
    assert first.state == "success"
    states = {(ti.task_id, ti.map_index): ti.state for ti in first.get_task_instances()}
    assert all(state == "success" for state in states.values()), states
    assert sorted(i for task, i in states if task == "simplify") == [0, 1]

    xcoms = {key: _value(value) for key, value in _xcoms(first).items()}
    batches = xcoms[("select_warcs", -1)]
    selection_root = Path(batches[0]["selection_root"])
    assert selection_root == tmp_path / "runs" / "runs" / "CC-MAIN-SAMPLE" / "n2-seed0"
    plan = json.loads((selection_root / "_selection.json").read_text())
    pages = expected_pages(plan["warc_files"])
    published = xcoms[("publish_corpus", -1)]
    run_root = Path(published["run_root"])
    assert run_root == selection_root / "extractors" / "trafilatura"
    summary = json.loads(Path(published["build_summary"]).read_text())
    assert summary["stages"]["simplified"]["pages_out"] == pages
    assert summary["stages"]["simplified"]["complete"] is True
    assert summary["stages"]["extracted"]["pages_out"] == pages
    documents = summary["refine"]["documents_out"]
    assert 0 < documents < pages  # the filters and dedup drop some pages
    assert sorted(p.name for p in (run_root / "corpus").glob("*.parquet"))
    tokens = summary["tokens_summary"]
    assert tokens["documents"] == documents  # one token sequence per corpus document
    assert tokens["tokens"] > documents
    assert published["documents"] == documents and published["token_count"] == tokens["tokens"]

    # The same parameters again: every stage finds its work done.
    second = corpus_build.test(run_conf=conf)
    assert second.state == "success"
    again = {key: _value(value) for key, value in _xcoms(second).items()}
    assert all(again[("simplify", i)]["written"] == 0 for i in (0, 1))
    assert again[("extract", -1)]["written"] == 0
    assert again[("extract", -1)]["skipped"] == len(plan["shards"])
    assert again[("refine", -1)]["documents_out"] == documents
    assert again[("tokenize", -1)]["documents"] == documents
