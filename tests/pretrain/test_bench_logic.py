"""bench/pretrain_gpu.py's logic, run on CPU with the tiny config (the real run needs an H200)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.core")

BENCH = Path(__file__).resolve().parents[2] / "bench" / "pretrain_gpu.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("pretrain_gpu_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def test_bench_reports_throughput_and_mfu_fields_on_cpu():
    bench = load_bench()
    config = bench.BenchConfig(
        model="tiny",
        vocab_size=512,
        micro_batch_size=2,
        steps=2,
        warmup_steps=1,
        precision="fp32",
        device="cpu",
        measure_matmul=False,
        peak_tflops=1.0,
    )
    result = bench.run_benchmark(config)
    assert result["timed_steps"] == 2 and len(result["losses"]) == 3
    assert result["tokens_per_step"] == 2 * 64
    assert result["tokens_per_second"] == pytest.approx(
        result["tokens_per_step"] / result["step_seconds_mean"]
    )
    assert result["achieved_tflops"] == pytest.approx(
        result["model_flops_per_token"] * result["tokens_per_second"] / 1e12
    )
    assert result["mfu"] == pytest.approx(result["achieved_tflops"] / 1.0)
    assert result["device"] == "cpu" and result["measured_matmul_tflops"] is None


def test_datasheet_peak_is_known_for_hopper_only_on_cuda():
    import torch

    bench = load_bench()
    assert bench.datasheet_peak_tflops(torch.device("cpu")) is None
    assert bench.DATASHEET_BF16_TFLOPS["H200"] == 989.0
