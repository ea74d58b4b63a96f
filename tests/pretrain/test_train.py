"""The tiny Megatron-core model trains on CPU, logs every step, checkpoints, and resumes exactly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.pretrain import make_toy_corpus, tiny_train_config

pytest.importorskip("megatron.core")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_toy_corpus(tmp_path_factory.mktemp("toy"))


@pytest.fixture(scope="module")
def full_run(corpus, tmp_path_factory):
    """Eight steps in one go (checkpoints at 4 and 8)."""
    from dripper.pretrain.train import train

    config = tiny_train_config(corpus, tmp_path_factory.mktemp("full"), steps=8)
    return config, train(config)


def test_loss_decreases_and_every_step_is_logged(full_run):
    from dripper.pretrain.train import read_train_log

    config, result = full_run
    assert result.start_step == 0 and result.final_step == 8
    assert all(math.isfinite(loss) for loss in result.losses)
    assert sum(result.losses[-2:]) / 2 < sum(result.losses[:2]) / 2 - 0.1, result.losses
    records = read_train_log(config.out_dir)
    assert [r["step"] for r in records] == list(range(1, 9))
    assert [r["loss"] for r in records] == pytest.approx(result.losses)
    assert records[-1]["tokens"] == 8 * config.global_batch_size * 64
    for key in ("lr", "grad_norm", "tokens_per_s", "elapsed_s"):
        assert records[-1][key] > 0
    run = json.loads((config.out_dir / "run.json").read_text())
    assert run["model"]["vocab_size"] == 512 and run["model"]["num_query_groups"] == 2


def test_checkpoints_are_complete_and_latest_is_marked(full_run):
    from dripper.pretrain.checkpoint import find_latest, read_meta

    config, result = full_run
    root = config.out_dir / "checkpoints"
    assert (root / "latest").read_text().strip() == "8"
    assert find_latest(root) == result.checkpoint == root / "iter_0000008"
    assert sorted(p.name for p in root.glob("iter_*")) == ["iter_0000004", "iter_0000008"]
    meta = read_meta(result.checkpoint)
    assert meta.step == 8 and meta.consumed_samples == 8 * config.global_batch_size
    assert (result.checkpoint / "optimizer" / "tp00_pp00.pt").exists()
    assert (result.checkpoint / "model" / "metadata.json").exists()


def test_resume_continues_from_latest_checkpoint_exactly(corpus, full_run, tmp_path):
    """Stopped after step 4 (same 8-step schedule), then resumed: steps 5-8 match the uninterrupted run."""
    from dripper.pretrain.train import read_train_log, train

    _, uninterrupted = full_run
    first = train(tiny_train_config(corpus, tmp_path, steps=8, exit_at_step=4))
    assert first.final_step == 4
    # A crash after step 6 would have logged steps past the checkpoint: the resumed run replaces them.
    log = tmp_path / "train_log.jsonl"
    log.write_text(log.read_text() + json.dumps({"step": 5, "loss": 99.0}) + "\n")
    resumed = train(tiny_train_config(corpus, tmp_path, steps=8))
    assert resumed.start_step == 4 and resumed.final_step == 8
    assert resumed.losses == pytest.approx(uninterrupted.losses[4:], abs=1e-5)
    assert [r["step"] for r in read_train_log(tmp_path)] == list(range(1, 9))
    assert all(r["loss"] < 50 for r in read_train_log(tmp_path))
    again = train(tiny_train_config(corpus, tmp_path, steps=8))
    assert again.start_step == again.final_step == 8 and again.losses == []


def test_keep_checkpoints_prunes_old_ones(corpus, tmp_path):
    from dripper.pretrain.train import train

    train(tiny_train_config(corpus, tmp_path, steps=3, save_interval=1, keep_checkpoints=2, exit_at_step=10))
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("iter_*")) == [
        "iter_0000002",
        "iter_0000003",
    ]


def test_cli_train_and_export(corpus, tmp_path: Path, capsys):
    from dripper.pretrain.cli import main

    data = [arg for name in corpus.extractors for arg in ("--data", str(corpus.tokens_root / name))]
    argv = ["train", "--out-dir", str(tmp_path / "run"), *data, "--tokenizer", str(corpus.tokenizer)]
    argv += ["--train-steps", "2", "--micro-batch-size", "2", "--global-batch-size", "2", "--device", "cpu"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["final_step"] == 2 and summary["checkpoint"].endswith("iter_0000002")
    assert main(["export", "--checkpoint", str(tmp_path / "run"), "--out", str(tmp_path / "hf")]) == 0
    exported = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert exported["step"] == 2 and exported["max_abs_logit_diff"] < 1e-4
    assert main(["export", "--checkpoint", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")]) == 2
    assert "no complete checkpoint" in capsys.readouterr().err


def test_cli_train_exports_in_its_own_process_as_export_does(corpus, tmp_path: Path, capsys, monkeypatch):
    """``train --export-to``: every checkpoint exported after training, in the training process, to the
    folders and the result ``export --every-checkpoint`` gives; refused under a multi-process launcher."""
    from dripper.pretrain.cli import main

    data = [arg for name in corpus.extractors for arg in ("--data", str(corpus.tokens_root / name))]
    argv = ["train", "--out-dir", str(tmp_path / "run"), *data, "--tokenizer", str(corpus.tokenizer)]
    argv += [
        "--train-steps",
        "2",
        "--save-interval",
        "1",
        "--micro-batch-size",
        "2",
        "--global-batch-size",
        "2",
    ]
    argv += ["--device", "cpu", "--keep-checkpoints", "0"]
    assert main([*argv, "--export-to", str(tmp_path / "hf")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [c["step"] for c in summary["export"]["checkpoints"]] == [1, 2]
    assert all(c["max_abs_logit_diff"] < 1e-4 for c in summary["export"]["checkpoints"])
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["iter_0000001", "iter_0000002"]
    assert (
        main(
            [
                "export",
                "--checkpoint",
                str(tmp_path / "run"),
                "--out",
                str(tmp_path / "hf"),
                "--every-checkpoint",
            ]
        )
        == 0
    )
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again == summary["export"]  # already exported: the same folders and figures
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main([*argv, "--export-to", str(tmp_path / "hf2")]) == 2
    assert "single process" in capsys.readouterr().err


def test_bf16_on_cpu_is_refused(corpus, tmp_path):
    from dripper.pretrain.train import train

    with pytest.raises(ValueError, match="bf16 needs a GPU"):
        train(tiny_train_config(corpus, tmp_path, steps=1, precision="bf16"))
