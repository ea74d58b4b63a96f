"""``research.labeler_sweep``: block-level out-of-fold comparison of training settings, on a cached set."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dripper.labelers.cpu.train import page_scores
from research import labeler_sweep

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"
TINY = ["--folds", "3", "--workers", "1", "--threads", "1", "--resamples", "200", "--base", "rounds=8"]


def test_block_f1_counts_characters():
    # The sweep's page score: train.page_scores of the blocks the decision rule selects.
    chars = np.array([100, 300, 50, 0], dtype=np.float32)
    labels = np.array([True, True, False, False])
    page = SimpleNamespace(features=SimpleNamespace(chars=chars), labels=labels)
    assert page_scores(page, None, selected=labels)["f1"] == 1.0
    # 300 of 400 main characters found, 50 other taken: 2·300 / (350 + 400).
    taken = np.array([False, True, True, False])
    assert page_scores(page, None, selected=taken)["f1"] == pytest.approx(600 / 750)
    nothing = SimpleNamespace(features=page.features, labels=np.zeros(4, bool))
    assert page_scores(nothing, None, selected=np.zeros(4, bool))["f1"] == 1.0
    # Without a selection, the threshold's: the same blocks from probabilities.
    assert page_scores(page, np.array([0.1, 0.9, 0.6, 0.0]), threshold=0.5)["f1"] == pytest.approx(600 / 750)


def test_sweep_tells_a_crippled_variant_from_the_base_and_reuses_its_cache(tmp_path, capsys):
    data = tmp_path / "pages.jsonl.gz"
    shutil.copy(SAMPLE, data)
    cache, scores = tmp_path / "training.pkl.gz", tmp_path / "scores.jsonl"
    common = ["--data", str(data), "--cache", str(cache), *TINY]
    # One boosting round of two leaves at a tiny learning rate: probabilities near the prior on every block.
    assert labeler_sweep.main([*common, "--variant", "stump:rounds=1,num_leaves=2,learning_rate=0.01",
                       "--scores-out", str(scores)]) == 0  # fmt: skip
    out, err = capsys.readouterr()
    assert cache.exists() and "training set from" not in err
    lead = next(line for line in out.splitlines() if "stump over base" in line)
    assert lead.rstrip().endswith("*") and "-0." in lead  # worse beyond noise
    rows = [json.loads(line) for line in scores.read_text().splitlines()]
    assert {row["run"] for row in rows} == {"base", "stump"}
    assert len(rows) == 2 * 60 and all(0.0 <= row["block_f1"] <= 1.0 for row in rows)

    # Same data, same code: the cached set; the same base gives the same scores page for page.
    assert labeler_sweep.main([*common, "--previous", str(scores)]) == 0
    out, err = capsys.readouterr()
    assert f"training set from {cache}" in err
    same = next(line for line in out.splitlines() if "base over previous:base" in line)
    assert "+0.0000 [+0.0000, +0.0000]" in same

    # Other data under the same name: the cache is stale and rebuilt.
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as source, gzip.open(data, "wt", encoding="utf-8") as out:
        out.writelines(source.readlines()[:30])
    assert labeler_sweep.main(common) == 0
    assert "is stale" in capsys.readouterr().err


def test_bad_settings_fail_before_any_fit(tmp_path):
    cache = tmp_path / "never.pkl.gz"
    with pytest.raises(ValueError, match="rounds"):
        labeler_sweep.main(["--data", str(SAMPLE), "--cache", str(cache), *TINY, "--variant", "bad:rounds=0"])
    assert not cache.exists()
    with pytest.raises(SystemExit):
        labeler_sweep.main(["--data", str(SAMPLE), *TINY, "--variant", "no-settings"])


def test_seeds_show_the_training_noise_and_average_it(tmp_path, capsys):
    common = ["--data", str(SAMPLE), "--cache", str(tmp_path / "training.pkl.gz"), *TINY]
    assert labeler_sweep.main([*common, "--scores-out", str(tmp_path / "one.jsonl")]) == 0
    assert "learner seed" not in capsys.readouterr().out
    assert labeler_sweep.main([*common, "--seeds", "3", "--scores-out", str(tmp_path / "three.jsonl")]) == 0
    out = capsys.readouterr().out
    spread = next(line for line in out.splitlines() if line.startswith("base") and "range" in line)
    means = [float(value) for value in spread.split("range")[0].split()[2:]]
    assert len(means) == 3 and len(set(means)) > 1  # other seeds, other trees
    # Page scores are the mean over the seeds; seed 0 is the single-seed run.
    one = {row["id"]: row["block_f1"] for row in map(json.loads, (tmp_path / "one.jsonl").open())}
    three = {row["id"]: row["block_f1"] for row in map(json.loads, (tmp_path / "three.jsonl").open())}
    assert one.keys() == three.keys() and one != three
    assert np.mean(list(three.values())) == pytest.approx(np.mean(means), abs=1e-4)  # printed to 4 places
