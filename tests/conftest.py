"""Shared fixtures: where the bundled sample and the shared development data are."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE_PAGES = REPO / "data" / "sample" / "pages.jsonl.gz"


def shared_data_dir() -> Path | None:
    """``$DRIPPER_SHARED_DATA`` or ``../shared/data`` beside the repository, if it holds the dev files."""
    candidate = Path(os.environ.get("DRIPPER_SHARED_DATA", REPO.parent / "shared" / "data"))
    return candidate if (candidate / "dev.jsonl.gz").exists() else None


def read_records(path: Path, limit: int | None = None) -> list[dict]:
    records = []
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            records.append(json.loads(line))
            if limit is not None and len(records) >= limit:
                break
    return records


@pytest.fixture(scope="session")
def sample_records() -> list[dict]:
    """The ~60 real pages with ground truth bundled in the repository."""
    return read_records(SAMPLE_PAGES)


@pytest.fixture(scope="session")
def dev_records() -> list[dict]:
    """All 352 pages of ``../shared/data/dev.jsonl.gz`` (skips where the shared data is absent)."""
    directory = shared_data_dir()
    if directory is None:
        pytest.skip("../shared/data is not available")
    return read_records(directory / "dev.jsonl.gz")
