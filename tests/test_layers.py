"""The package's shape: one top-level import package, layers that import only downward, no import cycle,
and the Airflow provider that the distribution announces."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _import_graph():
    spec = importlib.util.spec_from_file_location("import_graph", REPO / "scripts" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_layers_import_only_downward_and_no_module_cycle():
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "import_graph.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "# import cycles between modules: 0" in done.stdout
    assert "# imports of a later layer: 0" in done.stdout


def test_every_package_module_has_a_layer():
    graph = _import_graph()
    layered = [name for layer in graph.LAYERS for name in layer]
    for module in graph.module_files(["dripper"]):
        if module == "dripper":
            continue
        assert any(module == name or module.startswith(name + ".") for name in layered), module


def test_the_graph_finds_a_cycle_and_an_upward_import(tmp_path, monkeypatch):
    """The checker itself: an upward import and a cycle in a made-up package are both reported, type-only
    imports (``if TYPE_CHECKING:``) included."""
    graph = _import_graph()
    package = tmp_path / "dripper"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "low" / "a.py").write_text("from dripper.low import b\n")
    (package / "low" / "b.py").write_text(
        "def f():\n    from dripper.low import a\n    from dripper import high\n"
    )
    (package / "low" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import dripper.high\n"
    )
    (package / "high.py").write_text("import dripper.low.a\n")
    # A cycle inside one package whose one side imports only for annotations.
    (package / "low" / "d.py").write_text("from dripper.low.e import NAMES\n")
    (package / "low" / "e.py").write_text(
        "from __future__ import annotations\nimport typing\n"
        "if typing.TYPE_CHECKING:\n    from dripper.low.d import Thing\nNAMES = ()\n"
    )
    monkeypatch.setattr(graph, "REPO", tmp_path)
    monkeypatch.setattr(graph, "LAYERS", (("dripper.low",), ("dripper.high",)))
    edges = graph.graph(["dripper"])
    assert edges["dripper.low.c"] == {"dripper.high"}  # under TYPE_CHECKING: counted all the same
    assert graph.cycles(edges) == [
        ["dripper.high", "dripper.low.a", "dripper.low.b"],
        ["dripper.low.d", "dripper.low.e"],
    ]
    assert ("dripper.low.b", "dripper.high") in graph.upward_imports(edges)
    assert ("dripper.low.c", "dripper.high") in graph.upward_imports(edges)
    monkeypatch.chdir(tmp_path)
    assert graph.main(["--check"]) == 1


def test_the_distribution_installs_one_top_level_package():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["packages"]["find"]["include"] == ["dripper*"]


@pytest.mark.parametrize("name", ["dripper_core", "eval", "operators", "pretrain"])
def test_the_old_top_level_packages_are_gone(name):
    # Run from outside the checkout: the repository folder itself is on sys.path when run from it.
    done = subprocess.run(
        [sys.executable, "-c", f"import {name}"], capture_output=True, text=True, cwd="/", timeout=60
    )
    assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr, (name, done.stderr[-500:])


def test_airflow_lists_the_provider(tmp_path):
    airflow = Path(sys.executable).with_name("airflow")
    if not airflow.exists():
        pytest.skip("Airflow is not installed in this environment (the [airflow] extra)")
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    done = subprocess.run(
        [str(airflow), "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dripper-platform" in done.stdout, done.stdout[-2000:]
