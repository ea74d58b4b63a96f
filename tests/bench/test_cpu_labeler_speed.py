"""``bench/cpu_labeler.py speed``: step times, and the parse floor timed inside the simplify step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.bench import load_bench

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"


@pytest.mark.parametrize("labeler", ["cpu", "cpu_seq"])
def test_speed_reports_steps_and_a_parse_floor_inside_simplify(capsys, labeler):
    argv = ["speed", "--data", str(SAMPLE), "--limit", "6", "--chunk", "3", "--labeler", labeler]
    assert load_bench("cpu_labeler").main(argv) == 0
    out = capsys.readouterr().out
    simplify = float(re.search(r"steps, ms/page \(CPU\): simplify ([\d.]+)", out).group(1))
    floor, ceiling = re.search(
        r"parse floor \(.*?\): ([\d.]+) ms/page, .*? passes ([\d.]+)x trafilatura", out
    ).groups()
    # The floor is part of the simplify step (timers nested in it), and is real work on every page.
    assert 0 < float(floor) <= simplify
    # The rows are named by the labeler measured.
    ratio = float(re.search(rf"ratio dripper:{labeler} / trafilatura \(per core\): ([\d.]+)x", out).group(1))
    assert f"dripper:{labeler} steps" in out
    assert float(ceiling) >= ratio
    assert "results by extractor" in out
