"""Training on a handful of bundled pages: the command, its options, the shipped settings as defaults, and a
model file that loads and labels."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from dripper.cli_train import add_train_labeler_parser, train_params
from dripper.labelers.cpu.fit import TrainParams
from dripper.labelers.cpu.model import CpuLabeler, load_model
from dripper.labelers.cpu.train import score_report
from dripper.pipeline import extract
from tests.labelers.cpu import fake_page

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"


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


def test_block_scores_leave_snippet_pages_out():
    pages = [fake_page(f"p{i}", "full", f"s{i}", 4) for i in range(2)]
    pages[0].labels[:2] = True
    snippet = fake_page("snip", "snippets", "t", 4)
    snippet.known = np.array([True, False, False, False])
    probabilities = [np.array([0.9, 0.9, 0.1, 0.1]), np.zeros(4), np.zeros(4)]
    report = score_report([*pages, snippet], probabilities)
    assert report["all"]["pages"] == 2 and "source=snippets" not in report
    assert report["all"]["f1"] == pytest.approx(1.0)  # both full pages right; the snippet page not scored


def test_the_defaults_are_the_shipped_models_settings():
    """``dripper train-labeler`` without options, the quality bench and the sweep's base train the shipped
    configuration: a change of TrainParams' defaults must come with a retrained model (or fail here)."""
    from dataclasses import asdict

    shipped = load_model().metadata["params"]
    defaults = asdict(TrainParams())
    machine = {"threads", "backend", "ignore_features"}  # how it was fitted, not what
    assert {key: value for key, value in defaults.items() if key not in machine} == {
        key: value for key, value in shipped.items() if key not in machine
    }


def test_a_threshold_asked_for_is_the_decision_rule():
    parser = argparse.ArgumentParser()
    add_train_labeler_parser(parser.add_subparsers(dest="command"))

    def params(*options: str) -> TrainParams:
        return train_params(parser.parse_args(["train-labeler", "--data", "d", "--output", "m", *options]))

    assert params() == TrainParams(threads=2, backend="auto")
    assert params("--threshold", "0.6").decision == "threshold"
    assert params("--threshold", "0.6", "--decision", "expected_f1").decision == "expected_f1"
    assert params("--bags", "2").bags == 2 and params("--bags", "2").decision == "expected_f1"


def test_a_collection_left_out_of_training(monkeypatch):
    """``--exclude-source``: its records never reach the training set (counted); in cross-validation
    (``trainable``) they train no fold's model and are still scored out of fold."""
    from collections import Counter

    import dripper.labelers.cpu.train as train
    from dripper.labelers.cpu.training_set import build_training_set, file_records

    skipped = Counter()
    records = file_records(SAMPLE, set(), 30, skipped, frozenset({"scrapinghub_aeb"}))
    assert records and all(r["source"] != "scrapinghub_aeb" for r in records)
    assert skipped["excluded source scrapinghub_aeb"] > 0

    pages = build_training_set([SAMPLE], limit=18).pages
    trainable = [i % 3 != 0 for i in range(len(pages))]
    trained_on: set[int] = set()
    real_fit = train.fit_stage

    def recording_fit(pages_, indices, *args, **kwargs):
        trained_on.update(int(i) for i in indices)
        return real_fit(pages_, indices, *args, **kwargs)

    monkeypatch.setattr(train, "fit_stage", recording_fit)
    params = TrainParams(rounds=2, threads=1, min_data_in_leaf=1)  # two stages: the inner fits too
    cv = train.cross_validate(pages, params, folds=3, quiet=True, trainable=trainable)
    assert trained_on == {i for i, flag in enumerate(trainable) if flag}
    assert [len(p) for p in cv.probabilities] == [len(page.labels) for page in pages]  # all scored
