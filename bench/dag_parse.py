"""DAG-file parse time: each file of ``dags/`` as the DAG processor parses it, against the issue's 1 s target
and against a one-task reference DAG parsed the same way in the same run.

Usage: ``.venv/bin/python bench/dag_parse.py [--rounds R]``

Each parse runs in a fresh interpreter that has already imported ``airflow.sdk`` (as the DAG processor has),
so the time is the DAG file's own: its imports (``_common``, ``_params``, ``dripper.airflow``) and building
the DAG. The median of ``--rounds`` parses per file is printed with its ratio to the reference and to the
target, and the heavy libraries (torch, vLLM, datatrove, pandas, Dask, pyarrow, …) a file pulled in, which
must be none. ``tests/dags/test_dagbag.py`` asserts what makes a parse fast, one parse per file: no heavy
import and nothing beyond :data:`PARSE_TIME_PACKAGES`; the 1 s target is judged here only (a test that
times itself fails whenever the machine is busy).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DAGS_DIR = REPO / "dags"
TARGET_SECONDS = 1.0
HEAVY_MODULES = frozenset(
    {"torch", "vllm", "datatrove", "pandas", "dask", "distributed", "pyarrow", "transformers", "lxml"}
)


#: Modules of the package a DAG file may import at parse time: the operators, the stage configs and the
#: few standard-library-only modules they read constants and job specs from.
LIGHT_PREFIXES = ("dripper.airflow", "dripper.config")
LIGHT_MODULES = frozenset(
    {
        "dripper.hints",
        "dripper.lazy",
        "dripper.io",
        "dripper.io.warc",
        "dripper.pretrain",
        "dripper.pretrain.config",
        "dripper.pretrain.slurm",
    }
)


#: Third-party top-level packages a DAG file may pull in at parse time: Airflow and what Airflow itself loads
#: while a DAG is built (SQLAlchemy, croniter, packaging), pydantic for the stage configs, the package and
#: the DAGs folder's two shared modules. Anything else is an import the file does not need to be parsed.
PARSE_TIME_PACKAGES = frozenset(
    {"airflow", "sqlalchemy", "croniter", "packaging", "pydantic", "dripper", "_common", "_params"}
)


def unexpected_imports(loaded: list[str]) -> list[str]:
    """Top-level modules of a parse outside the standard library and :data:`PARSE_TIME_PACKAGES`."""
    return sorted(
        name
        for name in loaded
        if "." not in name and name not in sys.stdlib_module_names and name not in PARSE_TIME_PACKAGES
    )


def heavy_imports(loaded: list[str]) -> list[str]:
    """The heavy modules among a parse's imports. Of the package, a DAG file may import only the operators,
    the stage configs (pydantic) and :data:`LIGHT_MODULES`; the extraction library (``dripper.pipeline``,
    ``.labelers``, ``.stages``…) is a heavy import (the probe lists the package's submodules by name)."""
    library = {
        m
        for m in loaded
        if m.startswith("dripper.") and not m.startswith(LIGHT_PREFIXES) and m not in LIGHT_MODULES
    }
    return sorted((set(loaded) & HEAVY_MODULES) | library)


_PROBE = """
import importlib.util, json, sys, time
sys.path.insert(0, {dags!r})
import airflow.sdk  # the DAG processor has Airflow loaded before it parses a file
before = set(sys.modules)
started = time.perf_counter()
spec = importlib.util.spec_from_file_location("dag_under_test", {path!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
elapsed = time.perf_counter() - started
new = set(sys.modules) - before
loaded = sorted({{name.split(".")[0] for name in new}})
loaded += sorted(n for n in new if n.startswith("dripper."))
print(json.dumps({{"seconds": elapsed, "loaded": loaded}}))
"""

REFERENCE_DAG = """
from datetime import datetime
from airflow.sdk import DAG
from airflow.providers.standard.operators.empty import EmptyOperator

with DAG(dag_id="reference", schedule=None, start_date=datetime(2025, 1, 1)) as dag:
    EmptyOperator(task_id="only")
"""


def parse_dag_file(path: Path, dags_dir: Path = DAGS_DIR) -> dict:
    """Parse ``path`` in a fresh interpreter: ``{"seconds": float, "loaded": [top-level modules it imported]}``."""
    probe = _PROBE.format(dags=str(dags_dir), path=str(path))
    output = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="parses per file (the median is reported)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        reference_file = Path(folder) / "reference_dag.py"
        reference_file.write_text(REFERENCE_DAG)
        reference = statistics.median(parse_dag_file(reference_file)["seconds"] for _ in range(args.rounds))
    print(f"reference (one EmptyOperator): {reference * 1000:.0f} ms; target {TARGET_SECONDS:.1f} s per file")
    print(f"{'DAG file':28} {'median ms':>9} {'x reference':>11} {'x target':>8}  heavy imports")
    worst = 0.0
    for path in sorted(DAGS_DIR.glob("[!_]*.py")):
        results = [parse_dag_file(path) for _ in range(args.rounds)]
        seconds = statistics.median(r["seconds"] for r in results)
        heavy = heavy_imports(sorted(set().union(*(r["loaded"] for r in results))))
        worst = max(worst, seconds)
        print(
            f"{path.name:28} {seconds * 1000:9.0f} {seconds / reference:11.1f} "
            f"{seconds / TARGET_SECONDS:8.2f}  {', '.join(heavy) or '-'}"
        )
    return 0 if worst < TARGET_SECONDS else 1


if __name__ == "__main__":
    raise SystemExit(main())
