"""Typed model and training configurations for the extractor-ablation pretraining runs.

Two model presets: ``llama-1b`` (the paper's scale) and ``tiny`` (CPU tests and smoke runs). A
:class:`TrainConfig` says what data to read, how long to train and how to parallelise; the CLI options map
one to one onto its fields, and it round-trips through JSON (it is stored with every checkpoint).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from dripper.config.pretrain import PretrainStageConfig

Precision = Literal["bf16", "fp32"]
Device = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A Llama-style decoder: RoPE, RMSNorm, SwiGLU MLP, grouped-query attention, no biases.

    Attributes:
        num_layers: Transformer layers.
        hidden_size: Model width.
        ffn_hidden_size: SwiGLU inner width (each of the gate and up projections).
        num_attention_heads: Query heads.
        num_query_groups: Key/value heads (grouped-query attention); equal to the heads for plain MHA.
        seq_length: Training context length (and the RoPE table length).
        vocab_size: Token ids the model accepts; ``None`` takes the tokenizer's size at training time.
        rope_theta: RoPE base period.
        norm_eps: RMSNorm epsilon.
        tie_embeddings: Share the input embedding and the output projection.
        init_std: Standard deviation of the normal weight initialisation.
    """

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    seq_length: int
    vocab_size: int | None = None
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                f"{self.num_attention_heads}"
            )
        if self.num_attention_heads % self.num_query_groups:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of num_query_groups "
                f"{self.num_query_groups}"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def with_vocab(self, vocab_size: int) -> ModelConfig:
        return replace(self, vocab_size=vocab_size)

    def num_parameters(self, include_embeddings: bool = True) -> int:
        """Parameter count of the model (``vocab_size`` must be set)."""
        if self.vocab_size is None:
            raise ValueError("vocab_size is not set; call with_vocab(tokenizer size) first")
        h, kv = self.hidden_size, self.num_query_groups * self.head_dim
        attention = h * h + 2 * h * kv + h * h  # q, k, v, o
        mlp = 3 * h * self.ffn_hidden_size  # gate, up, down
        per_layer = attention + mlp + 2 * h  # two RMSNorm weights
        total = self.num_layers * per_layer + h  # final norm
        if include_embeddings:
            total += self.vocab_size * h * (1 if self.tie_embeddings else 2)
        return total

    def flops_per_token(self, seq_length: int | None = None) -> float:
        """Training FLOPs per token (forward + backward) in the PaLM appendix-B convention.

        ``6 * N`` for the matrix multiplications with the weights (N excludes the input embedding, a
        lookup, but includes the output projection) plus ``12 * layers * hidden * seq`` for attention.
        """
        n = self.num_parameters(include_embeddings=False) + self.vocab_size * self.hidden_size
        seq = seq_length or self.seq_length
        return 6.0 * n + 12.0 * self.num_layers * self.hidden_size * seq


# The paper ("AICC", arXiv 2511.16397) says only that its ablation models have about 1B parameters and
# trained on ~62B tokens per corpus. These numbers are Meta's published Llama 3.2 1B architecture
# (its config.json: hidden 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, RoPE theta 500000, RMSNorm eps
# 1e-5, tied embeddings), with a 2048-token training context as in common 1B data ablations (DCLM, FineWeb).
# vocab_size comes from the tokenizer the refinement stage used (Llama 3's 128,256 gives 1.24B parameters).
LLAMA_1B = ModelConfig(
    num_layers=16,
    hidden_size=2048,
    ffn_hidden_size=8192,
    num_attention_heads=32,
    num_query_groups=8,
    seq_length=2048,
    rope_theta=500000.0,
    norm_eps=1e-5,
    tie_embeddings=True,
)

# Small enough to train a few dozen steps on two CPU cores in seconds; head_dim 32 keeps GQA (4 heads over
# 2 groups) and every code path of the 1B model.
TINY = ModelConfig(
    num_layers=2,
    hidden_size=64,
    ffn_hidden_size=176,
    num_attention_heads=4,
    num_query_groups=2,
    seq_length=64,
    rope_theta=10000.0,
    norm_eps=1e-5,
    tie_embeddings=False,
)

MODEL_PRESETS: dict[str, ModelConfig] = {"llama-1b": LLAMA_1B, "tiny": TINY}


def get_model_config(name: str) -> ModelConfig:
    """A preset by name (``llama-1b``, ``tiny``)."""
    try:
        return MODEL_PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown model preset {name!r}; choose one of {', '.join(MODEL_PRESETS)}") from None


def padded_vocab_size(vocab_size: int, tensor_parallel: int = 1, multiple: int = 128) -> int:
    """Round the tokenizer's size up so the embedding splits evenly over tensor-parallel ranks."""
    step = multiple * tensor_parallel
    return int(math.ceil(vocab_size / step) * step)


