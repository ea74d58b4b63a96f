"""The pretrain stage's config: the model preset, its token budget, seeds, checkpoints and devices."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from dripper.config.settings import StageConfig, setting

#: The default budget: 20 steps of the tiny preset at the training CLI's default batch (4 sequences × 64
#: tokens); the paper's 1B runs trained on about 62B tokens per corpus.
DEFAULT_TRAIN_TOKENS = 5120


class PretrainStageConfig(StageConfig):
    """``tokens/`` → a model in ``pretrain/{run}/``, every checkpoint exported.

    Attributes:
        model: Model preset (``dripper.pretrain.config``).
        train_tokens: The budget: training tokens per run, the same for every arm; the training CLI derives
            its steps, ``ceil(train_tokens / (global batch × sequence length))``.
        train_steps: Optimizer steps instead of a token budget (when given, they win over ``train_tokens``).
        seeds: One training run per arm and seed (weight initialisation and data order).
        max_epochs: The report flags an arm whose training tokens exceed this many passes over its corpus.
        equalize_corpora: Cut every arm's corpus to the smallest arm's tokens (a seeded random subset of its
            documents), so that no arm sees more unique text.
        eval_every: Checkpoint (and later score) every N steps, and at the last.
        device: ``auto``, ``cpu`` or ``cuda``.
        nproc: torchrun processes (GPUs) per model; 1 runs a single process.
        arguments: More ``python -m dripper.pretrain train`` flags.
    """

    stage = "pretrain"
    form_prefix = "pretrain_"
    form_section = "Pretraining and evaluation"

    model: Literal["tiny", "llama-1b"] = setting(
        "tiny",
        "Model preset (dripper.pretrain.config): tiny for a smoke run, llama-1b as in the paper",
        title="Model",
    )
    train_tokens: int | None = setting(
        DEFAULT_TRAIN_TOKENS,
        "Training tokens per run, the same for every arm (steps = ceil(tokens / (global batch x sequence "
        "length)), stated in the report)",
        title="Training tokens",
        prefixed=False,
        ge=1,
    )
    train_steps: int | None = setting(
        None,
        "Optimizer steps instead of a token budget (empty: derived from the training tokens; given, they win)",
        title="Training steps",
        prefixed=False,
        ge=1,
    )
    seeds: list[int] = setting(
        [1234, 1235],
        "One training run per arm and seed: the report reads differences against the spread across seeds",
        title="Seeds",
        prefixed=False,
        min_length=1,
    )
    max_epochs: float = setting(
        4.0,
        "Flag an arm whose training tokens exceed this many passes over its corpus (Muennighoff et al. 2023, "
        "arXiv 2305.16264: up to about 4 epochs cost little against unique data)",
        title="Epochs before a flag",
        prefixed=False,
        gt=0,
    )
    equalize_corpora: bool = setting(
        False,
        "Cut every arm's corpus to the smallest arm's tokens (a seeded random subset of its documents), so "
        "that no arm sees more unique text",
        title="Equalize corpora",
        prefixed=False,
    )
    eval_every: int = setting(
        10,
        "Checkpoint and score the model every so many steps (and at the last): the report's scores over "
        "training tokens",
        title="Evaluate every N steps",
        prefixed=False,
        ge=1,
    )
    device: Literal["auto", "cpu", "cuda"] = setting("auto", "Training device", title="Device")
    nproc: int = setting(
        1, "torchrun processes (GPUs) per model; 1 runs a single process", title="Processes per node", ge=1
    )
    arguments: list[str] = setting(
        [],
        'More `python -m dripper.pretrain train` flags, e.g. ["--global-batch-size", "512"] (CLI: after --)',
        title="More training options",
        cli=False,
    )

    @model_validator(mode="after")
    def _one_budget(self) -> PretrainStageConfig:
        if self.train_tokens is None and self.train_steps is None:
            raise ValueError("give train_tokens (the budget) or train_steps")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds {self.seeds}: each seed once")
        return self

    @property
    def budget(self) -> str:
        """The budget as the run folder names it: ``{steps}steps`` or ``{tokens}tokens``."""
        return f"{self.train_steps}steps" if self.train_steps is not None else f"{self.train_tokens}tokens"

    def budget_arguments(self) -> list[str]:
        """``--train-steps N`` when steps are given, else ``--train-tokens N`` (the CLI derives the steps)."""
        if self.train_steps is not None:
            return ["--train-steps", str(self.train_steps)]
        return ["--train-tokens", str(self.train_tokens)]

    def train_arguments(
        self,
        out_dir: str,
        tokens: str,
        tokenizer: str,
        seed: int | None = None,
        data_token_limit: int | None = None,
    ) -> list[str]:
        """``python -m dripper.pretrain train`` flags: every ``eval_every`` steps a checkpoint, all kept (each is scored).

        Args:
            out_dir: The run folder (``pretrain/{run}``); training resumes from its latest checkpoint.
            tokens: The tokens folder.
            tokenizer: The tokenizer's folder.
            seed: The run's seed (default: the first of ``seeds``).
            data_token_limit: Train on a subset of this many tokens of the corpus (``equalize_corpora``).
        """
        seed = self.seeds[0] if seed is None else seed
        limit = ["--data-token-limit", str(data_token_limit)] if data_token_limit else []
        return [
            "train", "--out-dir", out_dir, "--data", tokens, "--tokenizer", tokenizer,
            "--model", self.model, *self.budget_arguments(), "--seed", str(seed), *limit,
            "--device", self.device, "--save-interval", str(self.eval_every), "--keep-checkpoints", "0",
            *self.arguments,
        ]  # fmt: skip

    def launcher(self) -> list[str] | None:
        """``torchrun`` on this machine when ``nproc`` > 1 (data parallel), else ``None`` (one process)."""
        if self.nproc <= 1:
            return None
        return ["torchrun", "--standalone", "--nproc-per-node", str(self.nproc), "-m"]

    @staticmethod
    def export_arguments(run_dir: str, hf_root: str) -> list[str]:
        """``python -m dripper.pretrain export`` flags: every checkpoint of the run, in Hugging Face format."""
        return ["export", "--checkpoint", run_dir, "--out", hf_root, "--every-checkpoint"]
