"""The ``research`` package's rules: each study runs as ``python -m research.<name>`` from the checkout,
edits no ``sys.path`` and imports no other module's private names (nor ``bench/`` scripts)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STUDIES = sorted(path.stem for path in (REPO / "research").glob("*.py") if path.stem != "__init__")


def _tree(name: str) -> ast.Module:
    return ast.parse((REPO / "research" / f"{name}.py").read_text(encoding="utf-8"))


def test_the_studies_are_there():
    assert {"cpu_labeler_quality", "labeler_losses", "labeler_sweep", "oracle_ceiling", "page_gate"} <= set(
        STUDIES
    )


@pytest.mark.parametrize("name", STUDIES)
def test_a_study_edits_no_sys_path(name):
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.Attribute) and node.attr == "path":
            assert not (isinstance(node.value, ast.Name) and node.value.id == "sys"), (name, node.lineno)


@pytest.mark.parametrize("name", STUDIES)
def test_a_study_imports_only_public_names_of_packages(name):
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            assert node.level == 0 and node.module, (name, node.lineno)
            top = node.module.split(".")[0]
            assert top not in {"bench", *STUDIES}, f"{name}:{node.lineno}: import research.{node.module}"
            private = [alias.name for alias in node.names if alias.name.startswith("_")]
            assert not private, f"{name}:{node.lineno}: private names {private} of {node.module}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name.split(".")[0] not in {"bench", *STUDIES}, (name, node.lineno)


@pytest.mark.parametrize("name", STUDIES)
def test_a_study_runs_as_a_module_from_the_checkout(name):
    done = subprocess.run(
        [sys.executable, "-m", f"research.{name}", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
