"""Checkpoints: save, find the latest, resume, and load a model's weights for export.

Layout under ``{out_dir}/checkpoints/``::

    iter_0000020/
        model/                  Megatron distributed checkpoint (torch_dist): loads under any TP/PP layout
        optimizer/tp00_pp00.pt  AdamW state of each model-parallel rank (written by data-parallel rank 0)
        meta.json               step, consumed samples, the run's TrainConfig and ModelConfig, parallel sizes
    latest                      the step of the newest complete checkpoint

A checkpoint is written under ``iter_XXXXXXX.tmp`` and renamed when every rank has finished, then
``latest`` is replaced, so a crash never leaves a checkpoint that looks complete.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dripper.pretrain.config import ModelConfig, dumps, model_config_from_json

LATEST = "latest"
META = "meta.json"


@dataclass(frozen=True, slots=True)
class CheckpointMeta:
    path: Path
    step: int
    consumed_samples: int
    model: ModelConfig
    train: dict[str, Any]
    parallel: dict[str, int]


def checkpoint_dir(root: Path, step: int) -> Path:
    return root / f"iter_{step:07d}"


def read_meta(path: Path) -> CheckpointMeta:
    """The metadata of the checkpoint folder ``path``."""
    meta_path = Path(path) / META
    if not meta_path.exists():
        raise FileNotFoundError(
            f"{path}: not a checkpoint (no {META}); pass an iter_XXXXXXX folder or a run folder"
        )
    data = json.loads(meta_path.read_text(encoding="utf-8"))
    return CheckpointMeta(
        path=Path(path),
        step=int(data["step"]),
        consumed_samples=int(data["consumed_samples"]),
        model=model_config_from_json(data["model"]),
        train=data.get("train", {}),
        parallel=data.get("parallel", {}),
    )


def find_latest(root: Path) -> Path | None:
    """The newest complete checkpoint under ``root`` (a ``checkpoints/`` folder), or ``None``."""
    root = Path(root)
    if not root.is_dir():
        return None
    marker = root / LATEST
    if marker.exists():
        candidate = checkpoint_dir(root, int(marker.read_text().strip()))
        if (candidate / META).exists():
            return candidate
    complete = sorted(p for p in root.glob("iter_???????") if (p / META).exists())
    return complete[-1] if complete else None


def resolve_checkpoint(path: Path) -> Path:
    """Accept a checkpoint folder, a ``checkpoints/`` folder or a run folder; return the checkpoint folder."""
    path = Path(path)
    if (path / META).exists():
        return path
    for root in (path, path / "checkpoints"):
        latest = find_latest(root)
        if latest is not None:
            return latest
    raise FileNotFoundError(
        f"{path}: no complete checkpoint found (looked for iter_*/meta.json and 'latest')"
    )


def _barrier() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def _optimizer_file(folder: Path) -> Path:
    from megatron.core import parallel_state

    tp = parallel_state.get_tensor_model_parallel_rank()
    pp = parallel_state.get_pipeline_model_parallel_rank()
    return folder / "optimizer" / f"tp{tp:02d}_pp{pp:02d}.pt"


def save_checkpoint(
    root: Path,
    step: int,
    consumed_samples: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    meta: dict[str, Any],
    keep: int = 0,
) -> Path:
    """Save on every rank (collective); returns the published folder. ``keep`` > 0 prunes older ones."""
    from megatron.core import dist_checkpointing, parallel_state

    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    final = checkpoint_dir(root, step)
    tmp = final.with_name(final.name + ".tmp")
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "model").mkdir(parents=True)
        (tmp / "optimizer").mkdir()
    _barrier()
    dist_checkpointing.save(model.sharded_state_dict(), str(tmp / "model"))
    if parallel_state.get_data_parallel_rank() == 0:
        torch.save(optimizer.state_dict(), _optimizer_file(tmp))
    _barrier()
    if rank == 0:
        data = {**meta, "step": step, "consumed_samples": consumed_samples}
        (tmp / META).write_text(dumps(data), encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        marker_tmp = root / (LATEST + ".tmp")
        marker_tmp.write_text(f"{step}\n")
        os.replace(marker_tmp, root / LATEST)
        if keep > 0:
            complete = sorted(p for p in root.glob("iter_???????") if (p / META).exists())
            for old in complete[:-keep]:
                shutil.rmtree(old, ignore_errors=True)
    _barrier()
    return final


def load_model_weights(model: torch.nn.Module, path: Path) -> None:
    """Load the model part of checkpoint ``path`` into ``model`` (any parallel layout; collective)."""
    from megatron.core import dist_checkpointing

    state = dist_checkpointing.load(model.sharded_state_dict(), str(Path(path) / "model"))
    model.load_state_dict(state)


def load_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> CheckpointMeta:
    """Restore model and optimizer from ``path`` for resuming; the optimizer needs the same TP/PP sizes."""
    meta = read_meta(path)
    load_model_weights(model, path)
    optimizer_path = _optimizer_file(Path(path))
    if not optimizer_path.exists():
        raise FileNotFoundError(
            f"{optimizer_path}: no optimizer state for this rank; resume with the tensor/pipeline parallel sizes "
            f"the checkpoint was written with ({meta.parallel})"
        )
    optimizer.load_state_dict(torch.load(optimizer_path, map_location="cpu", weights_only=False))
    return meta
