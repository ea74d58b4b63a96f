"""Train the 1B Llama-style config a few steps on one GPU; report tokens/s and model FLOP utilisation.

Needs only torch, megatron-core and this repository (no network, no dataset: random tokens). It runs the
training step of ``dripper.pretrain.train`` (Megatron-core GPTModel, SDPA attention, bf16 autocast over fp32
weights, fused AdamW, global-norm clipping) and times the steps after a warm-up::

    python bench/pretrain_gpu.py                       # llama-1b, bf16, on cuda:0
    python bench/pretrain_gpu.py --model tiny --device cpu --precision fp32 --steps 3   # logic check

MFU = model FLOPs per token (6N + 12·layers·hidden·seq, PaLM appendix B) x tokens/s / peak. The peak is
the dense bf16 datasheet figure of the GPU (989 TFLOP/s for H100/H200 SXM) unless ``--peak-tflops`` says
otherwise; the script also measures a large bf16 matmul in the same run and reports MFU against that
ceiling. It stops timing early when ``--max-seconds`` is reached, so it ends well under 6 minutes.
``--jsonl FILE`` appends one JSON line per training step as it ends and the result line last, so a run
cut off by a time limit keeps its step times (``bench/gpu_suite.py`` uses that).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dripper.pretrain.config import get_model_config, padded_vocab_size  # noqa: E402

# Dense (no sparsity) bf16 tensor-core peaks from the vendors' datasheets, TFLOP/s.
DATASHEET_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}


@dataclass(slots=True)
class BenchConfig:
    model: str = "llama-1b"
    vocab_size: int = 128256
    seq_length: int | None = None
    micro_batch_size: int = 8
    accumulation: int = 1
    steps: int = 10
    warmup_steps: int = 3
    precision: str = "bf16"
    device: str = "auto"
    peak_tflops: float | None = None
    measure_matmul: bool = True
    max_seconds: float = 240.0


def datasheet_peak_tflops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, value in DATASHEET_BF16_TFLOPS.items():
        if key in name:
            return value
    return None


def measure_matmul_tflops(device: torch.device, size: int = 8192, repeats: int = 10) -> float | None:
    """bf16 ``size``^3 matmul rate on random data (the practical ceiling), TFLOP/s; None on CPU."""
    if device.type != "cuda":
        return None
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    torch.cuda.synchronize()
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e12


def run_benchmark(bench: BenchConfig, on_step: Callable[[dict], None] | None = None) -> dict:
    """Build the model, train ``warmup_steps + steps`` steps on random tokens, return the measurements.

    ``on_step`` gets ``{"step", "seconds", "loss", "warmup"}`` after every step.
    """
    from dripper.pretrain.config import TrainConfig
    from dripper.pretrain.model import build_model, init_parallel, set_seed
    from dripper.pretrain.train import build_optimizer, clip_grad_norm, forward_backward

    wall_start = time.perf_counter()
    state = init_parallel(1, 1, bench.device)
    device = state.device
    preset = get_model_config(bench.model)
    model_config = preset.with_vocab(padded_vocab_size(bench.vocab_size))
    if bench.seq_length:
        from dataclasses import replace

        model_config = replace(model_config, seq_length=bench.seq_length)
    seq = model_config.seq_length
    set_seed(1234)
    model = build_model(model_config, bench.precision, device)
    # Only the optimizer hyper-parameters of TrainConfig are used; paths are placeholders.
    optim_config = TrainConfig(out_dir=Path("."), data=["random"], tokenizer=Path("."), lr=3e-4, min_lr=3e-5)
    optimizer = build_optimizer(model, optim_config, device)
    generator = torch.Generator(device="cpu").manual_seed(0)

    def random_batch() -> dict[str, torch.Tensor]:
        tokens = torch.randint(0, bench.vocab_size, (bench.micro_batch_size, seq + 1), generator=generator)
        return {
            "tokens": tokens[:, :-1].contiguous(),
            "labels": tokens[:, 1:].contiguous(),
            "loss_mask": torch.ones(bench.micro_batch_size, seq),
            "position_ids": torch.arange(seq).unsqueeze(0).expand(bench.micro_batch_size, -1).contiguous(),
        }

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    model.train()
    step_seconds: list[float] = []
    losses: list[float] = []
    total_steps = bench.warmup_steps + bench.steps
    for step in range(total_steps):
        batches = [random_batch() for _ in range(bench.accumulation)]
        synchronize()
        start = time.perf_counter()
        loss = forward_backward(model, batches, device, bench.precision)
        clip_grad_norm(model, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize()
        seconds = time.perf_counter() - start
        losses.append(loss)
        if step >= bench.warmup_steps:
            step_seconds.append(seconds)
        if on_step is not None:
            warmup = step < bench.warmup_steps
            on_step({"step": step, "seconds": round(seconds, 4), "loss": round(loss, 4), "warmup": warmup})
        if time.perf_counter() - wall_start > bench.max_seconds and step_seconds:
            break

    tokens_per_step = bench.micro_batch_size * bench.accumulation * seq
    mean_seconds = sum(step_seconds) / len(step_seconds)
    tokens_per_second = tokens_per_step / mean_seconds
    flops_per_token = model_config.flops_per_token(seq)
    achieved_tflops = flops_per_token * tokens_per_second / 1e12
    peak = bench.peak_tflops or datasheet_peak_tflops(device)
    matmul = measure_matmul_tflops(device) if bench.measure_matmul else None
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "config": asdict(bench),
        "parameters": model_config.num_parameters(),
        "seq_length": seq,
        "tokens_per_step": tokens_per_step,
        "timed_steps": len(step_seconds),
        "step_seconds_mean": mean_seconds,
        "step_seconds_min": min(step_seconds),
        "tokens_per_second": tokens_per_second,
        "model_flops_per_token": flops_per_token,
        "achieved_tflops": achieved_tflops,
        "peak_tflops": peak,
        "mfu": achieved_tflops / peak if peak else None,
        "measured_matmul_tflops": matmul,
        "mfu_vs_measured_matmul": achieved_tflops / matmul if matmul else None,
        "max_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "losses": losses,
        "wall_seconds": time.perf_counter() - wall_start,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    defaults = BenchConfig()
    parser.add_argument("--model", default=defaults.model)
    parser.add_argument(
        "--vocab-size", type=int, default=defaults.vocab_size, help="default: Llama 3's 128256"
    )
    parser.add_argument("--seq-length", type=int, default=None)
    parser.add_argument("--micro-batch-size", type=int, default=defaults.micro_batch_size)
    parser.add_argument("--accumulation", type=int, default=defaults.accumulation)
    parser.add_argument("--steps", type=int, default=defaults.steps, help="timed steps")
    parser.add_argument("--warmup-steps", type=int, default=defaults.warmup_steps)
    parser.add_argument("--precision", choices=["bf16", "fp32"], default=defaults.precision)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default=defaults.device)
    parser.add_argument("--peak-tflops", type=float, default=None, help="default: the datasheet's dense bf16")
    parser.add_argument("--no-matmul", action="store_true", help="skip the matmul ceiling measurement")
    parser.add_argument("--max-seconds", type=float, default=defaults.max_seconds)
    parser.add_argument("--out", type=Path, default=None, help="also write the result JSON here")
    parser.add_argument(
        "--jsonl", type=Path, default=None, help="append a JSON line per step, then the result line, here"
    )
    parser.add_argument("--tag", default=None, help='a run name added to every --jsonl line (as "run")')
    args = parser.parse_args(argv)

    def append(record: dict) -> None:
        if args.jsonl is not None:
            tagged = {"run": args.tag, **record} if args.tag else record
            with args.jsonl.open("a", encoding="utf-8") as out:
                out.write(json.dumps(tagged) + "\n")

    bench = BenchConfig(
        model=args.model,
        vocab_size=args.vocab_size,
        seq_length=args.seq_length,
        micro_batch_size=args.micro_batch_size,
        accumulation=args.accumulation,
        steps=args.steps,
        warmup_steps=args.warmup_steps,
        precision=args.precision,
        device=args.device,
        peak_tflops=args.peak_tflops,
        measure_matmul=not args.no_matmul,
        max_seconds=args.max_seconds,
    )
    result = run_benchmark(bench, on_step=lambda step: append({"pretrain_step": step}))
    append({"pretrain_result": result})
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    mfu = f"{result['mfu']:.1%}" if result["mfu"] is not None else "n/a (no datasheet peak for this device)"
    print(
        f"\n{result['device']}: {result['parameters'] / 1e9:.2f}B params, {result['tokens_per_second']:,.0f} tokens/s, "
        f"{result['achieved_tflops']:.1f} TFLOP/s, MFU {mfu}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
