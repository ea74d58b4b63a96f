"""The training loop: Megatron-core GPT model, AdamW, data parallelism, checkpoints, a per-step JSONL log.

One code path for both launch modes:

- GPUs: ``torchrun --nproc-per-node N -m dripper.pretrain train ...``. Data parallelism is torch DDP over Megatron's
  data-parallel group; ``--tensor-parallel``/``--pipeline-parallel`` go to Megatron's model-parallel groups
  (pipeline parallelism runs Megatron's forward-backward schedule). bf16 autocast over fp32 master weights.
- CPU: a single process with the tiny model (``dripper.pretrain.cpu_compat`` patches the few CUDA assumptions).

Every step appends ``{"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "elapsed_s"}`` to
``{out_dir}/train_log.jsonl``; a run started on a folder that has checkpoints resumes from the latest one.
On several nodes, ``out_dir`` must be on a filesystem every rank sees (rank 0 writes the log and metadata).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dripper.pretrain import checkpoint as ckpt
from dripper.pretrain.config import ModelConfig, TrainConfig, dumps, model_config_to_json, padded_vocab_size
from dripper.pretrain.data import build_gpt_dataset, micro_batches, resolve_blend, tokenizer_info
from dripper.pretrain.model import ParallelState, build_model, init_parallel, set_seed

logger = logging.getLogger(__name__)

TRAIN_LOG = "train_log.jsonl"
RUN_FILE = "run.json"


@dataclass(slots=True)
class TrainResult:
    """What a call of :func:`train` did."""

    out_dir: Path
    start_step: int
    final_step: int
    losses: list[float] = field(default_factory=list)
    checkpoint: Path | None = None
    tokens_per_second: float | None = None


def lr_at(step: int, config: TrainConfig) -> float:
    """Linear warm-up over ``warmup_steps`` then cosine decay to ``min_lr`` at ``train_steps`` (0-based step)."""
    if config.warmup_steps and step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    span = max(1, config.train_steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    return config.min_lr + 0.5 * (config.lr - config.min_lr) * (1 + math.cos(math.pi * progress))


def build_optimizer(model: torch.nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW; no weight decay on 1-D parameters (RMSNorm weights)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups,
        lr=config.lr,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_eps,
        fused=device.type == "cuda",
    )


def clip_grad_norm(model: torch.nn.Module, max_norm: float) -> float:
    """Clip by the global gradient norm over all model-parallel shards; returns the norm before clipping.

    Parameters duplicated over tensor-parallel ranks (norm weights) and the tied embedding copy on the last
    pipeline stage are counted once.
    """
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    counted = [
        p.grad
        for p in model.parameters()
        if p.grad is not None
        and param_is_not_tensor_parallel_duplicate(p)
        and not getattr(p, "shared", False)
    ]
    device = grads[0].device if grads else torch.device("cpu")
    squares = torch.zeros((), dtype=torch.float32, device=device)
    for grad in counted:
        squares += grad.detach().float().pow(2).sum()
    if parallel_state.get_model_parallel_group().size() > 1:
        torch.distributed.all_reduce(squares, group=parallel_state.get_model_parallel_group())
    norm = squares.sqrt()
    if max_norm > 0:
        scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        torch._foreach_mul_(grads, scale)
    return float(norm)


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}


def _autocast(device: torch.device, precision: str):
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def masked_mean_loss(per_token_loss: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Mean of Megatron's per-token losses (``[batch, seq]``) over unmasked tokens."""
    mask = loss_mask.float()
    return (per_token_loss.float() * mask).sum() / mask.sum().clamp(min=1.0)


def forward_backward(
    model: torch.nn.Module,
    batches: list[dict[str, torch.Tensor]],
    device: torch.device,
    precision: str,
) -> float:
    """Gradient accumulation over micro-batches (pipeline size 1); returns the mean loss of this rank."""
    total = 0.0
    for index, batch in enumerate(batches):
        batch = _to_device(batch, device)
        last = index == len(batches) - 1
        sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
        with sync:
            with _autocast(device, precision):
                per_token = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
            loss = masked_mean_loss(per_token, batch["loss_mask"]) / len(batches)
            loss.backward()
        total += float(loss.detach())
    return total


def pipeline_forward_backward(
    model: torch.nn.Module,
    batches: list[dict[str, torch.Tensor]],
    config: TrainConfig,
    model_config: ModelConfig,
    device: torch.device,
) -> float:
    """Megatron's pipeline schedule (GPU only); returns the mean loss on the last stage, 0 elsewhere."""
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func

    iterator = iter(batches)

    def forward_step(data_iterator: Iterator[dict[str, torch.Tensor]], stage_model: torch.nn.Module):
        batch = _to_device(next(data_iterator), device)
        with _autocast(device, config.precision):
            output = stage_model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])

        def loss_func(per_token: torch.Tensor):
            loss = masked_mean_loss(per_token, batch["loss_mask"])
            return loss, {"lm loss": loss.detach()}

        return output, loss_func

    unwrapped = model.module if hasattr(model, "module") else model
    if hasattr(model, "no_sync"):
        unwrapped.config.no_sync_func = model.no_sync
    results = get_forward_backward_func()(
        forward_step_func=forward_step,
        data_iterator=iterator,
        model=[model],
        num_microbatches=len(batches),
        seq_length=model_config.seq_length,
        micro_batch_size=config.micro_batch_size,
        forward_only=False,
    )
    _allreduce_tied_embedding_grads(unwrapped)
    if parallel_state.is_pipeline_last_stage() and results:
        return float(sum(float(r["lm loss"]) for r in results) / len(results))
    return 0.0


