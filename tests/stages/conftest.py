"""Fixtures of the data-plane tests: the bundled sample snapshot, one uninterrupted reference run of both
stages (the outputs every other run is compared with), and a bucket holding the sample on the session's S3
server (``moto_server`` and ``s3_options`` are in tests/conftest.py)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from dripper.config.simplify import SimplifyStageConfig
from dripper.labelers.base import BlockLabeler, Labels

REPO = Path(__file__).resolve().parents[2]
SAMPLE_BASE = REPO / "data" / "sample"
SAMPLE_SNAPSHOT = f"snapshot:CC-MAIN-SAMPLE@{SAMPLE_BASE}"
MANIFEST = json.loads((SAMPLE_BASE / "manifest.json").read_text())
SAMPLE_PAGES = 196
SAMPLE_RECORDS = 622
#: The import path of the test labeler, for runs in other processes (CLI subprocesses, Dask workers).
LONG_BLOCKS = "tests.stages.conftest:LongBlocks"


class LongBlocks(BlockLabeler):
    """Main = blocks of at least ``min_words`` words: deterministic, fast, and exercises reconstruction and
    Markdown conversion like a real labeler (no model, no ground truth needed)."""

    name = "long-blocks"

    def __init__(self, min_words: int = 8) -> None:
        super().__init__()
        self.min_words = min_words
        self.batch_sizes: list[int] = []

    def label_batch(self, requests):
        self.batch_sizes.append(len(requests))
        return [
            Labels([len(block.text.split()) >= self.min_words for block in request.simplified.blocks])
            for request in requests
        ]


# -- reading and comparing stage outputs -------------------------------------------------------------------

#: Columns that hold timings (differ between any two runs).
TIMING_COLUMNS = {"simplify_seconds"}


def read_stage(root: str, stage: str, storage_options: dict | None = None) -> list[dict]:
    """All rows of the finished shards of ``{root}/{stage}``, in shard order."""
    import pyarrow.parquet as pq

    from dripper.io.storage import filesystem_for
    from dripper.stages.shards import done_shard_paths

    rows = []
    for path in done_shard_paths(f"{root}/{stage}", storage_options):
        fs, fs_path = filesystem_for(path, storage_options)
        with fs.open(fs_path, "rb") as f:
            rows += pq.read_table(f).to_pylist()
    return rows


def comparable(rows: list[dict], drop: tuple[str, ...] = ()) -> dict[str, dict]:
    """Rows by doc_id without timings (and without ``drop`` columns); asserts doc_ids are unique."""
    by_id = {}
    for row in rows:
        row = {k: v for k, v in row.items() if k not in TIMING_COLUMNS and k not in drop}
        if "stats" in row and isinstance(row["stats"], str):
            stats = json.loads(row["stats"])
            row["stats"] = {k: v for k, v in stats.items() if not k.endswith("seconds")}
        assert row["doc_id"] not in by_id, f"duplicate doc_id {row['doc_id']}"
        by_id[row["doc_id"]] = row
    return by_id


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory) -> dict:
    """The sample snapshot through both stages, in-process, uninterrupted: the expected outputs."""
    from dripper.stages.extract import extract_stage
    from dripper.stages.simplify import simplify_stage

    root = str(tmp_path_factory.mktemp("reference") / "run")
    simplify_report = simplify_stage(SAMPLE_SNAPSHOT, root, SimplifyStageConfig(workers=0), progress=False)
    labeler = LongBlocks()
    extract_report = extract_stage(root, labeler=labeler, progress=False)
    return {
        "root": root,
        "simplify_report": simplify_report,
        "extract_report": extract_report,
        "labeler": labeler,
        "simplified": read_stage(root, "simplified"),
        "extracted": read_stage(root, "extracted"),
    }


# -- S3 on loopback ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_bucket(s3_filesystem) -> str:
    """A fresh bucket on the session's moto server (tests/conftest.py) holding the sample snapshot under
    ``sample/`` (laid out like Common Crawl)."""
    fs = s3_filesystem
    bucket = f"dripper-test-{uuid.uuid4().hex[:8]}"
    fs.mkdir(bucket, region_name="eu-west-1")
    crawl = SAMPLE_BASE / "crawl-data"
    for path in sorted(crawl.rglob("*")):
        if path.is_file():
            fs.put_file(str(path), f"{bucket}/sample/{path.relative_to(SAMPLE_BASE).as_posix()}")
    return bucket


def subprocess_env() -> dict:
    """Environment for CLI subprocesses: the repository importable (tests' labelers included)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env
