"""LM engine benchmark: our ``torch`` engine against plain transformers ``generate`` (and vLLM), same prompts.

One prepared script, in two steps so the GPU machine needs only torch and transformers (no HTML stack,
no vLLM, no network):

1. ``python bench/lm_engine.py --prepare`` (here, CPU): simplifies the dev pages (``../shared/data``; the
   bundled sample where that is absent), renders the v1.1 compact prompts with Qwen's real tokenizer
   (``make install`` builds it), prints the prompt-length statistics (pages over 8k and 32k tokens, the
   windows they need), windows the prompts to ``--context`` and writes token ids and answer regexes to
   ``.cache/bench/lm_calls.json.gz``.
2. ``python bench/lm_engine.py`` (CUDA): builds a model with Qwen3-0.6B's exact architecture (or, with
   ``--arch hunyuan``, HunYuan-0.5B's: HunYuanDenseV1, the v1.1 weights', with Qwen's vocabulary; random
   bf16 weights: the stand-in of ``bench/lm_standin.py``, by default steered toward the oracle's answers so
   the engine runs at a trained labeler's acceptance rate, checked on a warm-up before each engine),
   then reports, in the same run, pages/s, prompt and answer tokens/s, forward
   passes per page, peak GPU memory, the model FLOPs done and achieved FLOP/s (MFU against the GPU's bf16
   peak) of the ``torch`` engine (speculation on and off), of transformers ``generate`` with the same
   constraint (greedy, KV cache, a logits processor) on ``--plain-pages``, and of vLLM's offline engine
   where vLLM is installed; and how often their answers agree token for token.

``--tiny`` runs the same path on CPU with a 2-layer model (hidden 128): there model compute is negligible,
so it shows engine overheads and forward passes per page against blocks per page. If the calls file is
missing, the run prepares it first (that needs the HTML stack). ``--stand-in-check`` builds the stand-in
at Qwen3-0.6B's width and vocabulary on CPU and labels 3 short pages (one JSON line, exit 1 when it fails).
The prompts and label helpers live in ``bench/lm_calls.py``, the stand-in in ``bench/lm_standin.py``.

Every result is one JSON line on stdout (and appended to ``--output``, so a killed run keeps what it measured);
an engine that fails is reported as ``{"engine": …, "error": …}`` and the run goes on. ``bench/gpu_suite.py``
runs this for both architectures, then the pretraining bench, within one time budget.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "scripts"), str(REPO / "bench")]

from lm_calls import (  # noqa: E402
    BenchCalls,
    agreement_share,
    answer_labels,
    default_source,
    label_runs,
    load_calls,
    main_share,
    prepare,
    runs_per_page,
)
from lm_standin import (  # noqa: E402 - after the path set-up, as bench scripts are run as files
    CHECK_SHAPE,
    SHAPES,
    STAND_INS,
    TINY_SHAPE,
    OracleSteering,
    OracleTargets,
    build_model,
    check_warmup,
    oracle_logits,
    train_on_oracle,
)

CALLS_FILE = REPO / ".cache" / "bench" / "lm_calls.json.gz"
# Dense bf16 peak FLOP/s by device name (the first that matches).
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12}
_OUTPUT: list[Path] = []
_TAG: dict = {}  # {"run": --tag}, added to every result line


def emit(record: dict) -> None:
    """Print a result line and append it to ``--output`` at once."""
    line = json.dumps({**_TAG, **record})
    print(line, flush=True)
    for path in _OUTPUT:
        with path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")


# -- step 2: engines ----------------------------------------------------------------------------------


def flops_per_token(config, context: float) -> float:
    """Forward FLOPs per token: 2 × non-embedding weights + attention over ``context`` keys."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    heads, kv, dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    weights = layers * (
        hidden * dim * (heads + 2 * kv) + heads * dim * hidden + 3 * hidden * config.intermediate_size
    )
    return 2 * weights + 4 * layers * heads * dim * context


