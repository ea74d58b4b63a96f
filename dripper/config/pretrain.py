"""The pretrain stage's config: the model preset, its steps, checkpoints and devices."""

from __future__ import annotations

from typing import Literal

from dripper.config.settings import StageConfig, setting


class PretrainStageConfig(StageConfig):
    """``tokens/`` → a model in ``pretrain/{run}/``, every checkpoint exported.

    Attributes:
        model: Model preset (``dripper.pretrain.config``).
        train_steps: Optimizer steps.
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
    train_steps: int = setting(20, "Optimizer steps", title="Training steps", prefixed=False, ge=1)
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

    def train_arguments(self, out_dir: str, tokens: str, tokenizer: str) -> list[str]:
        """``python -m dripper.pretrain train`` flags: every ``eval_every`` steps a checkpoint, all kept (each is scored).

        Args:
            out_dir: The run folder (``pretrain/{run}``); training resumes from its latest checkpoint.
            tokens: The tokens folder.
            tokenizer: The tokenizer's folder.
        """
        return [
            "train", "--out-dir", out_dir, "--data", tokens, "--tokenizer", tokenizer,
            "--model", self.model, "--train-steps", str(self.train_steps), "--device", self.device,
            "--save-interval", str(self.eval_every), "--keep-checkpoints", "0", *self.arguments,
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
