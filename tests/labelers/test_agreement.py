"""Proof of agreement: every LM labeler gives the same labels on the same pages with the same model.

The tiny random Qwen3 (Qwen's real tokenizer) is greedy and deterministic, and its labels vary across
blocks. On 20 real pages of the bundled sample (several longer than the test context, so labelled in
windows) the offline vLLM engine, the OpenAI-compatible vLLM server, our ``torch`` engine with and
without speculation, and a plain transformers ``generate`` constrained by xgrammar (vLLM's grammar
engine, independent of our automaton) all produce identical labels.
"""

from __future__ import annotations

import dataclasses

import pytest

pytestmark = pytest.mark.slow


def _transformers_greedy(labeler, requests):
    """Plain transformers generate, greedy, the regex enforced by xgrammar's logits processor."""
    xgr = pytest.importorskip("xgrammar")
    import torch
    from xgrammar.contrib.hf import LogitsProcessor

    from dripper.labelers.lm_common import LMAnswer

    model, tokenizer = labeler.model, labeler.planner.renderer.tokenizer
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
    compiler = xgr.GrammarCompiler(info)
    calls, failures = labeler.planner.plan(requests)
    answers = []
    for call in calls:
        ids = torch.tensor([call.prompt_ids])
        with torch.inference_mode():
            output = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=call.max_tokens,
                logits_processor=[LogitsProcessor(compiler.compile_regex(call.regex))],
                pad_token_id=tokenizer.pad_token_id,
            )
        text = tokenizer.decode(output[0, ids.shape[1] :], skip_special_tokens=True)
        answers.append(LMAnswer(text=text))
    return labeler.planner.assemble(len(requests), calls, answers, failures)


def _no_speculation(labeler, requests):
    engine = labeler.engine
    saved = engine.options
    engine.options = dataclasses.replace(saved, speculation="none")
    try:
        return labeler(requests)
    finally:
        engine.options = saved


def test_the_pages_are_a_fair_test(agreement_requests, torch_labeler, torch_labels):
    assert len(agreement_requests) >= 20
    windowed = sum(len(torch_labeler.planner.plan([request])[0]) > 1 for request in agreement_requests)
    assert windowed >= 1
    mixed = sum(bool(labels.main) and any(labels.main) and not all(labels.main) for labels in torch_labels)
    assert mixed >= len(agreement_requests) // 2, "the tiny model's labels should vary across blocks"


def test_all_labelers_agree(agreement_requests, torch_labeler, torch_labels, vllm_labels, openai_labels):
    reference = _transformers_greedy(torch_labeler, agreement_requests)
    plain = _no_speculation(torch_labeler, agreement_requests)
    for index, request in enumerate(agreement_requests):
        expected = reference[index].main
        assert expected is not None and len(expected) == request.simplified.n_blocks, reference[index].failure
        assert torch_labels[index].main == expected, f"torch (speculation) differs on page {index}"
        assert plain[index].main == expected, f"torch (no speculation) differs on page {index}"
        assert vllm_labels[index].main == expected, f"vllm differs on page {index}"
        assert openai_labels[index].main == expected, f"openai (vllm serve) differs on page {index}"