class Timer:
    """Wall time of a block, synchronising CUDA on both ends so queued kernels are counted; on CUDA also the
    block's peak allocated GPU memory (weights included), in GiB."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")
        self.peak_gib: float | None = None

    def __enter__(self) -> Timer:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            self.peak_gib = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        self.seconds = time.perf_counter() - self.started


def _figure(value: float) -> float:
    """Four significant digits: a ratio of two printed figures checks to 0.1%, however small they are."""
    return float(f"{value:.4g}")


def model_flops(config, calls, answer_tokens: int) -> tuple[float, float]:
    """(all, prefill) model FLOPs of the calls: each prompt and answer token once, as in one causal pass."""
    prompt = sum(len(call.prompt_ids) for call in calls)
    # Mean attention span of a prompt token (half its prompt), weighted by prompt length.
    span = sum(len(call.prompt_ids) ** 2 for call in calls) / max(prompt, 1) / 2
    per_token = flops_per_token(config, span)
    return per_token * (prompt + answer_tokens), per_token * prompt


def report(name: str, model, calls, timer: Timer, answer_tokens: int, forward_passes, peak, **extra) -> dict:
    """Throughput, memory and achieved FLOP/s (useful tokens only: each prompt and answer token once).

    ``model_tflop`` is what the formula of :func:`flops_per_token` gives for these calls, so ``achieved_tflops``
    = ``model_tflop`` / ``seconds``, ``mfu`` = that / ``peak_tflops``, and ``prefill_bound_pages_per_s`` =
    ``peak_tflops`` / (``prefill_tflop`` / ``pages``): the rate if prefill ran at the GPU's peak and decoding
    were free.
    """
    seconds = timer.seconds
    pages = len({call.page for call in calls})
    prompt = sum(len(call.prompt_ids) for call in calls)
    flops, prefill = model_flops(model.config, calls, answer_tokens)
    result = {
        "engine": name,
        "pages": pages,
        "calls": len(calls),
        "seconds": round(seconds, 3),
        "pages_per_s": round(pages / seconds, 3),
        "prompt_tokens": prompt,
        "prompt_tokens_per_s": round(prompt / seconds),
        "answer_tokens": answer_tokens,
        "answer_tokens_per_s": round(answer_tokens / seconds),
        "forward_passes_per_page": round(forward_passes / pages, 1) if forward_passes is not None else None,
        "blocks_per_page": round(sum(call.n_blocks for call in calls) / pages, 1),
        "model_tflop": _figure(flops / 1e12),
        "prefill_tflop": _figure(prefill / 1e12),
        "achieved_tflops": _figure(flops / seconds / 1e12),
        "peak_tflops": round(peak / 1e12) if peak else None,
        "mfu": round(flops / seconds / peak, 4) if peak else None,
        "prefill_bound_pages_per_s": round(peak / (prefill / pages), 1) if peak else None,
        "gpu_peak_memory_gib": timer.peak_gib,
        **extra,
    }
    emit(result)
    return result


def vocabulary_for(tokenizer, model):
    from dripper.labelers.lm_common import stop_token_ids
    from dripper.labelers.lm_tokens import TokenVocabulary, token_bytes_table

    return TokenVocabulary(token_bytes_table(tokenizer, model.config.vocab_size), stop_token_ids(tokenizer))


def run_torch_engine(
    model,
    vocabulary,
    bench: BenchCalls,
    speculation: str,
    max_batch: int,
    device: str,
    peak,
    sequential: bool = False,
    stand_in: str = "shaped",
    targets: OracleTargets | None = None,
):
    """Our engine on every call, after a warm-up on two; returns the answer tokens (stop ids dropped).

    The warm-up checks the stand-in (:func:`lm_standin.check_warmup`) and stops the run with the reason
    when it does not answer as a labeler would. With ``targets`` the runner is steered toward the oracle
    answers (the ``oracle`` stand-in). ``sequential``: through transformers' own forward one sequence at a
    time (:class:`SequentialRunner`, the path of architectures the slot runner does not cover) instead of
    the batched slot cache. Progress goes to stderr every 10 s.
    """
    from dripper.labelers.torch_decoder import ConstrainedDecoder, EngineOptions
    from dripper.labelers.torch_runners import SequentialRunner
    from dripper.prompt import answer_format

    calls = bench.calls
    drafts = bench.drafts if speculation == "draft" else None
    options = EngineOptions(speculation=speculation, max_batch=max_batch)
    engine = ConstrainedDecoder(model, vocabulary, answer_format("compact"), options)
    if sequential:
        engine.runner = SequentialRunner(model)
    if targets is not None:
        engine.runner = OracleSteering(engine.runner, model, targets)
    name = (
        f"torch (sequential runner, speculation={speculation})"
        if sequential
        else f"torch (speculation={speculation})"
    )
    warm_calls = calls[:2]
    with Timer(device) as warm:
        warm_answers = engine.run(
            warm_calls, drafts[:2] if drafts is not None else None
        )  # kernels, allocator
    # At once, so a run cut off later still says what two calls cost (the first GPU run stalled unexplained).
    emit(
        {
            "warmup_of": name,
            "warmup_calls": len(warm_calls),
            "warmup_prompt_tokens": sum(len(call.prompt_ids) for call in warm_calls),
            "warmup_seconds": round(warm.seconds, 3),
            "warmup_forward_passes": engine.stats.forward_passes,
            "warmup_answer_tokens": engine.stats.answer_tokens,
            "warmup_failures": sum(answer.failure is not None for answer in warm_answers),
        }
    )
    warm_labels = [answer_labels(answer, call) for answer, call in zip(warm_answers, warm_calls, strict=True)]
    try:
        emit(check_warmup(stand_in, warm_answers, warm_calls, bench.oracle[:2], warm_labels))
    except SystemExit as error:
        emit({"engine": name, "stand_in_error": str(error)})
        raise
    engine.stats = type(engine.stats)()
    with Timer(device) as timer:
        answers = engine.run(calls, drafts, progress=_progress_printer(name))
    labels = [answer_labels(answer, call) for answer, call in zip(answers, calls, strict=True)]
    stats = engine.stats
    pages = len({call.page for call in calls})
    passes = sum(answer.forward_passes or 0 for answer in answers)  # per sequence, batching aside
    report(
        name,
        model,
        calls,
        timer,
        stats.answer_tokens,
        passes,
        peak,
        forward_passes_per_block=round(passes / max(sum(call.n_blocks for call in calls), 1), 3),
        batched_steps=stats.forward_passes,
        decisions_per_page=round(stats.decisions / pages, 1),
        main_share=round(main_share(answers), 3),
        label_runs_per_page=round(sum(label_runs(blocks) for blocks in labels) / pages, 1),
        oracle_agreement=agreement_share(labels, bench.oracle),
        draft_agreement=agreement_share(labels, drafts) if drafts is not None else None,
        draft_acceptance=round(stats.accepted_draft_tokens / max(stats.draft_tokens, 1), 3),
        failures=sum(answer.failure is not None for answer in answers),
        failure_reasons=sorted({answer.failure for answer in answers if answer.failure})[:3],
        stand_in=stand_in,
    )
    return [_without_stops(answer.token_ids or [], vocabulary) for answer in answers]


def _progress_printer(name: str):
    """Engine progress as JSON lines on stderr (stdout keeps the results), so a slow run shows it lives."""

    def show(progress) -> None:
        print(json.dumps({"progress_of": name, **progress.as_dict()}), file=sys.stderr, flush=True)

    return show


def run_plain_generate(model, vocabulary, calls, device: str, peak, targets: OracleTargets | None = None):
    """transformers ``generate`` (greedy, KV cache, one call at a time) with the same constraint (and, with
    ``targets``, the same steering as our engine's runner)."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    from dripper.labelers.lm_tokens import AnswerAutomaton

    class RegexConstraint(LogitsProcessor):
        """Masks every token the answer regex does not allow next (our automaton, vLLM's semantics)."""

        def __init__(self, regex: str, prompt_length: int) -> None:
            self.automaton = AnswerAutomaton(regex, vocabulary)
            self.prompt_length, self.state, self.seen = prompt_length, self.automaton.start, 0

        def __call__(self, input_ids, scores):
            for token in input_ids[0, self.prompt_length + self.seen :].tolist():
                self.state = self.automaton.advance(self.state, token) if self.state is not None else None
                self.seen += 1
            allowed = (
                list(self.automaton.allowed(self.state)) if self.state is not None else vocabulary.stop_ids
            )
            masked = torch.full_like(scores, float("-inf"))
            masked[:, allowed] = scores[:, allowed]
            return masked

    def generate(call):
        ids = torch.tensor([call.prompt_ids], device=device)
        processors = [RegexConstraint(call.regex, ids.shape[1])]
        if targets is not None:
            processors.insert(0, oracle_logits(targets, model, call.prompt_ids))
        output = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=call.max_tokens,
            do_sample=False,
            logits_processor=LogitsProcessorList(processors),
            eos_token_id=vocabulary.stop_ids,
            pad_token_id=vocabulary.stop_ids[0],
        )
        return output[0, ids.shape[1] :].tolist()

    generate(calls[0])  # warm-up
    with Timer(device) as timer:
        outputs = [generate(call) for call in calls]
    answer_tokens = sum(len(output) for output in outputs)
    # generate runs one forward pass per token it emits, forced or not.
    report("transformers generate + constraint", model, calls, timer, answer_tokens, answer_tokens, peak)
    return [_without_stops(output, vocabulary) for output in outputs]


