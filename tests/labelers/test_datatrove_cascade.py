"""The second datatrove recipe: the FineWeb-shaped pipeline with a cascade spec, the CPU labeler on every page
and the least sure share routed to an LM behind the ``openai`` labeler (the tiny model served by vLLM here;
the server fixture lives in this package, so the test does too)."""

from __future__ import annotations

import json

from dripper.datatrove import fineweb_pipeline, pipeline_accounting
from tests.datatrove.test_recipes import SAMPLE, written
from tests.labelers.conftest import TEST_CONTEXT

WARC = "**/*.11/warc/*-00000.warc.gz"  # one file of the sample (47 pages): a tenth of them go to the LM


def test_cascade_recipe_routes_a_share_to_the_served_lm(vllm_server, tmp_path):
    from datatrove.executor import LocalPipelineExecutor

    spec = {
        "name": "casc",
        "labeler": "cpu",
        "route": {
            "labeler": "openai",
            "options": {
                "base_url": vllm_server.base_url,
                "model": vllm_server.model,
                "max_model_len": TEST_CONTEXT,
                "max_concurrency": 8,
            },
            "share": 0.1,
        },
    }
    pipeline = fineweb_pipeline(
        str(SAMPLE / "crawl-data"), str(tmp_path / "out"), spec, glob_pattern=WARC, filters=()
    )
    LocalPipelineExecutor(pipeline, tasks=1, workers=1, logging_dir=str(tmp_path / "logs")).run()
    accounting = pipeline_accounting(str(tmp_path / "logs" / "stats.json"))
    assert accounting["balanced"], accounting
    stats = next(
        entry["stats"]
        for entry in json.loads((tmp_path / "logs" / "stats.json").read_text())
        if "Dripper" in entry["name"] and "WARC" not in entry["name"]
    )
    total = lambda v: v["total"] if isinstance(v, dict) else v  # noqa: E731
    routed = total(stats["routed"])
    labelled = total(stats.get("extractor:dripper:cpu", 0)) + total(stats.get("extractor:dripper:openai", 0))
    assert 0 < routed <= round(0.1 * labelled) + 1
    documents = written(tmp_path / "out")
    assert any(d["metadata"]["extractor"] == "dripper:openai" for d in documents)
    assert {d["metadata"]["extractor_spec"] for d in documents} == {"casc"}
