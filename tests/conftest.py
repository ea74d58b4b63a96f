"""Shared fixtures: where the bundled sample and the shared development data are, and an S3 server (moto)
on 127.0.0.1, started once per test session."""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

# Airflow's test home (tests/dags/__init__.py) must be set before any test module imports Airflow: the
# operator tests under tests/cluster/ and tests/airflow/ are collected before tests/dags/.
import tests.dags  # noqa: F401, E402

REPO = Path(__file__).resolve().parents[1]
SAMPLE_PAGES = REPO / "data" / "sample" / "pages.jsonl.gz"

# How the suite splits over pytest-xdist's workers: the hooks live in tests/xdist_groups.py.
from tests.xdist_groups import (  # noqa: E402, F401
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_logreport,
    pytest_sessionfinish,
    pytest_xdist_make_scheduler,
    pytest_xdist_node_collection_finished,
    running_under_xdist,
    xdist_group,
)


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


# -- S3 on loopback ----------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def moto_server():
    """A moto S3 server in its own process on 127.0.0.1; yields its endpoint URL."""
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).read()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start on {endpoint}") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="session")
def s3_options(moto_server) -> dict:
    """fsspec options for the moto server (explicit: nothing read from or written to the environment).

    The region is not us-east-1: creating a bucket there through s3fs fails against moto."""
    return {
        "endpoint_url": moto_server,
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"region_name": "eu-west-1"},
    }


@pytest.fixture(scope="session")
def s3_filesystem(s3_options):
    """An ``s3fs.S3FileSystem`` on the moto server; make buckets with ``mkdir(name, region_name="eu-west-1")``."""
    import s3fs

    return s3fs.S3FileSystem(
        key=s3_options["key"],
        secret=s3_options["secret"],
        client_kwargs={**s3_options["client_kwargs"], "endpoint_url": s3_options["endpoint_url"]},
    )


def orphaned_vllm_processes() -> set[int]:
    """Live vLLM engine processes whose parent is gone (reparented to init)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            name = (stat.parent / "cmdline").read_bytes().split(b"\0")[0]
        except (OSError, IndexError):
            continue
        state, parent = fields[0], int(fields[1])
        if name.startswith(b"VLLM::") and parent == 1 and state != "Z":
            found.add(int(stat.parent.name))
    return found
