"""The ``torch`` engine: exact forward passes, lossless speculation, jump-forward, budgets, the pipeline."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.labelers.conftest import TEST_CONTEXT, assert_confidences_follow_labels

pytestmark = pytest.mark.slow


def _run(labeler, requests, drafts=None, **options):
    """Answers of the labeler's engine with other options (same model), and the forward passes spent."""
    engine = labeler.engine
    saved_options, saved_stats = engine.options, engine.stats
    engine.options = dataclasses.replace(saved_options, **options)
    engine.stats = type(saved_stats)()
    try:
        calls, _ = labeler.planner.plan(requests)
        answers = engine.run(calls, drafts(calls) if drafts else None)
        return calls, answers, engine.stats
    finally:
        engine.options, engine.stats = saved_options, saved_stats


def test_slot_runner_matches_the_transformers_forward(torch_labeler):
    import torch

    from dripper.labelers.torch_runners import SlotRunner

    model = torch_labeler.model
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 150_000, (40,), generator=generator).tolist()
    with torch.inference_mode():
        reference = model.model(torch.tensor([ids])).last_hidden_state[0]
        runner = SlotRunner(model, feed_margin=8)
        runner._allocate(3, 64)
        assert torch.allclose(runner.forward([0], [0], [ids[:20]], True)[0], reference[:20], atol=1e-4)
        both = runner.forward([0, 1], [20, 0], [ids[20:25], ids[:3]], False)  # ragged batch, padded
        assert torch.allclose(both[0, :5], reference[20:25], atol=1e-4)
        assert torch.allclose(both[1, :3], reference[:3], atol=1e-4)
        # Slot 0 goes back to 23 tokens (two rejected) and is rewritten from there, in swapped order.
        swapped = runner.forward([1, 0], [3, 23], [ids[3:4], ids[23:30]], False)
        assert torch.allclose(swapped[1, :7], reference[23:30], atol=1e-4)
        assert torch.allclose(swapped[0, :1], reference[3:4], atol=1e-4)


def test_speculation_is_lossless_and_saves_forward_passes(torch_labeler, agreement_requests):
    requests = agreement_requests[:3]
    calls, plain, plain_stats = _run(torch_labeler, requests, speculation="none")
    _, previous, previous_stats = _run(torch_labeler, requests, speculation="previous")

    def always_other(calls):
        return [[False] * call.n_blocks for call in calls]

    _, drafted, _ = _run(torch_labeler, requests, speculation="draft", drafts=always_other)
    for a, b, c in zip(plain, previous, drafted, strict=True):
        assert a.token_ids == b.token_ids == c.token_ids  # the same tokens, not just the same labels
        assert a.margins == pytest.approx(b.margins, abs=1e-4)
    assert previous_stats.accepted_draft_tokens > 0
    assert previous_stats.forward_passes < plain_stats.forward_passes
    # Jump-forward: ids and the rest of the format cost no decoding step of their own.
    assert plain_stats.forward_passes < plain_stats.answer_tokens - plain_stats.forced_tokens + len(calls) + 1
    assert plain_stats.forced_tokens > 0


def test_labels_vary_and_carry_confidences(torch_labels):
    labelled = [labels for labels in torch_labels if labels.main is not None]
    assert len(labelled) == len(torch_labels)
    assert any(any(labels.main) and not all(labels.main) for labels in labelled)
    for labels in labelled:
        assert_confidences_follow_labels(labels)


def test_windowed_pages_are_labelled_in_full(torch_labeler, agreement_requests, torch_labels):
    windowed = [i for i, r in enumerate(agreement_requests) if len(torch_labeler.planner.plan([r])[0]) > 1]
    assert windowed, "the agreement pages should include pages longer than the test context"
    for index in windowed:
        assert len(torch_labels[index].main) == agreement_requests[index].simplified.n_blocks


def test_answer_budget_exhaustion_fails_the_page(torch_labeler, agreement_requests):
    calls, _ = torch_labeler.planner.plan(agreement_requests[:1])
    short = [dataclasses.replace(calls[0], max_tokens=5)]
    (answer,) = torch_labeler.engine.run(short)
    assert answer.failure == "answer exceeded max_tokens=5"
    assert len(answer.token_ids) == 5


def test_json_format_and_the_sequential_runner(tiny_model_dir, agreement_requests):
    """v1.0's JSON answers; the generic transformers path gives the same tokens as the slot cache."""
    from dripper.labelers.torch_engine import TorchLabeler
    from dripper.labelers.torch_runners import SequentialRunner

    labeler = TorchLabeler(str(tiny_model_dir), answer_format="json", max_model_len=TEST_CONTEXT, max_batch=4)
    requests = agreement_requests[:2]
    calls, failures = labeler.planner.plan(requests)
    fast = labeler.engine.run(calls)
    labeler.engine.runner = SequentialRunner(labeler.model)
    slow = labeler.engine.run(calls)
    assert [a.token_ids for a in fast] == [a.token_ids for a in slow]
    labels = labeler.planner.assemble(len(requests), calls, fast, failures)
    assert all(label.main is not None for label in labels)
    assert fast[0].text.startswith('{"1":"')