def _allreduce_tied_embedding_grads(model: torch.nn.Module) -> None:
    """Sum the gradients of the embedding shared by the first and last pipeline stages (as Megatron's DDP does)."""
    from megatron.core import parallel_state

    if parallel_state.get_pipeline_model_parallel_world_size() == 1:
        return
    if not getattr(model, "share_embeddings_and_output_weights", False):
        return
    if parallel_state.is_rank_in_embedding_group(ignore_virtual=True):
        weight = model.shared_embedding_or_output_weight()
        if weight.grad is not None:
            torch.distributed.all_reduce(weight.grad, group=parallel_state.get_embedding_group())


def _mean_over_data_parallel(value: float, device: torch.device) -> float:
    from megatron.core import parallel_state

    group = parallel_state.get_data_parallel_group()
    if group.size() == 1 and parallel_state.get_pipeline_model_parallel_world_size() == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float32, device=device)
    torch.distributed.all_reduce(tensor, group=group)
    tensor /= group.size()
    if parallel_state.get_pipeline_model_parallel_world_size() > 1:
        # Only the last stage holds the loss: take it from there.
        torch.distributed.broadcast(
            tensor,
            src=parallel_state.get_pipeline_model_parallel_last_rank(),
            group=parallel_state.get_pipeline_model_parallel_group(),
        )
    return float(tensor)


