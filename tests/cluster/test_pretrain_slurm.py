"""Pretraining as a Slurm job: the generated ``sbatch`` script for a 4-node x 8-GPU 1B run, and
``PretrainOperator(run_on="slurm")`` on the real one-node cluster: a 2-process CPU (gloo) run submitted,
awaited in the trigger and exported; a run cancelled with ``scancel`` mid-training fails the task with the
reason, and resubmitting resumes from the checkpoint with the losses of the uninterrupted run."""

from __future__ import annotations

import asyncio
import json
import shlex
import threading
import time
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from dripper.airflow.jobs import PretrainOperator
from dripper.pretrain import slurm as slurm_jobs
from tests.airflow.test_stages import FakeContext
from tests.pretrain import make_toy_corpus

STEPS = 8
#: The tiny CPU run of tests/pretrain/test_parallel_cpu.py: 2 data-parallel ranks, gloo.
TINY_ARGUMENTS = [
    "--micro-batch-size", "2", "--global-batch-size", "8", "--lr", "5e-3", "--min-lr", "5e-4",
    "--warmup-steps", "2", "--precision", "fp32",
]  # fmt: skip


def run_deferred(operator, context, on_deferred=None):
    """Run ``operator`` as Airflow does a deferrable task: ``execute``, the trigger until its event, then the
    resume method. ``on_deferred(trigger)`` runs in a thread while the trigger waits."""
    try:
        return operator.execute(context)
    except TaskDeferred as deferred:
        trigger = deferred.trigger
        # Airflow serializes the trigger for the triggerer: do the same round trip.
        path, kwargs = trigger.serialize()
        assert path == "dripper.airflow.slurm.SlurmJobTrigger"
        trigger = type(trigger)(**kwargs)
        helper = threading.Thread(target=on_deferred, args=(trigger,)) if on_deferred else None
        if helper:
            helper.start()

        async def first_event():
            async for event in trigger.run():
                return event.payload

        try:
            event = asyncio.run(first_event())
        finally:
            if helper:
                helper.join()
        return getattr(operator, deferred.method_name)(context, event, **(deferred.kwargs or {}))


# -- the generated script ----------------------------------------------------------------------------------


def test_sbatch_script_for_a_4_node_8_gpu_1b_run(tmp_path, monkeypatch):
    submitted = {}

    def fake_submit(script, path, env=None, *args):
        submitted.update(script=script, path=str(path))
        return "4242"

    monkeypatch.setattr(slurm_jobs, "submit", fake_submit)
    monkeypatch.setattr(slurm_jobs, "active_jobs", lambda *args: [])  # no Slurm needed here
    tokens = tmp_path / "root" / "tokens"
    operator = PretrainOperator(
        task_id="pretrain",
        tokens={"tokens": str(tokens), "root": str(tmp_path / "root")},
        tokenizer="/models/tokenizer",
        config={
            "model": "llama-1b",
            "train_steps": 60000,
            "device": "cuda",
            "arguments": ["--precision", "bf16", "--micro-batch-size", "8", "--global-batch-size", "512"],
        },
        run_name="dripper-1b",
        run_on="slurm",
        slurm={
            "nodes": 4,
            "gpus_per_node": 8,
            "cpus_per_node": 96,
            "partition": "h100",
            "account": "llm-ablation",
            "time": "2-00:00:00",
            "sbatch_lines": ["#SBATCH --exclusive", "--constraint=h100"],
            "env": {"NCCL_DEBUG": "WARN", "HF_HOME": "/shared/hf cache"},
            "setup": ["source /shared/venv/bin/activate"],
            "python": "/shared/venv/bin/python",
        },
    )
    assert operator.executor is None  # Airflow's own field (which executor runs the task) is left alone
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(FakeContext())
    run_dir = tmp_path / "root" / "pretrain" / "dripper-1b"
    assert deferred.value.method_name == "execute_slurm_complete"
    assert deferred.value.kwargs["job_id"] == "4242"
    assert deferred.value.kwargs["log"] == f"{run_dir}/slurm/slurm-4242.out"
    assert deferred.value.trigger.job_ids == ["4242"]
    script = submitted["script"]
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert submitted["path"].startswith(f"{run_dir}/slurm/pretrain-dripper-1b-")
    directives = [line.removeprefix("#SBATCH ") for line in lines if line.startswith("#SBATCH ")]
    assert directives == [
        "--job-name=pretrain-dripper-1b",
        "--nodes=4",
        "--ntasks-per-node=1",
        f"--output={run_dir}/slurm/slurm-%j.out",
        "--open-mode=append",
        "--gpus-per-node=8",
        "--cpus-per-task=96",
        "--partition=h100",
        "--account=llm-ablation",
        "--time=2-00:00:00",
        "--exclusive",
        "--constraint=h100",
    ]
    body = lines[len(directives) + 2 :]
    assert "set -euo pipefail" in body
    assert "export NCCL_DEBUG=WARN" in body and "export HF_HOME='/shared/hf cache'" in body
    assert 'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"' in body
    assert "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))" in body
    assert body.index("source /shared/venv/bin/activate") < len(body) - 2
    srun = shlex.split(lines[-1])
    assert srun[:4] == ["srun", "--kill-on-bad-exit=1", "--ntasks-per-node=1", "bash"]
    assert srun[4] == "-c"
    torchrun = shlex.split(srun[5])
    # Each node's task expands its own Slurm variables (shlex keeps them literal here).
    assert torchrun[:4] == ["exec", "/shared/venv/bin/python", "-m", "torch.distributed.run"]
    options = torchrun[4 : torchrun.index("-m", 4)]
    assert options == [
        "--nnodes", "$SLURM_NNODES", "--node-rank", "$SLURM_NODEID", "--nproc-per-node", "8",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", "$MASTER_ADDR:$MASTER_PORT", "--rdzv-id", "$SLURM_JOB_ID",
    ]  # fmt: skip
    module_args = torchrun[torchrun.index("-m", 4) :]
    assert module_args == [
        "-m", "dripper.pretrain", "train", "--out-dir", str(run_dir), "--data", str(tokens),
        "--tokenizer", "/models/tokenizer", "--model", "llama-1b", "--train-steps", "60000", "--seed", "1234",
        "--device", "cuda", "--save-interval", "10", "--keep-checkpoints", "0",
        "--precision", "bf16", "--micro-batch-size", "8", "--global-batch-size", "512",
    ]  # fmt: skip