def run_vllm(model, tokenizer, vocabulary, calls, context: int, device: str, peak):
    """vLLM's offline engine (through the ``vllm`` labeler) on the same weights, saved to a temporary folder."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        emit({"engine": "vllm", "skipped": "vllm is not installed"})
        return None
    from dripper.labelers.vllm_labeler import VLLMLabeler

    if not device.startswith("cuda"):
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB

    with tempfile.TemporaryDirectory(prefix="dripper-bench-model-") as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        started = time.perf_counter()
        labeler = VLLMLabeler(
            folder,
            max_model_len=context,
            dtype="bfloat16" if device.startswith("cuda") else "float32",
            gpu_memory_utilization=0.5 if device.startswith("cuda") else 0.2,
            enforce_eager=not device.startswith("cuda"),
            logprobs=0,
        )
        emit({"vllm_engine_start_seconds": round(time.perf_counter() - started, 1)})
        try:
            # Warm-up on the first 256 prompt tokens only: prefix caching keeps the shared instruction
            # prefix (as in production), not whole prompts of the measured run.
            labeler.generate([dataclasses.replace(calls[0], prompt_ids=calls[0].prompt_ids[:256])])
            with Timer(device) as timer:
                answers = labeler.generate(calls)
        finally:
            labeler.close()
    outputs = [_without_stops(answer.token_ids or [], vocabulary) for answer in answers]
    answer_tokens = sum(len(answer.token_ids or []) for answer in answers)
    report("vllm (offline engine)", model, calls, timer, answer_tokens, None, peak)
    return outputs


def _without_stops(tokens: list[int], vocabulary) -> list[int]:
    return [token for token in tokens if token not in vocabulary.stop_ids]


def agreement(name: str, reference: list[list[int]] | None, other: list[list[int]] | None) -> None:
    """Token-for-token agreement of ``other``'s answers with the reference (``torch``, speculation on)."""
    if reference is not None and other is not None:
        differing = [i for i, (a, b) in enumerate(zip(reference, other, strict=False)) if a != b]
        emit(
            {
                "agreement_with_torch_speculation": name,
                "identical_answers": f"{len(other) - len(differing)}/{len(other)}",
                "differing_calls": differing[:10],
            }
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--prepare", action="store_true", help="write the calls file and print prompt statistics"
    )
    parser.add_argument(
        "--source", type=Path, default=None, help="pages JSONL(.gz) (default: dev, else sample)"
    )
    parser.add_argument(
        "--source-limit", type=int, default=0, help="--prepare: only the first N source pages"
    )
    parser.add_argument("--context", type=int, default=32_768, help="--prepare: context to window prompts to")
    parser.add_argument("--calls", type=Path, default=CALLS_FILE, help=f"calls file (default {CALLS_FILE})")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer model on CPU")
    parser.add_argument(
        "--arch", choices=sorted(SHAPES), default="qwen3", help="Qwen3-0.6B (v1.0) or HunYuan-0.5B (v1.1)"
    )
    parser.add_argument("--tag", help='a run name added to every result line (as "run")')
    parser.add_argument("--pages", type=int, default=0, help="only the first N pages (0: all)")
    parser.add_argument("--max-prompt-tokens", type=int, default=0, help="skip pages with longer prompts")
    parser.add_argument("--plain-pages", type=int, default=8, help="pages for the transformers generate run")
    parser.add_argument(
        "--max-batch", type=int, default=64, help="sequences the torch engine decodes together"
    )
    parser.add_argument(
        "--digit-scale",
        type=float,
        default=6.0,
        help="how strongly labels follow the block id: higher, more label switches (fewer accepted drafts)",
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="torch CPU threads (0: torch's default; 1 on a shared machine)"
    )
    parser.add_argument(
        "--train-steps",
        type=int,
        default=0,
        help="first train the model this many steps on oracle answers of pages not benchmarked (README: 150)",
    )
    parser.add_argument(
        "--train-max-tokens", type=int, default=8192, help="--train-steps: longest training prompt"
    )
    parser.add_argument(
        "--sequential-pages",
        type=int,
        default=0,
        help="also run the engine one sequence at a time through transformers' forward on this many pages",
    )
    parser.add_argument("--no-vllm", action="store_true", help="skip vLLM even where it is installed")
    parser.add_argument(
        "--routed-share",
        type=float,
        default=None,
        help="only the pages a CPU -> LM cascade of this share routes (declined, then least confident)",
    )
    parser.add_argument(
        "--shipped-only",
        action="store_true",
        help="only the shipped engine (torch, speculation=previous): no generate baseline, no ablations",
    )
    parser.add_argument(
        "--stand-in",
        choices=STAND_INS,
        default="oracle",
        help="oracle: steered toward the oracle answers (a trained labeler's acceptance rate); shaped: the "
        "random model alone",
    )
    parser.add_argument(
        "--stand-in-check",
        action="store_true",
        help="CPU: the stand-in at Qwen3-0.6B's width and vocabulary (2 layers) on 3 short pages; one JSON line",
    )
    parser.add_argument("--output", type=Path, help="also append the result lines to this file")
    args = parser.parse_args(argv)
    _OUTPUT[:] = [args.output] if args.output else []
    _TAG.clear()
    if args.tag:
        _TAG["run"] = args.tag
    if args.stand_in_check:
        return stand_in_check(args)
    if args.prepare or not args.calls.exists():
        emit(
            {
                "prompt_statistics": prepare(
                    args.source or default_source(), args.context, args.calls, args.source_limit
                )
            }
        )
        if args.prepare:
            return 0

    import torch

    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    if args.threads:
        torch.set_num_threads(args.threads)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    peak = next((flops for key, flops in PEAK_FLOPS.items() if key in name), None)
    bench = load_calls(args.calls, args.pages, args.max_prompt_tokens, args.routed_share)
    calls = bench.calls
    pages = sorted({call.page for call in calls})
    emit(
        {
            "device": name,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "source": bench.source,
            "context": bench.context,
            "pages": len(pages),
            "calls": len(calls),
            "routed_share": args.routed_share,
            "prompt_tokens_per_page": round(sum(len(c.prompt_ids) for c in calls) / max(len(pages), 1)),
            # How a good labeler's labels run on these pages (speculation's best case), for reference.
            "oracle_label_runs_per_page": runs_per_page(calls, bench.oracle),
            "cpu_labeler_runs_per_page": runs_per_page(calls, bench.drafts),
        }
    )
    started = time.perf_counter()
    model, tokenizer = build_model(
        TINY_SHAPE if args.tiny else SHAPES[args.arch], device, args.digit_scale, args.arch
    )
    vocabulary = vocabulary_for(tokenizer, model)
    steering = {"stand_in": args.stand_in, "targets": None}
    if args.stand_in == "oracle":
        if not any(labels is not None for labels in bench.oracle):
            raise SystemExit(
                "--stand-in oracle: no call has oracle labels (prepare from pages with ground truth)"
            )
        steering["targets"] = OracleTargets(tokenizer, vocabulary, calls, bench.oracle)
    config = model.config
    embedding = config.vocab_size * config.hidden_size * 2  # input embedding and LM head (untied)
    emit(
        {
            "model_built_seconds": round(time.perf_counter() - started, 1),
            "architecture": config.model_type,
            "layers": config.num_hidden_layers,
            "hidden_size": config.hidden_size,
            "parameters": sum(p.numel() for p in model.parameters()),
            "non_embedding_parameters": sum(p.numel() for p in model.parameters()) - embedding,
            # The formula report() uses: 2 x non-embedding weights + 4 x layers x heads x head_dim x span.
            "flops_per_token_at_span_0": flops_per_token(config, 0),
            "attention_flops_per_token_per_key": 4
            * config.num_hidden_layers
            * config.num_attention_heads
            * config.head_dim,
            "dtype": str(next(model.parameters()).dtype),
            "weights_gib": round(torch.cuda.memory_allocated() / 2**30, 2) if device == "cuda" else None,
        }
    )
    if args.train_steps:
        emit(
            train_on_oracle(model, tokenizer, bench.held_out, args.train_steps, args.train_max_tokens, device)
        )
    # Most telling first, so a run cut off by its time limit keeps it: our engine as shipped, then the
    # baseline a user would otherwise take, then the ablations.
    with torch.inference_mode():
        speculative = guarded(
            "torch (speculation=previous)",
            run_torch_engine,
            model,
            vocabulary,
            bench,
            "previous",
            args.max_batch,
            device,
            peak,
            **steering,
        )
        if args.shipped_only:
            return 0
        chosen = [i for i, call in enumerate(calls) if call.page in set(pages[: args.plain_pages])]
        if chosen:
            generated = guarded(
                "transformers generate + constraint",
                run_plain_generate,
                model,
                vocabulary,
                [calls[i] for i in chosen],
                device,
                peak,
                steering["targets"],
            )
            reference = [speculative[i] for i in chosen] if speculative is not None else None
            agreement("transformers generate + constraint", reference, generated)
        plain = guarded(
            "torch (speculation=none)",
            run_torch_engine,
            model,
            vocabulary,
            bench,
            "none",
            args.max_batch,
            device,
            peak,
            **steering,
        )
        agreement("torch (speculation=none)", speculative, plain)
        if any(draft is not None for draft in bench.drafts):
            drafted = guarded(
                "torch (speculation=draft)",
                run_torch_engine,
                model,
                vocabulary,
                bench,
                "draft",
                args.max_batch,
                device,
                peak,
                **steering,
            )
            agreement("torch (speculation=draft)", speculative, drafted)
        if args.sequential_pages:
            # The same engine on transformers' forward one sequence at a time: what batching gains.
            keep = set(pages[: args.sequential_pages])
            chosen = [i for i, call in enumerate(calls) if call.page in keep]
            few = dataclasses.replace(
                bench,
                calls=[calls[i] for i in chosen],
                drafts=[bench.drafts[i] for i in chosen],
                oracle=[bench.oracle[i] for i in chosen],
            )
            one_by_one = guarded(
                "torch (sequential runner, speculation=previous)",
                run_torch_engine,
                model,
                vocabulary,
                few,
                "previous",
                args.max_batch,
                device,
                peak,
                True,
                **steering,
            )
            reference = [speculative[i] for i in chosen] if speculative is not None else None
            agreement("torch (sequential runner, speculation=previous)", reference, one_by_one)
    if not args.no_vllm and args.stand_in == "oracle":
        emit(
            {
                "engine": "vllm",
                "skipped": "the oracle stand-in steers our runner; run vLLM with --stand-in shaped",
            }
        )
    elif not args.no_vllm:
        served = guarded(
            "vllm (offline engine)",
            run_vllm,
            model,
            tokenizer,
            vocabulary,
            calls,
            bench.context,
            device,
            peak,
        )
        agreement("vllm (offline engine)", speculative, served)
    return 0