def _truncate_log(path: Path, last_step: int) -> None:
    """Drop log lines past ``last_step`` (steps after the checkpoint a resumed run restarts from)."""
    if not path.exists():
        return
    kept = [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if line and json.loads(line)["step"] <= last_step
    ]
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def read_train_log(path: Path | str) -> list[dict[str, Any]]:
    """The per-step records of a ``train_log.jsonl`` (a run folder or the file), last record per step."""
    path = Path(path)
    if path.is_dir():
        path = path / TRAIN_LOG
    records: dict[int, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            records[int(record["step"])] = record
    return [records[step] for step in sorted(records)]


def setup_model(config: TrainConfig, state: ParallelState) -> tuple[torch.nn.Module, ModelConfig]:
    """Build this rank's model for ``config`` with the tokenizer's (padded) vocabulary; seeded."""
    info = tokenizer_info(config.tokenizer)
    model_config = config.model_config().with_vocab(padded_vocab_size(info.vocab_size, state.tensor_parallel))
    set_seed(config.seed)
    model = build_model(model_config, config.precision, state.device)
    return model, model_config


def train(config: TrainConfig) -> TrainResult:
    """Train (or resume) the run in ``config.out_dir`` up to ``config.train_steps`` optimizer steps.

    Call on every rank (under torchrun) or in a single process. Leaves ``torch.distributed`` initialised.

    Returns:
        The steps done by this call, their losses (as logged), the last checkpoint and the mean throughput.
    """
    state = init_parallel(config.tensor_parallel, config.pipeline_parallel, config.device)
    if config.precision == "bf16" and state.device.type != "cuda":
        # Megatron's linear layers restore autocast in backward for CUDA only (custom_bwd device_type="cuda").
        raise ValueError(
            "--precision bf16 needs a GPU (autocast through Megatron's layers is CUDA-only); use fp32"
        )
    per_step = config.micro_batch_size * state.data_parallel
    if config.global_batch_size % per_step:
        raise ValueError(
            f"global_batch_size {config.global_batch_size} is not a multiple of micro_batch_size x data-parallel "
            f"size ({config.micro_batch_size} x {state.data_parallel})"
        )
    accumulation = config.global_batch_size // per_step
    out_dir = config.out_dir.resolve()
    ckpt_root = out_dir / "checkpoints"
    log_path = out_dir / TRAIN_LOG
    if state.rank == 0:
        ckpt_root.mkdir(parents=True, exist_ok=True)

    model, model_config = setup_model(config, state)
    optimizer = build_optimizer(model, config, state.device)

    start_step, consumed = 0, 0
    latest = ckpt.find_latest(ckpt_root)
    if latest is not None:
        meta = ckpt.load_checkpoint(latest, model, optimizer)
        start_step, consumed = meta.step, meta.consumed_samples
        logger.info("resuming from %s (step %d)", latest, start_step)
    prefixes, weights = resolve_blend(config.data, config.data_weights)
    data = training_data(prefixes, config, out_dir, state.rank)
    if data["prefix"]:
        prefixes = [data["prefix"]]
    if state.rank == 0:
        _truncate_log(log_path, start_step)
        run = {
            "train": config.to_json(),
            "model": model_config_to_json(model_config),
            "parallel": _parallel(state),
            "data": {
                **data,
                "train_tokens": config.train_steps * config.global_batch_size * model_config.seq_length,
            },
        }
        (out_dir / RUN_FILE).write_text(dumps(run), encoding="utf-8")
    result = TrainResult(out_dir=out_dir, start_step=start_step, final_step=start_step, checkpoint=latest)
    if start_step >= min(config.train_steps, config.exit_at_step or config.train_steps):
        return result

    dataset = build_gpt_dataset(
        prefixes,
        weights,
        num_samples=config.train_steps * config.global_batch_size,
        seq_length=model_config.seq_length,
        tokenizer=tokenizer_info(config.tokenizer),
        seed=config.seed,
        cache_dir=out_dir / "data_cache",
        eod_mask_loss=config.eod_mask_loss,
    )
    batches = micro_batches(
        dataset, consumed, config.micro_batch_size, state.dp_rank, state.data_parallel, config.num_workers
    )

    if state.data_parallel > 1:
        from megatron.core import parallel_state

        model = torch.nn.parallel.DistributedDataParallel(
            model,
            device_ids=[state.local_rank] if state.device.type == "cuda" else None,
            process_group=parallel_state.get_data_parallel_group(),
        )
    unwrapped = model.module if hasattr(model, "module") else model
    meta_base = {
        "train": config.to_json(),
        "model": model_config_to_json(model_config),
        "parallel": _parallel(state),
    }
    tokens_per_step = config.global_batch_size * model_config.seq_length
    log_file = log_path.open("a", encoding="utf-8") if state.rank == 0 else None
    run_start = time.perf_counter()
    timed_tokens, timed_seconds = 0, 0.0
    try:
        model.train()
        last_step = min(config.train_steps, config.exit_at_step or config.train_steps)
        for step in range(start_step, last_step):
            step_start = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, config)
            micro = [next(batches) for _ in range(accumulation)]
            if state.pipeline_parallel > 1:
                loss = pipeline_forward_backward(model, micro, config, model_config, state.device)
            else:
                loss = forward_backward(model, micro, state.device, config.precision)
            grad_norm = clip_grad_norm(unwrapped, config.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            loss = _mean_over_data_parallel(loss, state.device)
            consumed += config.global_batch_size
            if state.device.type == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - step_start
            if step > start_step:  # the first step of a run pays for warm-up
                timed_tokens += tokens_per_step
                timed_seconds += seconds
            record = {
                "step": step + 1,
                "loss": loss,
                "lr": optimizer.param_groups[0]["lr"],
                "grad_norm": grad_norm,
                "tokens": consumed * model_config.seq_length,
                "tokens_per_s": tokens_per_step / seconds,
                "elapsed_s": time.perf_counter() - run_start,
            }
            result.losses.append(loss)
            result.final_step = step + 1
            if log_file is not None:
                log_file.write(json.dumps(record) + "\n")
                log_file.flush()
            if not math.isfinite(loss):
                raise FloatingPointError(f"step {step + 1}: loss is {loss}; lower --lr or check the data")
            if (step + 1) % config.save_interval == 0 or step + 1 == last_step:
                result.checkpoint = ckpt.save_checkpoint(
                    ckpt_root,
                    step + 1,
                    consumed,
                    unwrapped,
                    optimizer,
                    meta_base,
                    keep=config.keep_checkpoints,
                )
    finally:
        if log_file is not None:
            log_file.close()
    if timed_seconds > 0:
        result.tokens_per_second = timed_tokens / timed_seconds
    return result


def training_data(prefixes: list[str], config: TrainConfig, out_dir: Path, rank: int) -> dict[str, Any]:
    """The unique text the run trains on: the whole data, or (``data_token_limit``) the subset rank 0 writes
    to ``{out_dir}/data_subset/corpus`` (:func:`dripper.pretrain.data.subset_corpus`, seed 0 for every
    training seed). Returns its ``prefix`` (``None``: the whole data), ``tokens`` and the whole data's
    ``corpus_tokens``."""
    from dripper.pretrain.data import count_tokens, subset_corpus

    if config.data_token_limit is None:
        tokens = sum(count_tokens(prefix) for prefix in prefixes)
        return {"prefix": None, "tokens": tokens, "corpus_tokens": tokens}
    target = out_dir / "data_subset" / "corpus"
    if rank == 0:
        data = subset_corpus(prefixes, config.data_token_limit, target)
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        torch.distributed.barrier()
    if rank != 0:
        data = subset_corpus(prefixes, config.data_token_limit, target)  # reads back rank 0's subset
    return data


def _parallel(state: ParallelState) -> dict[str, int]:
    return {
        "world_size": state.world_size,
        "tensor_parallel": state.tensor_parallel,
        "pipeline_parallel": state.pipeline_parallel,
        "data_parallel": state.data_parallel,
    }