def test_slurm_options_are_checked_by_name():
    with pytest.raises(ValueError, match="'gpu'.*not known"):
        slurm_jobs.SlurmJobConfig.from_dict({"gpu": 8})
    with pytest.raises(ValueError, match="time='two days'"):
        slurm_jobs.SlurmJobConfig(time="two days")
    with pytest.raises(ValueError, match="nodes=0"):
        slurm_jobs.SlurmJobConfig(nodes=0)


# -- on the real cluster -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_corpus(tmp_path_factory):
    pytest.importorskip("megatron.core")
    return make_toy_corpus(tmp_path_factory.mktemp("toy"))


def tiny_operator(corpus, root: Path, run_name: str, partition: str) -> PretrainOperator:
    return PretrainOperator(
        task_id="pretrain",
        tokens=str(root / "tokens"),
        tokenizer=str(corpus.tokenizer),
        config={
            "model": "tiny",
            "train_steps": STEPS,
            "eval_every": 2,  # a checkpoint every 2 steps, all kept: what a cancelled job resumes from
            "device": "cpu",
            "nproc": 2,
            "arguments": TINY_ARGUMENTS,
        },
        run_name=run_name,
        run_on="slurm",
        slurm={
            "nodes": 1,
            "cpus_per_node": 2,
            "partition": partition,
            "time": "10:00",
            "env": {"OMP_NUM_THREADS": "1"},
            "poll_seconds": 1,
        },
    )


def _root_with_tokens(corpus, root: Path) -> Path:
    (root / "tokens").mkdir(parents=True)
    for item in (corpus.tokens_root / "alpha").iterdir():
        (root / "tokens" / item.name).symlink_to(item)
    return root


@pytest.fixture(scope="module")
def uninterrupted(slurm_cluster, toy_corpus, tmp_path_factory, monkeypatch_module):
    """The tiny run as one Slurm job, start to end."""
    monkeypatch_module.setenv("SLURM_CONF", str(slurm_cluster.conf))
    root = _root_with_tokens(toy_corpus, tmp_path_factory.mktemp("slurm-run"))
    started = time.perf_counter()
    result = run_deferred(tiny_operator(toy_corpus, root, "full", slurm_cluster.partition), FakeContext())
    return result, time.perf_counter() - started


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_tiny_two_process_run_as_a_slurm_job(uninterrupted, slurm_cluster):
    from dripper.pretrain.train import read_train_log

    result, seconds = uninterrupted
    run_dir = Path(result["run_dir"])
    log = read_train_log(run_dir)
    assert [r["step"] for r in log] == list(range(1, STEPS + 1))
    assert (Path(result["hf_dir"]) / "config.json").exists()
    assert result["train"] is not None and result["train"]["final_step"] == STEPS
    job_log = next((run_dir / "slurm").glob("slurm-*.out")).read_text()
    assert "rendezvous " in job_log and "(1 nodes)" in job_log
    assert json.loads((run_dir / "run.json").read_text())["parallel"]["world_size"] == 2
    print(f"tiny 2-process Slurm pretraining: {seconds:.1f} s")


def test_scancel_fails_the_task_and_resubmission_resumes(uninterrupted, slurm_cluster, toy_corpus, tmp_path):
    from dripper.pretrain.train import read_train_log

    full, _ = uninterrupted
    root = _root_with_tokens(toy_corpus, tmp_path)
    run_dir = root / "pretrain" / "interrupted"
    cancelled = {}

    def cancel_after_first_checkpoint(trigger):
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if list((run_dir / "checkpoints").glob("iter_*/meta.json")):
                slurm_cluster.command("scancel", trigger.job_ids[0])
                cancelled["job"] = trigger.job_ids[0]
                return
            time.sleep(0.2)

    operator = tiny_operator(toy_corpus, root, "interrupted", slurm_cluster.partition)
    with pytest.raises(AirflowException) as failure:
        run_deferred(operator, FakeContext(), on_deferred=cancel_after_first_checkpoint)
    message = str(failure.value)
    assert f"Slurm job {cancelled['job']} CANCELLED" in message
    assert "submits the job again and resumes from the latest checkpoint" in message
    steps_done = [r["step"] for r in read_train_log(run_dir)]
    assert 2 <= len(steps_done) < STEPS, steps_done

    # Cleared: a new task instance submits again and training resumes from the checkpoint.
    again = tiny_operator(toy_corpus, root, "interrupted", slurm_cluster.partition)
    result = run_deferred(again, FakeContext())
    assert result["train"]["start_step"] >= 2
    resumed = read_train_log(run_dir)
    assert [r["step"] for r in resumed] == list(range(1, STEPS + 1))
    expected = [r["loss"] for r in read_train_log(full["run_dir"])]
    assert [r["loss"] for r in resumed] == pytest.approx(expected, abs=1e-5)
    assert slurm_cluster.job_ids() == []
