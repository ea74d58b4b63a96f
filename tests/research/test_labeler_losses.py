"""``research.labeler_losses``: out-of-fold block errors per group, and the worst pages block by block."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from research import labeler_losses

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"


def _page(chars, labels, known=None):
    return SimpleNamespace(
        features=SimpleNamespace(chars=np.array(chars, dtype=np.float32)),
        labels=np.array(labels),
        known=None if known is None else np.array(known),
    )


def test_block_errors_count_characters_of_known_blocks():
    page = _page([100, 300, 50, 20], [True, True, False, False])
    # The threshold rule at 0.5: blocks 1 and 2 are taken.
    error = labeler_losses.block_errors(page, np.array([0.1, 0.9, 0.6, 0.2]), 0.5, "threshold")
    assert (error["tp"], error["fp"], error["fn"]) == (300, 50, 100)
    assert error["wrong"].tolist() == [True, False, True, False]
    # A snippet page: only its known blocks count.
    partial = _page([100, 300, 50, 20], [True, True, False, False], known=[False, True, True, False])
    error = labeler_losses.block_errors(partial, np.array([0.1, 0.9, 0.6, 0.2]), 0.5, "threshold")
    assert (error["tp"], error["fp"], error["fn"]) == (300, 50, 0)
    assert error["wrong"].tolist() == [False, False, True, False]


def test_losses_report_groups_and_lists_the_wrong_blocks(tmp_path, capsys):
    data = tmp_path / "pages.jsonl.gz"
    shutil.copy(SAMPLE, data)
    common = ["--data", str(data), "--cache", str(tmp_path / "training.pkl.gz"), "--folds", "3",
              "--workers", "1", "--threads", "1"]  # fmt: skip
    assert labeler_losses.main([*common, "--group", "source=wcxb", "--pages", "3", "--min-chars", "1"]) == 0
    out = capsys.readouterr().out
    table = {
        line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith(("all", "source="))
    }
    assert table["all"][0] == "60" and table["source=wcxb"][0] == "21"
    precision, recall = map(float, table["all"][3:5])
    assert 0.5 < precision <= 1.0 and 0.5 < recall <= 1.0  # a real model, not a constant
    listed = out.split("with the most wrong characters ==")[1]
    headers = [line for line in listed.splitlines() if line.startswith("== wcxb-")]
    assert len(headers) == 3
    blocks = [line.split()[0] for line in listed.splitlines() if line.startswith("  ")]
    assert blocks and set(blocks) <= {"FP", "FN"}

    with pytest.raises(SystemExit):
        labeler_losses.main([*common, "--group", "source=nowhere"])
