"""The ``torch`` engine: exact forward passes, lossless speculation, jump-forward, budgets, the pipeline."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.labelers.conftest import REPO, TEST_CONTEXT, assert_confidences_follow_labels

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


def test_padded_decode_steps_give_the_same_answers(torch_labeler, agreement_requests):
    """The CUDA path's padding (batch, width and span rounded up to buckets, padded rows masked) on CPU:
    the same tokens as unpadded steps."""
    runner = torch_labeler.engine.runner
    calls, plain, _ = _run(torch_labeler, agreement_requests[:4])
    runner.bucketing = True
    try:
        _, padded, _ = _run(torch_labeler, agreement_requests[:4])
    finally:
        runner.bucketing = False
        runner._allocate(0, 0)  # the next user starts from an unpadded cache
    assert [a.token_ids for a in plain] == [a.token_ids for a in padded]
    assert all(answer.failure is None for answer in padded) and len(calls) == 4


def test_small_batches_compact_their_slots_without_changing_answers(torch_labeler, agreement_requests):
    """max_batch=2 over 6 calls: rows finish at different steps, later rows move into the freed slots."""
    _, together, _ = _run(torch_labeler, agreement_requests[:6], max_batch=8)
    _, compacted, _ = _run(torch_labeler, agreement_requests[:6], max_batch=2)
    assert [a.token_ids for a in together] == [a.token_ids for a in compacted]


def test_engine_options_are_checked():
    from dripper.labelers.torch_decoder import EngineOptions

    assert EngineOptions().pass_budget(100) == 16 + 300
    assert EngineOptions(max_passes_per_block=None).pass_budget(100) is None
    with pytest.raises(ValueError, match="max_passes_per_block"):
        EngineOptions(max_passes_per_block=0)
    with pytest.raises(ValueError, match="call_deadline_s"):
        EngineOptions(call_deadline_s=-1.0)
    with pytest.raises(ValueError, match="speculation"):
        EngineOptions(speculation="maybe")


def test_the_call_deadline_fails_calls_with_their_reason(torch_labeler, agreement_requests):
    _, answers, _ = _run(torch_labeler, agreement_requests[:2], call_deadline_s=1e-9)
    assert [answer.failure for answer in answers] == [
        "answer unfinished at the call deadline (call_deadline_s=1e-09)"
    ] * 2


def test_progress_is_reported_during_a_run(torch_labeler, agreement_requests):
    reports = []
    engine = torch_labeler.engine
    saved = engine.options
    engine.options = dataclasses.replace(saved, progress_every_s=0.0)
    try:
        calls, _ = torch_labeler.planner.plan(agreement_requests[:3])
        engine.run(calls, progress=reports.append)
    finally:
        engine.options = saved
    assert len(reports) >= 2  # during the run and once at the end
    last = reports[-1].as_dict()
    assert last["calls_done"] == last["calls"] == len(calls) and last["failures"] == 0
    assert last["forward_passes"] > 0 and last["answer_tokens_per_s"] > 0
    assert [r.calls_done for r in reports] == sorted(r.calls_done for r in reports)


def test_a_stand_in_that_never_closes_its_answer_ends_by_the_budget(tiny_model_dir, sample_records):
    """The 2026-12-04 GPU run's failure, made certain: a model that prefers the whitespace the answer
    regex allows after ``<answer>`` never closes it. The pass budget ends each call in a fraction of
    ``max_tokens``' passes, the failure says why, and the page goes to the Trafilatura fallback."""
    import time

    import torch

    from dripper.labelers.lm_common import load_tokenizer
    from dripper.labelers.torch_engine import TorchLabeler
    from dripper.pipeline import ExtractOptions, Extractor
    from dripper.types import Page

    labeler = TorchLabeler(str(tiny_model_dir), max_model_len=TEST_CONTEXT, max_passes_per_block=1.0)
    tokenizer = load_tokenizer(tiny_model_dir)
    texts = tokenizer.backend_tokenizer.decode_batch([[i] for i in range(len(tokenizer))])
    blank = [i for i, text in enumerate(texts) if text and not text.strip()]
    with torch.no_grad():  # dimension 0 is the tiny model's constant bias handle (make_tiny_models.py)
        labeler.model.get_output_embeddings().weight[blank, 0] = 40.0
    pages = [Page(doc_id=str(i), html=sample_records[i]["html"]) for i in range(2)]
    started = time.perf_counter()
    results = Extractor(labeler, ExtractOptions(fallback="trafilatura")).extract_batch(pages)
    seconds = time.perf_counter() - started
    labeler.close()
    print(f"two pages past their pass budget in {seconds:.1f} s")
    for result in results:
        assert result.extractor == "trafilatura", result.fallback_reason
        assert (
            "forward passes" in result.fallback_reason
            and "max_passes_per_block=1.0" in result.fallback_reason
        )
        assert result.markdown  # the fallback's text, not an empty row


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
    from tests.bench import load_bench

    return load_bench("lm_engine")


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
    assert fast["stand_in"] == "oracle" and fast["oracle_agreement"] == 1.0
    # Speculation: forward passes per page below the blocks per page, and well below plain decoding's (one
    # per decision), at the oracle's label runs (a trained labeler's).
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


