"""The ablation's training budget: tokens → steps, one run per arm and seed, and equalize_corpora's cut."""

from __future__ import annotations

from pathlib import Path

import pytest

from dripper.config.pretrain import PretrainStageConfig
from dripper.config.settings import StageConfigError
from dripper.pretrain.config import TrainConfig
from dripper.runs.jobs import pretrain_job, training_plan


def test_a_token_budget_sets_the_steps_and_steps_given_win():
    # tiny: 64-token sequences; 4 per step → 256 tokens a step; 5,000 tokens → ceil(19.5) = 20 steps.
    config = TrainConfig(out_dir=Path("r"), data=["a"], tokenizer=Path("t"), train_tokens=5000)
    assert config.train_steps == 20
    config = TrainConfig(
        out_dir=Path("r"), data=["a"], tokenizer=Path("t"), train_tokens=5000, global_batch_size=8
    )
    assert config.train_steps == 10
    assert TrainConfig.from_json(config.to_json()) == config

    stage = PretrainStageConfig.parse({"train_tokens": 5000})
    args = stage.train_arguments("out", "tokens", "tok", seed=7)
    assert args[args.index("--train-tokens") + 1] == "5000" and "--train-steps" not in args
    assert args[args.index("--seed") + 1] == "7" and stage.budget == "5000tokens"
    stage = PretrainStageConfig.parse({"train_steps": 4})  # steps given: they set the budget
    args = stage.train_arguments("out", "tokens", "tok")
    assert args[args.index("--train-steps") + 1] == "4" and "--train-tokens" not in args
    assert args[args.index("--seed") + 1] == "1234" and stage.budget == "4steps"
    with pytest.raises(StageConfigError, match="train_tokens"):
        PretrainStageConfig.parse({"train_tokens": None, "train_steps": None})
    with pytest.raises(StageConfigError, match="each seed once"):
        PretrainStageConfig.parse({"seeds": [1, 1]})


def test_one_run_per_arm_and_seed_and_equalize_cuts_to_the_smallest_arm():
    arms = [
        {"root": "/r/extractors/cpu", "tokens": "/r/extractors/cpu/tokens", "token_count": 900},
        {"root": "/r/extractors/whole", "tokens": "/r/extractors/whole/tokens", "token_count": 2500},
    ]
    stage = PretrainStageConfig.parse({"seeds": [1, 2]})
    plan = training_plan(stage, arms)
    assert [(Path(p["root"]).name, p["seed"], p["data_token_limit"]) for p in plan] == [
        ("cpu", 1, None), ("cpu", 2, None), ("whole", 1, None), ("whole", 2, None),
    ]  # fmt: skip
    plan = training_plan(stage.model_copy(update={"equalize_corpora": True}), arms)
    assert {p["data_token_limit"] for p in plan} == {900}
    job = pretrain_job(stage, arms[1]["root"], arms[1]["tokens"], "tok", seed=2, data_token_limit=900)
    assert job.run_dir == "/r/extractors/whole/pretrain/tiny-5120tokens-seed2"
    assert job.train[job.train.index("--data-token-limit") + 1] == "900"
    with pytest.raises(ValueError, match="token_count"):
        training_plan(stage.model_copy(update={"equalize_corpora": True}), [{"root": "x", "tokens": "y"}])


def test_the_cut_is_a_seeded_subset_within_the_limit_the_same_for_every_run(tmp_path):
    pytest.importorskip("megatron.core")
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    from dripper.pretrain.data import subset_corpus, write_indexed_dataset

    documents = [[i % 50 + 1] * (5 + i % 7) for i in range(40)]  # 40 documents, 5–11 tokens
    prefix = str(write_indexed_dataset(documents, tmp_path / "tokens" / "part", vocab_size=64))
    total = sum(len(d) for d in documents)
    whole = subset_corpus([prefix], total, tmp_path / "cut" / "corpus")
    assert whole["prefix"] is None and whole["tokens"] == total  # at or under the limit: kept whole
    cut = subset_corpus([prefix], 100, tmp_path / "cut" / "corpus")
    assert cut["prefix"] and 90 < cut["tokens"] <= 100 and cut["corpus_tokens"] == total
    kept = IndexedDataset(cut["prefix"])
    assert int(kept.sequence_lengths.sum()) == cut["tokens"]
    texts = {tuple(int(t) for t in kept[i]) for i in range(len(kept))}
    assert texts <= {tuple(d) for d in documents}  # whole documents, none invented
    del kept
    again = subset_corpus([prefix], 100, tmp_path / "again" / "corpus")
    assert again["tokens"] == cut["tokens"]
    assert Path(f"{again['prefix']}.bin").read_bytes() == Path(f"{cut['prefix']}.bin").read_bytes()
