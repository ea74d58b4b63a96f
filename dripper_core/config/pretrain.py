"""The pretrain stage's config: the model preset, its steps, checkpoints and devices."""

from __future__ import annotations

from typing import Literal

from dripper_core.config.settings import StageConfig, setting


class PretrainStageConfig(StageConfig):
    """``tokens/`` → a model in ``pretrain/{run}/``, every checkpoint exported.

    Attributes:
        model: Model preset (``pretrain.config``).
        train_steps: Optimizer steps.
        eval_every: Checkpoint (and later score) every N steps, and at the last.
        device: ``auto``, ``cpu`` or ``cuda``.
        nproc: torchrun processes (GPUs) per model; 1 runs a single process.
        arguments: More ``python -m pretrain train`` flags.
    """

    stage = "pretrain"
    form_prefix = "pretrain_"
    form_section = "Pretraining and evaluation"

    model: Literal["tiny", "llama-1b"] = setting(
        "tiny",
        "Model preset (pretrain.config): tiny for a smoke run, llama-1b as in the paper",
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
        'More `python -m pretrain train` flags, e.g. ["--global-batch-size", "512"] (CLI: after --)',
        title="More training options",
        cli=False,
    )
