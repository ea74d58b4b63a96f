"""Training on a handful of bundled pages: folds, the command, and a model file that loads and labels."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from dripper_core.cli_train import add_train_labeler_parser
from dripper_core.labelers.cpu.model import CpuLabeler, load_model
from dripper_core.labelers.cpu.train import (
    PageExample,
    assign_folds,
    build_training_set,
    site_of,
)
from dripper_core.pipeline import extract

REPO = Path(__file__).resolve().parents[4]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"


def test_site_of():
    assert site_of({"url": "https://www.example.co.uk/a/b", "html": ""}) == "example.co.uk"
    assert site_of({"url": "http://blogs.nfl.com/x", "html": ""}) == "nfl.com"
    html = '<html><head><link rel="canonical" href="https://news.example.org/story"></head></html>'
    assert site_of({"url": None, "html": html}) == "example.org"
    assert site_of({"url": None, "html": "<p>x</p>", "id": "p1", "source": "s"}) == "page:s:p1"


def _fake(doc_id: str, source: str, site: str, n_blocks: int) -> PageExample:
    from dripper_core.labelers.cpu.features import PageFeatures

    features = PageFeatures(
        np.zeros((n_blocks, 1), np.float32),
        np.ones(n_blocks, np.float32),
        np.zeros((n_blocks, 1), np.int32),
        np.zeros(n_blocks, np.int32),
    )
    return PageExample(doc_id, source, None, site, features, np.zeros(n_blocks, bool))


def test_folds_keep_sites_together_and_spread_sources():
    pages = [_fake(f"p{i}", "a" if i % 2 else "b", f"site{i // 3}", 10 + i) for i in range(30)]
    folds = assign_folds(pages, 3, seed=0, by="site")
    for site in {page.site for page in pages}:
        assert len({int(folds[i]) for i, page in enumerate(pages) if page.site == site}) == 1
    for source in ("a", "b"):
        assert {int(folds[i]) for i, page in enumerate(pages) if page.source == source} == {0, 1, 2}
    assert np.array_equal(folds, assign_folds(pages, 3, seed=0, by="site"))
    by_source = assign_folds(pages, 3, by="source")
    assert sorted(set(by_source.tolist())) == [0, 1]
    with pytest.raises(ValueError, match="grouping"):
        assign_folds(pages, 3, by="language")


def test_build_training_set_reads_sample_pages():
    training = build_training_set([SAMPLE], limit=6)
    assert training.files[0]["records"] == 6
    assert len(training.pages) + sum(training.skipped.values()) == 6
    page = training.pages[0]
    assert page.labels.shape == (page.n_blocks,) and page.labels.any()


def test_train_labeler_command_writes_a_model_that_loads(tmp_path):
    output = tmp_path / "model.json.gz"
    report = tmp_path / "report.json"
    parser = argparse.ArgumentParser()
    add_train_labeler_parser(parser.add_subparsers(dest="command"))

    def train(to: Path) -> None:
        args = parser.parse_args(
            [
                "train-labeler", "--data", str(SAMPLE), "--output", str(to), "--folds", "3", "--limit", "14",
                "--rounds", "8", "--bags", "2", "--workers", "1", "--threads", "1", "--report", str(report),
                "--quiet", "--threshold", "0.45", "--min-confidence", "0.6", "--decision", "expected_f1",
                "--min-page-confidence", "0.3",
            ]
        )  # fmt: skip
        assert args.handler(args) == 0

    train(output)
    train(tmp_path / "again.json.gz")
    assert output.read_bytes() == (tmp_path / "again.json.gz").read_bytes()  # reproducible, bags included
    model = load_model(output)
    assert model.metadata["training_data"]["files"][0]["records"] == 14
    assert model.metadata["params"]["rounds"] == 8 and model.metadata["params"]["bags"] == 2
    assert model.stage1.n_trees == model.stage2.n_trees == 2 * 8  # two bags' trees, averaged
    assert (model.threshold, model.min_confidence, model.decision) == (0.45, 0.6, "expected_f1")
    assert model.min_page_confidence == 0.3 and model.metadata["params"]["min_page_confidence"] == 0.3
    assert "cross_validation" in json.loads(report.read_text())
    labeler = CpuLabeler(model=output, min_confidence=0)
    html = (
        "<html><body><p>"
        + "A sentence of text for the page. " * 12
        + "</p><a href='/'>Home</a></body></html>"
    )
    result = extract(html, labeler=labeler, fallback=None)
    assert result.extractor == "dripper:cpu" and result.labels is not None


def test_train_labeler_command_rejects_bad_input(tmp_path):
    parser = argparse.ArgumentParser()
    add_train_labeler_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train-labeler", "--data", str(tmp_path / "none.jsonl.gz"), "--output", "x"])
    assert args.handler(args) == 2
    args = parser.parse_args(["train-labeler", "--data", str(SAMPLE), "--output", "x", "--folds", "2"])
    assert args.handler(args) == 2
    args = parser.parse_args(["train-labeler", "--data", str(SAMPLE), "--output", "x", "--threshold", "1.5"])
    assert args.handler(args) == 2
    args = parser.parse_args(["train-labeler", "--data", str(SAMPLE), "--output", "x", "--decision", "vote"])
    assert args.handler(args) == 2
    bad_gate = ["train-labeler", "--data", str(SAMPLE), "--output", "x", "--min-page-confidence", "1"]
    assert parser.parse_args(bad_gate).handler(parser.parse_args(bad_gate)) == 2


def test_page_multipliers_balance_groups():
    from dripper_core.labelers.cpu.train import page_multipliers

    pages = [_fake(f"a{i}", "big", f"s{i}", 3) for i in range(16)] + [_fake("b", "small", "t", 3)]
    pages[0].page_type = "forum"  # its own group: source and page type
    indexes = list(range(len(pages)))
    weights = page_multipliers(pages, indexes, 0.5)
    assert weights.mean() == pytest.approx(1.0)
    # 15 pages of "big", one "big:forum", one "small": a page weighs 1/sqrt(its group's size)
    assert weights[1] / weights[16] == pytest.approx(1 / np.sqrt(15))
    assert weights[0] == pytest.approx(weights[16])
    assert np.allclose(page_multipliers(pages, indexes, 0.0), 1.0)