def test_stand_in_check_answers_like_a_labeler_at_the_real_width(capsys, tiny_model_dir):
    """``--stand-in-check``: the oracle stand-in at Qwen3-0.6B's width (1024) and vocabulary (151,936) closes
    every answer, follows the oracle labels and needs few forward passes per block (the 2026-12-04
    stand-in: 3/3 calls failed, 7.45 passes per block)."""
    from tests.conftest import SAMPLE_PAGES

    bench = _load_bench()
    source = REPO.parent / "shared" / "data" / "dev.jsonl.gz"
    source = source if source.exists() else SAMPLE_PAGES
    assert bench.main(["--stand-in-check", "--source", str(source), "--source-limit", "40"]) == 0
    (line,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert line["hidden_size"] == 1024 and line["vocab_size"] == 151_936 and line["pages"] == 3
    assert line["failures"] == 0 and line["forward_passes_per_block"] <= 0.5
    assert line["oracle_agreement"] == 1.0


def test_the_warm_up_check_stops_a_stand_in_that_does_not_answer():
    from types import SimpleNamespace

    standin = _load_bench().check_warmup.__globals__
    check, error = standin["check_warmup"], standin["StandInError"]
    calls = [SimpleNamespace(page=0), SimpleNamespace(page=1)]
    closed = [SimpleNamespace(failure=None)] * 2
    assert check("oracle", closed, calls, [[True], [False]], [[True], [False]])["warmup_check"] == "passed"
    with pytest.raises(error, match="did not follow the oracle labels on warm-up page"):
        check("oracle", closed, calls, [[True], [False]], [[True], [True]])
    unclosed = [SimpleNamespace(failure="answer unfinished after 19 forward passes"), closed[0]]
    with pytest.raises(error, match=r"failed 1/2 warm-up calls \(answer unfinished"):
        check("shaped", unclosed, calls, [None, None], [None, [False]])


def test_engine_benchmark_trains_on_pages_it_does_not_benchmark(capsys, tmp_path, tiny_model_dir):
    """``--train-steps``: teacher forcing on the oracle answers of pages outside ``--pages`` lowers the loss."""
    from tests.conftest import SAMPLE_PAGES

    bench = _load_bench()
    calls = tmp_path / "calls.json.gz"
    options = ["--calls", str(calls), "--source", str(SAMPLE_PAGES), "--source-limit", "3"]
    options += ["--context", "4096", "--prepare"]
    assert bench.main(options) == 0
    options = ["--calls", str(calls), "--tiny", "--pages", "1", "--plain-pages", "0", "--no-vllm"]
    options += ["--stand-in", "shaped"]  # the trained random model alone, no steering
    assert bench.main([*options, "--train-steps", "8", "--train-max-tokens", "4096"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    (trained,) = [line for line in lines if "trained_steps" in line]
    assert trained["trained_steps"] == 8 and trained["training_pool_calls"] >= 1
    assert trained["final_loss"] < trained["first_loss"]
    benchmarked = [line for line in lines if "engine" in line]
    assert benchmarked and all(line["pages"] == 1 for line in benchmarked)