@dataclass(slots=True)
class TrainConfig:
    """One training run. Paths may be relative; they are resolved when the run starts.

    Attributes:
        out_dir: Run folder: ``checkpoints/``, ``train_log.jsonl``, ``run.json``.
        model: Preset name (``tiny``, ``llama-1b``).
        data: Megatron dataset prefixes (``.../name`` for ``name.bin``/``name.idx``) or folders holding them.
        data_weights: One weight per ``data`` entry (a folder's weight is split evenly over its files);
            ``None`` weights each entry by its size.
        tokenizer: Folder of a Hugging Face tokenizer (``tokenizer.json``): vocabulary size and end-of-document id.
        seq_length: Context length; ``None`` takes the model preset's.
        micro_batch_size: Sequences per rank per forward pass.
        global_batch_size: Sequences per optimizer step over all data-parallel ranks; a multiple of
            ``micro_batch_size * data_parallel_size`` (the rest is gradient accumulation).
        train_steps: Optimizer steps in total (a resumed run continues up to this number).
        train_tokens: A token budget instead: ``train_steps`` becomes ``ceil(train_tokens / (global_batch_size
            × seq_length))`` (the run trains on that many steps' tokens, at least the budget).
        data_token_limit: Train on a seeded random subset of the data's documents holding at most this many
            tokens (the ablation's ``equalize_corpora``; the subset is the same for every ``seed``).
        lr, min_lr, warmup_steps: Linear warm-up to ``lr``, then cosine decay to ``min_lr`` at ``train_steps``.
        weight_decay, adam_beta1, adam_beta2, adam_eps, grad_clip: AdamW and gradient clipping.
        seed: Seed of the weight initialisation and of the dataset shuffling.
        save_interval: Save a checkpoint every so many steps (and always at the end).
        keep_checkpoints: Keep only the newest so many checkpoints (0 keeps all).
        tensor_parallel, pipeline_parallel: Megatron model-parallel sizes; the data-parallel size is the
            world size divided by their product.
        precision: ``bf16`` (autocast over fp32 master weights; GPU) or ``fp32``.
        device: ``auto`` takes CUDA when available.
        eod_mask_loss: Do not train on predicting the end-of-document token.
        num_workers: DataLoader worker processes per rank.
        exit_at_step: Stop (with a checkpoint) after this step although the schedule runs to ``train_steps``
            (for jobs with a wall-time limit; the next call resumes).
    """

    out_dir: Path
    data: list[str]
    tokenizer: Path
    model: str = PretrainStageConfig.default("model")
    data_weights: list[float] | None = None
    seq_length: int | None = None
    micro_batch_size: int = 4
    global_batch_size: int = 4
    train_steps: int = 20
    train_tokens: int | None = None
    data_token_limit: int | None = None
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 2
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    grad_clip: float = 1.0
    seed: int = 1234
    save_interval: int = PretrainStageConfig.default(
        "eval_every"
    )  # the stage checkpoints (and scores) every eval_every
    keep_checkpoints: int = 2
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    precision: Precision = "fp32"
    device: Device = PretrainStageConfig.default("device")
    eod_mask_loss: bool = False
    num_workers: int = 0
    exit_at_step: int | None = None

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        self.tokenizer = Path(self.tokenizer)
        self.data = [str(item) for item in self.data]
        if not self.data:
            raise ValueError("no training data given; pass --data PREFIX_OR_FOLDER (repeatable)")
        if self.data_weights is not None and len(self.data_weights) != len(self.data):
            raise ValueError(
                f"{len(self.data_weights)} --data-weights for {len(self.data)} --data entries; give one each"
            )
        get_model_config(self.model)
        for name in ("train_tokens", "data_token_limit"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be at least 1")
        if self.data_token_limit is not None and self.data_weights is not None:
            raise ValueError("--data-token-limit cuts one corpus: give no --data-weights with it")
        if self.train_tokens is not None:
            per_step = self.global_batch_size * self.model_config().seq_length
            self.train_steps = max(1, math.ceil(self.train_tokens / per_step))
        for name in (
            "micro_batch_size",
            "global_batch_size",
            "train_steps",
            "tensor_parallel",
            "pipeline_parallel",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be at least 1")
        if self.global_batch_size % self.micro_batch_size:
            raise ValueError(
                f"global_batch_size {self.global_batch_size} is not a multiple of micro_batch_size "
                f"{self.micro_batch_size}"
            )
        if self.save_interval < 1:
            raise ValueError(f"save_interval={self.save_interval}: must be at least 1")
        if self.precision not in ("bf16", "fp32"):
            raise ValueError(f"precision {self.precision!r}: use bf16 or fp32")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device {self.device!r}: use auto, cpu or cuda")

    def model_config(self) -> ModelConfig:
        """The preset with this run's context length (vocabulary still unset)."""
        preset = get_model_config(self.model)
        return replace(preset, seq_length=self.seq_length) if self.seq_length else preset

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["out_dir"] = str(self.out_dir)
        data["tokenizer"] = str(self.tokenizer)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


def model_config_to_json(config: ModelConfig) -> dict[str, Any]:
    return asdict(config)


def model_config_from_json(data: dict[str, Any]) -> ModelConfig:
    known = {f.name for f in fields(ModelConfig)}
    return ModelConfig(**{key: value for key, value in data.items() if key in known})


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
