"""Monkeypatches that let Megatron-core's GPT model train on a CPU-only torch build. Nothing else lives here.

Megatron-core assumes CUDA in a few places that the tiny CPU smoke path reaches (measured with
megatron-core 0.16.1 and torch 2.13+cpu):

- ``torch.cuda.current_device()`` picks the device of RoPE frequencies and other buffers;
- ``torch.cuda.synchronize()`` is called by the checkpoint writer (``dist_checkpointing``);
- the tensor-parallel RNG tracker forks CUDA generator states around dropout and initialisation.

:func:`apply_cpu_patches` replaces exactly these, process-wide and only when CUDA is unavailable. Everything
else (the training loop, the optimizer, the checkpoint format) is the same code the GPU path runs; the
forward-backward schedules of ``megatron.core.pipeline_parallel`` are not patched, so pipeline parallelism
needs GPUs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

_applied = False


class CpuRngTracker:
    """Stands in for Megatron's CUDA RNG tracker: forks are no-ops (dropout is 0 in our configs)."""

    def add(self, name: str, seed: int) -> None:
        torch.manual_seed(seed)

    def is_initialized(self) -> bool:
        return True

    def reset(self) -> None:
        pass

    def get_states(self) -> dict:
        return {}

    def set_states(self, states: dict) -> None:
        pass

    @contextlib.contextmanager
    def fork(self, name: str = "model-parallel-rng") -> Iterator[None]:
        yield


_tracker = CpuRngTracker()


def _get_cpu_rng_tracker(*args: object, **kwargs: object) -> CpuRngTracker:
    return _tracker


def _cpu_model_parallel_seed(seed: int, *args: object, **kwargs: object) -> None:
    torch.manual_seed(seed)


def apply_cpu_patches() -> bool:
    """Patch Megatron-core and ``torch.cuda`` for CPU training; a no-op (returns False) when CUDA is usable.

    Idempotent. Call before building a Megatron model on CPU.
    """
    global _applied
    if torch.cuda.is_available():
        return False
    if _applied:
        return True
    from megatron.core import tensor_parallel
    from megatron.core.tensor_parallel import random as tp_random

    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]
    torch.cuda.synchronize = lambda *args, **kwargs: None  # type: ignore[assignment]
    tp_random.get_cuda_rng_tracker = _get_cpu_rng_tracker
    tensor_parallel.get_cuda_rng_tracker = _get_cpu_rng_tracker
    tp_random.model_parallel_cuda_manual_seed = _cpu_model_parallel_seed
    tensor_parallel.model_parallel_cuda_manual_seed = _cpu_model_parallel_seed
    _applied = True
    return True
