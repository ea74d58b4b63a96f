"""``dripper train-labeler --kind cpu_seq`` on a few bundled pages: seeded, loads, labels."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from dripper.cli_train import add_train_labeler_parser

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"


def test_train_seq_labeler_is_seeded_and_its_file_labels(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("lightgbm")
    from dripper.labelers.cpu_seq.labeler import CpuSeqLabeler
    from dripper.labelers.cpu_seq.network import SeqNetwork
    from dripper.pipeline import extract

    parser = argparse.ArgumentParser()
    add_train_labeler_parser(parser.add_subparsers(dest="command"))

    def train(to: Path) -> SeqNetwork:
        args = parser.parse_args(
            [
                "train-labeler", "--kind", "cpu_seq", "--data", str(SAMPLE), "--output", str(to),
                "--folds", "3", "--limit", "12", "--threads", "1", "--epochs", "1", "--quiet",
                "--min-page-confidence", "0.3",
            ]
        )  # fmt: skip
        assert args.handler(args) == 0
        return SeqNetwork.load(to)

    first, second = train(tmp_path / "a.npz"), train(tmp_path / "b.npz")
    assert first.params.keys() == second.params.keys()
    for name, value in first.params.items():
        np.testing.assert_array_equal(value, second.params[name], err_msg=name)
    assert first.metadata["settings"] == {"min_page_confidence": 0.3}
    assert first.metadata["training_data"]["files"][0]["records"] == 12
    labeler = CpuSeqLabeler(model=tmp_path / "a.npz", min_confidence=0)
    assert labeler.min_page_confidence == 0.3
    html = (
        "<html><body><p>"
        + "A sentence of text for the page. " * 12
        + "</p><a href='/'>Home</a></body></html>"
    )
    result = extract(html, labeler=labeler, fallback=None)
    assert result.extractor == "dripper:cpu_seq" and result.labels is not None


def test_tree_options_are_refused_for_cpu_seq(tmp_path):
    parser = argparse.ArgumentParser()
    add_train_labeler_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "train-labeler",
            "--kind",
            "cpu_seq",
            "--data",
            str(SAMPLE),
            "--output",
            str(tmp_path / "x.npz"),
            "--bags",
            "2",
        ]
    )
    assert args.handler(args) == 2
