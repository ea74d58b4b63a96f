"""The FineWeb-shaped datatrove pipeline on the four bundled WARCs under datatrove's LocalPipelineExecutor:
every record is a written document or a drop counted under one step and one reason. (The same pipeline under
SlurmPipelineExecutor: tests/cluster/test_datatrove_slurm.py.)"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from dripper.datatrove import fineweb_pipeline, pipeline_accounting

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
MANIFEST = json.loads((SAMPLE / "manifest.json").read_text())


def written(folder: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(folder.glob("*.jsonl.gz")) for line in gzip.open(path, "rt")]


def records_in_sample() -> int:
    """WARC records plus unreadable regions, as the manifest counts them."""
    return sum(sum(entry["expected"].values()) for entry in MANIFEST["files"].values())


def test_fineweb_pipeline_accounts_for_every_record(tmp_path):
    from datatrove.executor import LocalPipelineExecutor

    pipeline = fineweb_pipeline(
        str(SAMPLE / "crawl-data"), str(tmp_path / "out"), "cpu", exclusions=str(tmp_path / "excluded")
    )
    LocalPipelineExecutor(pipeline, tasks=2, workers=1, logging_dir=str(tmp_path / "logs")).run()
    accounting = pipeline_accounting(str(tmp_path / "logs" / "stats.json"))
    assert accounting["balanced"], accounting
    assert accounting["records"] == records_in_sample()
    documents = written(tmp_path / "out")
    assert len(documents) == accounting["written"] > 50
    assert {d["metadata"]["extractor"] for d in documents} <= {"dripper:cpu", "trafilatura"}
    assert all(d["metadata"]["url"] and d["text"].strip() for d in documents)
    reader = next(v for k, v in accounting["dropped"].items() if "Dripper WARC" in k)
    # truncated records forwarded, flagged, as datatrove's WarcReader forwards them
    assert reader["bad_gzip_member"] == 1 and "truncated" not in reader
    # Each filter wrote what it dropped, with its reason, where the exclusions go.
    language = written(tmp_path / "excluded" / "language")
    step = next(v for k, v in accounting["dropped"].items() if "Language" in k)
    assert len(language) == sum(step.values())
