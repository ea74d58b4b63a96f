"""The real pipeline scored on WebMainBench-schema input: the paper's table with one command.

The WebMainBench sample pages of the bundled sample (those of ``../shared/data/dev.jsonl.gz``) are written in
WebMainBench's own JSONL schema (``track_id``, ``html``, ``convert_main_content``, ``meta``), then scored by
``dripper.eval.extraction`` with our pipeline and Trafilatura, grouped by ``meta.level`` as the paper reports.
"""

from __future__ import annotations

import json

import pytest

from dripper.eval.extraction import BenchmarkConfig, run_benchmark

LEVELS = ("simple", "mid", "hard")


@pytest.fixture
def webmainbench_jsonl(tmp_path, sample_records):
    records = [r for r in sample_records if r["source"] == "webmainbench_sample"]
    assert records, "the bundled sample carries WebMainBench pages"
    path = tmp_path / "webmainbench.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for index, record in enumerate(records):
            handle.write(
                json.dumps(
                    {
                        "track_id": record["id"],
                        "url": record["url"],
                        "html": record["html"],
                        "convert_main_content": record["ground_truth_text"],
                        "groundtruth_content": None,
                        "meta": {
                            "language": record["language"],
                            "level": LEVELS[index % 3],
                            "style": "Article",
                        },
                    }
                )
                + "\n"
            )
    return path, len(records)


def test_pipeline_scores_webmainbench_schema_by_level(webmainbench_jsonl):
    path, count = webmainbench_jsonl
    config = BenchmarkConfig(data=[path], extractors=["dripper:oracle", "trafilatura"], group_by=("level",))
    summary = run_benchmark(config, progress=False)
    oracle = summary["rows"]["dripper:oracle/md"]
    assert oracle["all"]["pages"] == count
    assert oracle["all"]["full_text_pages"] == count
    assert set(oracle["groups"]["level"]) == set(LEVELS[: min(count, 3)])
    # The oracle is the ceiling of our pipeline: it must beat Trafilatura on the same pages.
    assert oracle["all"]["rouge5_f1_norm"] > summary["rows"]["trafilatura"]["all"]["rouge5_f1_norm"]
    assert oracle["all"]["rouge5_f1_norm"] > 0.9
