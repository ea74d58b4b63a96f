"""corpus_build end to end with ``dag.test()`` on the bundled sample snapshot: WARC files → simplified →
extracted → corpus → tokens, then a second run that resumes (everything already done is skipped)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.dags import DAGS_DIR, SAMPLE, dag_run_xcoms, expected_pages, xcom_value

pytestmark = pytest.mark.slow


@pytest.fixture
def corpus_build():
    """The DAG parsed afresh for each test: ``dag.test`` keeps a run's trigger values in the DAG's params."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(DAGS_DIR / "corpus_build.py"))
    assert bag.import_errors == {}
    return bag.dags["corpus_build"]


def test_corpus_build_end_to_end_then_resumes(airflow_db, corpus_build, tokenizer_dir, tmp_path):
    conf = {
        "crawl_id": "CC-MAIN-SAMPLE",
        "crawl_base": str(SAMPLE),
        "warc_count": 2,
        "warcs_per_task": 1,  # two simplify tasks: the mapping is exercised
        "seed": 0,
        "extractor": "trafilatura",
        "extract_one_pass": "never",  # the split (a GPU labeler's path); the one pass is tested below
        "storage_root": str(tmp_path / "runs"),
        "simplify_workers": 0,
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

    xcoms = {key: xcom_value(value) for key, value in dag_run_xcoms(first).items()}
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
    again = {key: xcom_value(value) for key, value in dag_run_xcoms(second).items()}
    assert all(again[("simplify", i)]["written"] == 0 for i in (0, 1))
    assert again[("extract", -1)]["written"] == 0
    assert again[("extract", -1)]["skipped"] == len(plan["shards"])
    assert again[("refine", -1)]["documents_out"] == documents
    assert again[("tokenize", -1)]["documents"] == documents


def _cli(capsys, *argv: str) -> dict:
    from dripper.cli import main

    code = main(["run", *argv, "--quiet"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out[out.rfind("\n{") + 1 :])


def test_the_cli_and_the_dag_continue_each_others_runs(
    airflow_db, corpus_build, tokenizer_dir, tmp_path, capsys
):
    """One run layout (dripper.layout): a selection simplified and extracted with ``dripper run`` is
    picked up by corpus_build (nothing recomputed), and the DAG's run is continued by ``dripper run``."""
    from dripper.layout import RunLayout

    storage = tmp_path / "runs"
    layout = RunLayout(str(storage / "runs" / "CC-MAIN-SAMPLE" / "n1-seed0"))  # the DAG's selection folder
    _cli(capsys, "simplify", "--input", f"snapshot:CC-MAIN-SAMPLE@{SAMPLE}", "--warc-count", "1", "--seed", "0",
         "--output", layout.root, "--workers", "0")  # fmt: skip
    extracted = _cli(capsys, "extract", "--input", layout.root, "--extractor", "trafilatura")
    assert extracted["written"] == 1 and extracted["root"] == layout.extractor("trafilatura").root

    conf = {
        "crawl_id": "CC-MAIN-SAMPLE",
        "crawl_base": str(SAMPLE),
        "warc_count": 1,
        "seed": 0,
        "extractor": "trafilatura",
        "storage_root": str(storage),
        "simplify_workers": 0,
        "extract_workers": 0,
        "refine_tasks": 1,
        "refine_workers": 1,
        "tokenizer": tokenizer_dir,
    }
    run = corpus_build.test(run_conf=conf)
    assert run.state == "success"
    xcoms = dag_run_xcoms(run)
    assert xcoms[("select_warcs", -1)][0]["selection_root"] == layout.root
    assert (
        xcoms[("simplify", 0)]["written"] == 0 and xcoms[("simplify", 0)]["skipped"] == 1
    )  # the CLI's shard
    assert (
        xcoms[("extract", -1)]["written"] == 0 and xcoms[("extract", -1)]["output_root"] == extracted["root"]
    )
    documents = xcoms[("refine", -1)]["documents_out"]

    # And the reverse: the CLI finds the DAG's refinement and tokens done.
    refined = _cli(capsys, "refine", "--input", layout.root, "--extractor", "trafilatura", "--tasks", "1",
                   "--workers", "1")  # fmt: skip
    assert refined["documents_out"] == documents
    tokens = _cli(
        capsys, "tokenize", "--input", layout.root, "--extractor", "trafilatura", "--tokenizer", tokenizer_dir
    )
    assert tokens["documents"] == xcoms[("tokenize", -1)]["documents"]
    again = _cli(capsys, "extract", "--input", layout.root, "--extractor", "trafilatura")
    assert (again["written"], again["skipped"]) == (0, 1)


def test_the_simplify_fields_of_the_form_reach_the_simplify_tasks(airflow_db, corpus_build, tmp_path):
    """``warcs_per_shard``, ``simplify_max_page_bytes`` and ``simplify_max_payload_bytes`` from the trigger
    conf: one shard of two WARC files, large pages marked too_large, large payloads dropped unread."""
    from tests.stages.conftest import read_stage

    conf = {
        "crawl_id": "CC-MAIN-SAMPLE",
        "crawl_base": str(SAMPLE),
        "warc_count": 2,
        "warcs_per_shard": 2,
        "extractor": "trafilatura",
        "extract_one_pass": "never",
        "storage_root": str(tmp_path / "runs"),
        "simplify_workers": 0,
        "simplify_max_page_bytes": 30_000,
        "simplify_max_payload_bytes": 200_000,
        "extract_workers": 0,
        "refine_tasks": 1,
        "refine_workers": 1,
    }
    run = corpus_build.test(run_conf=conf)
    assert run.state == "success"
    selection = Path(dag_run_xcoms(run)[("select_warcs", -1)][0]["selection_root"])
    assert selection.name == "n2-seed0-w2"
    plan = json.loads((selection / "_selection.json").read_text())
    assert plan["warcs_per_shard"] == 2 and len(plan["shards"]) == 1 and len(plan["shards"][0]) == 2
    rows = read_stage(str(selection), "simplified")
    assert rows and all(row["payload_bytes"] <= 200_000 for row in rows)
    large = [row for row in rows if (row.get("status") or "").startswith("too_large")]
    assert large and all(row["simplified_html"] is None for row in large)  # an input problem: not labelled
    summary = json.loads((selection / "_run_summary.json").read_text())
    assert summary["stages"]["simplified"]["dropped"].get("too_large", 0) > 0  # payloads over 200 kB


def test_corpus_build_in_one_pass_gives_the_markdown_of_dripper_extract(airflow_db, corpus_build, tmp_path):
    """An extractor that needs no GPU reads the selection's WARC files in one pass: the simplify tasks are
    skipped, no simplified/ is written, and the Markdown is what ``dripper extract`` and ``dripper run
    extract`` give on the same pages."""
    import gzip

    from dripper.cli import main as cli_main
    from dripper.decode import decode_html
    from dripper.io.warc import iter_warc_pages
    from tests.stages.conftest import comparable, read_stage

    conf = {
        "crawl_id": "CC-MAIN-SAMPLE",
        "crawl_base": str(SAMPLE),
        "warc_count": 1,
        "seed": 0,
        "extractor": "cpu",
        "storage_root": str(tmp_path / "runs"),
        "simplify_workers": 0,
        "extract_workers": 0,
        "refine_tasks": 1,
        "refine_workers": 1,
    }
    run = corpus_build.test(run_conf=conf)
    assert run.state == "success"
    states = {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    assert states[("simplify", 0)] == "skipped" and states[("record_simplify", -1)] == "skipped"
    assert states[("extract", -1)] == "success" and states[("refine", -1)] == "success"
    xcoms = dag_run_xcoms(run)
    assert xcoms[("extract", -1)]["one_pass"] is True
    selection = Path(xcoms[("select_warcs", -1)][0]["selection_root"])
    assert not (selection / "simplified").exists()
    (warc,) = json.loads((selection / "_selection.json").read_text())["warc_files"]
    built = comparable(read_stage(str(selection / "extractors" / "cpu"), "extracted"))
    assert len(built) == expected_pages([warc])

    pages = tmp_path / "pages.jsonl.gz"
    with gzip.open(pages, "wt") as out:
        for page in iter_warc_pages(warc):
            html = decode_html(page.payload, page.http_charset).text
            out.write(json.dumps({"id": page.doc_id, "url": page.url, "html": html}) + "\n")
    assert (
        cli_main(
            ["extract", "--input", str(pages), "--output", str(tmp_path / "out.jsonl"), "--extractor", "cpu"]
        )
        == 0
    )
    direct = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert {record["id"]: record["markdown"] for record in direct} == {
        k: v["markdown"] for k, v in built.items()
    }
    assert cli_main(["run", "extract", "--input", warc, "--output", str(tmp_path / "cli"), "--extractor", "cpu",
                     "--workers", "0", "--quiet"]) == 0  # fmt: skip
    assert comparable(read_stage(str(tmp_path / "cli" / "extractors" / "cpu"), "extracted")) == built
