"""torchrun with two CPU processes (gloo): data parallel and tensor parallel give the single-process losses.

Pipeline parallelism needs GPUs (Megatron's schedules are CUDA-only) and is not covered here.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.pretrain import REPO, make_toy_corpus, tiny_train_config

pytest.importorskip("megatron.core")

STEPS = 3


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from dripper.pretrain.train import train

    corpus = make_toy_corpus(tmp_path_factory.mktemp("toy"))
    config = tiny_train_config(corpus, tmp_path_factory.mktemp("ref"), steps=STEPS, micro_batch_size=2)
    return corpus, train(config)


@pytest.mark.slow
@pytest.mark.parametrize(
    "parallel", [["--tensor-parallel", "1"], ["--tensor-parallel", "2"]], ids=["dp2", "tp2"]
)
def test_two_process_run_matches_single_process(reference, parallel, tmp_path):
    from dripper.pretrain.export import export_checkpoint
    from dripper.pretrain.train import read_train_log

    corpus, single = reference
    config = tiny_train_config(corpus, tmp_path, steps=STEPS, micro_batch_size=2)
    data = [arg for path in config.data for arg in ("--data", path)]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", port]
    command += ["-m", "dripper.pretrain", "train", "--out-dir", str(tmp_path), *data]
    command += ["--data-weights", "0.5", "0.5"]
    command += ["--tokenizer", str(corpus.tokenizer), "--train-steps", str(STEPS), "--micro-batch-size", "2"]
    command += ["--global-batch-size", "8", "--lr", "5e-3", "--min-lr", "5e-4", "--device", "cpu", *parallel]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = [record["loss"] for record in read_train_log(tmp_path)]
    assert losses == pytest.approx(single.losses, abs=1e-4)
    # The checkpoint (sharded over two tensor-parallel ranks for tp2) loads into one process for export.
    assert export_checkpoint(tmp_path, tmp_path / "hf").max_abs_logit_diff < 1e-4


def test_groups_of_a_destroyed_world_are_rebuilt():
    """A process that trained, then had its process group destroyed by another library (vLLM's shutdown
    does), trains again: Megatron's stale groups are dropped instead of failing with "Group … is not
    registered"; its children start worlds of their own. In a subprocess, so this test's world does not
    leak into the others."""
    script = (
        "import torch\n"
        "from dripper.pretrain.model import init_parallel\n"
        "init_parallel(1, 1, 'cpu')\n"
        "torch.distributed.destroy_process_group()\n"
        "state = init_parallel(1, 1, 'cpu')\n"
        "print('rank', state.rank, state.pp_rank, state.tp_rank)\n"
        # A world of one writes no rendezvous variables: a child inheriting them once tried to bind the
        # parent's port (bench/gpu_suite.py's pretraining step, started from a process that had trained).
        "import os, subprocess, sys\n"
        "assert not {'RANK', 'WORLD_SIZE', 'MASTER_PORT'} & set(os.environ), os.environ\n"
        "child = \"from dripper.pretrain.model import init_parallel; init_parallel(1, 1, 'cpu'); print('child')\"\n"
        "print(subprocess.run([sys.executable, '-c', child], capture_output=True, text=True).stdout.strip())\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_PORT")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-2:] == ["rank 0 0 0", "child"]
