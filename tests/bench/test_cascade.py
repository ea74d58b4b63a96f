"""``bench/cascade.py``: the routing curves, and the bench end to end on a few bundled sample pages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dripper.labelers.cpu.features import FEATURE_NAMES, PageFeatures
from tests.bench import load_bench

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"


def test_curve_routes_the_lowest_scores_first_by_pages_and_by_tokens():
    bench = load_bench("cascade")
    cpu = np.array([0.2, 0.9, 0.5, 1.0])
    second = np.array([1.0, 1.0, 1.0, 1.0])
    tokens = np.array([100.0, 100.0, 200.0, 600.0])
    score = cpu - second  # the ideal router: the largest gain first
    pages = {point["share"]: point for point in bench.curve(cpu, second, score, tokens)}
    assert pages[0]["quality"] == pytest.approx(cpu.mean())
    assert pages[50]["quality"] == pytest.approx((1.0 + 0.9 + 1.0 + 1.0) / 4)  # pages 0 and 2 routed
    assert pages[50]["tokens"] == pytest.approx(0.3)
    assert pages[100]["quality"] == pytest.approx(1.0)
    by_tokens = {point["share"]: point for point in bench.curve(cpu, second, score, tokens, by_tokens=True)}
    assert by_tokens[10]["pages"] == 0.25  # page 0 alone fits in 10 % of the tokens
    assert by_tokens[30]["pages"] == 0.5  # then page 2 (200 tokens): 30 %


def test_bench_end_to_end_on_sample_pages(tmp_path, capsys):
    bench = load_bench("cascade")
    out = tmp_path / "cascade.json"
    argv = [
        "--data",
        str(SAMPLE),
        "--limit",
        "6",
        "--by",
        "site",
        "--folds",
        "3",
        "--workers",
        "1",
        "--chunk",
        "4",
        "--no-opinion",
        "--rows-dir",
        str(tmp_path / "rows"),
        "--out",
        str(out),
    ]
    assert bench.main(argv) == 0
    printed = capsys.readouterr().out
    assert "bench/cascade.py --data" in printed  # the command and the date head the output
    assert "share of pages routed" in printed and "share of tokens routed" in printed
    summary = json.loads(out.read_text())
    found = summary["groupings"]["site"]["pages"]["metrics"]["norm"]
    for name in ("confidence", "router", "router+declined", "ideal"):
        points = found["routers"][name]["pages"]
        assert [point["share"] for point in points] == list(range(0, 101, 10))
        assert points[0]["quality"] == pytest.approx(found["cpu"])  # nothing routed: the CPU labeler
        assert points[-1]["quality"] == pytest.approx(found["second"])  # everything: the second stage
    ideal = found["routers"]["ideal"]["pages"]
    assert all(
        i["quality"] >= c["quality"] - 1e-9
        for i, c in zip(ideal, found["routers"]["confidence"]["pages"], strict=True)
    )
    # The rows are kept: a second run reads them instead of extracting again.
    assert bench.main(argv) == 0
    assert len(list((tmp_path / "rows").iterdir())) == 1


def _features(chars: list[int]) -> PageFeatures:
    n = len(chars)
    values = np.zeros((n, len(FEATURE_NAMES)), np.float32)
    values[:, FEATURE_NAMES.index("page_link_share")] = 0.25
    values[:, FEATURE_NAMES.index("link_share")] = [0.0, 0.5, 0.0, 1.0][:n]
    return PageFeatures(
        values, np.array(chars, np.float32), np.zeros((n, 1), np.int32), np.zeros(n, np.int32)
    )


def test_router_summaries_of_a_sure_page_and_a_doubtful_one():
    bench = load_bench("cascade")
    names = bench.ROUTER_FEATURES
    p, main = np.array([0.02, 0.99, 0.98, 0.01]), [False, True, True, False]
    sure = dict(zip(names, bench.router_features(p, _features([10, 500, 400, 10]), main, False), strict=True))
    assert sure["page_confidence"] > 0.95 and sure["declined"] == 0.0
    assert sure["selected_char_share"] == pytest.approx(900 / 920)
    assert sure["unsure_char_share"] == 0.0
    assert (sure["selected_runs"], sure["largest_run_share"]) == (1.0, 1.0)
    assert sure["page_link_share"] == 0.25
    assert sure["main_link_share"] == pytest.approx(0.5 * 500 / 900)
    p, main = np.array([0.6, 0.1, 0.55, 0.1]), [True, False, True, False]
    doubt = dict(zip(names, bench.router_features(p, _features([300, 50, 300, 50]), main, True), strict=True))
    assert doubt["page_confidence"] < sure["page_confidence"] and doubt["declined"] == 1.0
    assert doubt["unsure_char_share"] == pytest.approx(600 / 700)
    assert (doubt["selected_runs"], doubt["largest_run_share"]) == (2.0, 0.5)
    assert doubt["mean_entropy"] > sure["mean_entropy"]