def test_registered_and_usable_in_the_pipeline(torch_labeler, agreement_requests):
    from dripper.labelers import available_labelers
    from dripper.pipeline import Extractor

    assert {"torch", "vllm", "openai"} <= set(available_labelers())
    page = agreement_requests[-1].page  # the whole page (24 blocks): simplified here, labelled in windows
    (result,) = Extractor(torch_labeler).extract_batch([page])
    assert result.doc_id == page.doc_id and result.extractor == "dripper:torch"
    assert result.labels is not None and len(result.labels) == agreement_requests[-1].simplified.n_blocks


def _load_bench():
    """``bench/lm_engine.py`` as a module (registered, as its dataclasses need)."""
    import importlib.util
    import sys

    from tests.labelers.conftest import REPO

    spec = importlib.util.spec_from_file_location("lm_engine_bench", REPO / "bench" / "lm_engine.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    return bench


def test_engine_benchmark_cpu_path(capsys, tmp_path, tiny_model_dir):  # tiny_model_dir: skips without .cache
    """``bench/lm_engine.py --tiny``: the GPU script's own path on CPU, prompts prepared from 2 sample pages."""
    from tests.conftest import SAMPLE_PAGES

    bench = _load_bench()
    calls = tmp_path / "calls.json.gz"
    options = ["--calls", str(calls), "--source", str(SAMPLE_PAGES), "--source-limit", "2"]
    options += ["--context", "4096", "--tiny", "--plain-pages", "1", "--no-vllm"]
    assert bench.main(options) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert lines[0]["prompt_statistics"]["pages"] == 2 and calls.exists()
    assert lines[0]["prompt_statistics"]["pages_with_oracle_labels"] == 2
    assert lines[1]["oracle_label_runs_per_page"] >= 1
    engines = {line["engine"]: line for line in lines if "engine" in line}
    fast, slow = engines["torch (speculation=previous)"], engines["torch (speculation=none)"]
    assert fast["failures"] == slow["failures"] == 0
    # Speculation: forward passes per page below the blocks per page, and well below plain decoding's (one
    # per decision), even though this random model switches labels far more often than a trained one.
    assert fast["forward_passes_per_page"] < 0.75 * fast["blocks_per_page"]
    assert fast["forward_passes_per_page"] < 0.6 * slow["forward_passes_per_page"]
    assert slow["forward_passes_per_page"] >= slow["blocks_per_page"]
    agreed = {
        line["agreement_with_torch_speculation"]: line["identical_answers"]
        for line in lines
        if "agreement_with_torch_speculation" in line
    }
    same, total = agreed["torch (speculation=none)"].split("/")
    assert same == total and int(total) >= 2
    same, total = agreed["transformers generate + constraint"].split("/")
    assert same == total and int(total) >= 1
    # Drafts from the CPU labeler: the same answers (lossless), whatever share of the drafts holds.
    drafted = engines["torch (speculation=draft)"]
    assert drafted["failures"] == 0 and drafted["draft_agreement"] is not None
    same, total = agreed["torch (speculation=draft)"].split("/")
    assert same == total and int(total) >= 2


def test_engine_benchmark_trains_on_pages_it_does_not_benchmark(capsys, tmp_path, tiny_model_dir):
    """``--train-steps``: teacher forcing on the oracle answers of pages outside ``--pages`` lowers the loss."""
    from tests.conftest import SAMPLE_PAGES

    bench = _load_bench()
    calls = tmp_path / "calls.json.gz"
    options = ["--calls", str(calls), "--source", str(SAMPLE_PAGES), "--source-limit", "3"]
    options += ["--context", "4096", "--prepare"]
    assert bench.main(options) == 0
    options = ["--calls", str(calls), "--tiny", "--pages", "1", "--plain-pages", "0", "--no-vllm"]
    assert bench.main([*options, "--train-steps", "8", "--train-max-tokens", "4096"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    (trained,) = [line for line in lines if "trained_steps" in line]
    assert trained["trained_steps"] == 8 and trained["training_pool_calls"] >= 1
    assert trained["final_loss"] < trained["first_loss"]
    benchmarked = [line for line in lines if "engine" in line]
    assert benchmarked and all(line["pages"] == 1 for line in benchmarked)