def guarded(name: str, run, *args, **kwargs):
    """``run(*args, **kwargs)``, or ``None`` after emitting the error: on a one-shot GPU run one failing
    engine must not cost the others' figures (a stand-in that fails its warm-up check stops the run)."""
    try:
        return run(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - reported, and the run goes on
        emit({"engine": name, "error": f"{type(error).__name__}: {error}"[:2000]})
        return None


def stand_in_check(args) -> int:
    """``--stand-in-check``: does the stand-in answer like a labeler at Qwen3-0.6B's width? CPU, seconds.

    Prepares the first ``--source-limit`` (12) source pages, keeps 3 whose prompts fit 4,096 tokens, builds
    the stand-in at 1024 wide x 2 layers with the real 151,936-token vocabulary and labels them with the
    shipped engine options; prints one JSON line. Exit status 1 when a call fails or the engine needs more
    than 0.5 forward passes per block (the design point is ~0.28).
    """
    import torch

    from dripper.labelers.torch_decoder import ConstrainedDecoder, EngineOptions
    from dripper.prompt import answer_format

    torch.set_num_threads(args.threads or 1)
    with tempfile.TemporaryDirectory(prefix="dripper-stand-in-check-") as folder:
        calls_file = Path(folder) / "calls.json.gz"
        prepare(args.source or default_source(), args.context, calls_file, args.source_limit or 12)
        bench = load_calls(calls_file, args.pages or 3, args.max_prompt_tokens or 4096)
    pages = len({call.page for call in bench.calls})
    if pages < 3:
        raise SystemExit(f"--stand-in-check: only {pages} pages fit; raise --source-limit")
    started = time.perf_counter()
    model, tokenizer = build_model(CHECK_SHAPE, "cpu", args.digit_scale)
    vocabulary = vocabulary_for(tokenizer, model)
    built = time.perf_counter() - started
    engine = ConstrainedDecoder(model, vocabulary, answer_format("compact"), EngineOptions())
    if args.stand_in == "oracle":
        engine.runner = OracleSteering(
            engine.runner, model, OracleTargets(tokenizer, vocabulary, bench.calls, bench.oracle)
        )
    started = time.perf_counter()
    answers = engine.run(bench.calls, progress=_progress_printer("stand-in check"))
    seconds = time.perf_counter() - started
    labels = [answer_labels(answer, call) for answer, call in zip(answers, bench.calls, strict=True)]
    blocks = sum(call.n_blocks for call in bench.calls)
    passes = sum(answer.forward_passes or 0 for answer in answers)
    result = {
        "stand_in_check": args.stand_in,
        "hidden_size": model.config.hidden_size,
        "layers": model.config.num_hidden_layers,
        "vocab_size": model.config.vocab_size,
        "pages": pages,
        "calls": len(bench.calls),
        "blocks": blocks,
        "failures": sum(answer.failure is not None for answer in answers),
        "failure_reasons": sorted({answer.failure for answer in answers if answer.failure})[:3],
        "forward_passes_per_block": round(passes / max(blocks, 1), 3),
        "oracle_agreement": agreement_share(labels, bench.oracle),
        "seconds": round(seconds, 2),
        "model_built_seconds": round(built, 1),
    }
    emit(result)
    return 0 if result["failures"] == 0 and result["forward_passes_per_block"] <= 0.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
