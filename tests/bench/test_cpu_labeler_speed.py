"""``bench/cpu_labeler.py speed``: step times, and the parse floor timed inside the simplify step."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"


def _bench():
    spec = importlib.util.spec_from_file_location(
        "cpu_labeler_bench_speed", REPO / "bench" / "cpu_labeler.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_speed_reports_steps_and_a_parse_floor_inside_simplify(capsys):
    assert _bench().main(["speed", "--data", str(SAMPLE), "--limit", "6", "--chunk", "3"]) == 0
    out = capsys.readouterr().out
    simplify = float(re.search(r"steps, ms/page \(CPU\): simplify ([\d.]+)", out).group(1))
    floor, ceiling = re.search(
        r"parse floor \(.*?\): ([\d.]+) ms/page, .*? passes ([\d.]+)x trafilatura", out
    ).groups()
    # The floor is part of the simplify step (timers nested in it), and is real work on every page.
    assert 0 < float(floor) <= simplify
    ratio = float(re.search(r"ratio dripper:cpu / trafilatura \(per core\): ([\d.]+)x", out).group(1))
    assert float(ceiling) >= ratio
    assert "results by extractor" in out
