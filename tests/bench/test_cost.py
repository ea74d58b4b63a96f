"""``bench/cost.py``: every extractor timed on the same pages, our steps apart, the JSON figures."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench import load_bench

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"


def test_cost_times_each_extractor_on_the_same_pages(tmp_path, capsys):
    out = tmp_path / "cost.json"
    argv = ["--data", str(SAMPLE), "--limit", "6", "--chunk", "3", "--fallback", "trafilatura_fast"]
    assert load_bench("cost").main([*argv, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    figures = json.loads(out.read_text())
    assert figures["fallback"] == "trafilatura_fast"
    group = figures["groups"]["pages"]
    assert group["pages"] == 6 and sum(group["results"].values()) == 6
    assert set(group["cpu"]) == {"datatrove-trafilatura", "resiliparse", "dripper:cpu"}
    assert all(seconds > 0 for seconds in group["cpu"].values())
    # Our steps are timed inside our own call: together no more than it.
    assert sum(group["steps"][step] for step in ("simplify", "features", "trees", "render")) > 0
    assert sum(v for k, v in group["steps"].items() if k != "parse floor") <= group["cpu"]["dripper:cpu"]
    assert "x datatrove-trafilatura" in printed and "dripper:cpu steps, ms/page: simplify" in printed


def test_cost_refuses_a_missing_data_file(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit) as exit_info:
        load_bench("cost").main(["--data", str(tmp_path / "none.jsonl.gz")])
    assert exit_info.value.code == 2
    assert "no such data file" in capsys.readouterr().err
