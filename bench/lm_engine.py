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
   bf16 weights, shaped like a labeler by ``scripts/make_tiny_models.shape_label_preferences`` so its labels
   vary and are whole words), then reports, in the same run, pages/s, prompt and answer tokens/s, forward
   passes per page, peak GPU memory, the model FLOPs done and achieved FLOP/s (MFU against the GPU's bf16
   peak) of the ``torch`` engine (speculation on and off), of transformers ``generate`` with the same
   constraint (greedy, KV cache, a logits processor) on ``--plain-pages``, and of vLLM's offline engine
   where vLLM is installed; and how often their answers agree token for token.

``--tiny`` runs the same path on CPU with a 2-layer model (hidden 128): there model compute is negligible,
so it shows engine overheads and forward passes per page against blocks per page. If the calls file is
missing, the run prepares it first (that needs the HTML stack).

Every result is one JSON line on stdout (and appended to ``--output``, so a killed run keeps what it measured);
an engine that fails is reported as ``{"engine": …, "error": …}`` and the run goes on. ``bench/gpu_suite.py``
runs this for both architectures, then the pretraining bench, within one time budget.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "scripts")]

CALLS_FILE = REPO / ".cache" / "bench" / "lm_calls.json.gz"
TOKENIZER_DIR = REPO / ".cache" / "models" / "qwen-tokenizer"
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


# -- step 1: prompts ----------------------------------------------------------------------------------


def default_source() -> Path:
    dev = REPO.parent / "shared" / "data" / "dev.jsonl.gz"
    return dev if dev.exists() else REPO / "data" / "sample" / "pages.jsonl.gz"


def prepare(source: Path, context: int, calls_file: Path, limit: int = 0) -> dict:
    """Prompts of ``source``'s pages as token ids, windowed to ``context``; returns the prompt statistics."""
    from dripper.labelers.base import LabelRequest
    from dripper.labelers.lm_common import CallPlanner, load_tokenizer
    from dripper.labelers.lm_prompts import PromptRenderer
    from dripper.prompt import answer_format
    from dripper.simplify import SimplifyOptions, simplify_html
    from dripper.types import Page

    tokenizer = load_tokenizer(TOKENIZER_DIR)
    renderer = PromptRenderer(tokenizer, answer_format("compact"))
    planners = {size: CallPlanner(renderer, size) for size in sorted({8192, 32768, context})}
    requests, raw_tokens, simplified_tokens = [], 0, 0
    with gzip.open(source, "rt", encoding="utf-8") as lines:
        for index, line in enumerate(lines):
            if limit and index >= limit:
                break
            record = json.loads(line)
            html = record["html"]
            page = simplify_html(html, str(index), None, SimplifyOptions(block_text=True))
            raw_tokens += len(tokenizer(html, add_special_tokens=False, verbose=False)["input_ids"])
            simplified_tokens += len(tokenizer(page.simplified_html, add_special_tokens=False)["input_ids"])
            if page.n_blocks:
                ground_truth = record.get("ground_truth_text") or None
                requests.append(LabelRequest(Page(str(index), "", ground_truth=ground_truth), page))
    planned = {size: planner.plan(requests) for size, planner in planners.items()}
    oracle, drafts, route_keys = page_labels(requests)
    lengths = planners[context].stats.prompt_lengths  # the whole-page prompt of every labellable page
    stats = {
        "source": source.name,
        "pages": len(requests),
        "prompt_tokens_mean": round(statistics.mean(lengths)),
        "prompt_tokens_median": round(statistics.median(lengths)),
        "prompt_tokens_max": max(lengths),
        "blocks_mean": round(statistics.mean(r.simplified.n_blocks for r in requests), 1),
        "simplified_share_of_raw_html_tokens": round(simplified_tokens / max(raw_tokens, 1), 4),
    }
    for size in (8192, 32768):
        stats[f"pages_over_{size // 1024}k"] = sum(length > size for length in lengths)
        stats[f"windowed_pages_at_{size // 1024}k"] = planners[size].stats.windowed_pages
        stats[f"windows_at_{size // 1024}k"] = planners[size].stats.windows
        stats[f"failed_pages_at_{size // 1024}k"] = len(planned[size][1])
    calls, failures = planned[context]
    calls_file.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(calls_file, "wt", encoding="utf-8") as out:
        json.dump(
            {
                "source": source.name,
                "context": context,
                "pages": len(requests),
                "failed_pages": len(failures),
                "calls": [
                    {
                        "page": call.page,
                        "first_block": call.first_block,
                        "n_blocks": call.n_blocks,
                        "oracle": _window(oracle[call.page], call),
                        "cpu_draft": _window(drafts[call.page], call),
                        "cpu_route": route_keys[call.page],
                        "prompt_ids": call.prompt_ids,
                        "regex": call.regex,
                        "max_tokens": call.max_tokens,
                    }
                    for call in calls
                ],
            },
            out,
        )
    stats["pages_with_oracle_labels"] = sum(labels is not None for labels in oracle)
    stats["calls_file"] = str(calls_file)
    stats["context"] = context
    stats["calls"] = len(calls)
    return stats


def page_labels(requests) -> tuple[list, list, list[tuple[bool, float | None]]]:
    """Per page: the ``oracle`` labels (full-text ground truth only; training targets for ``--train-steps``),
    the ``cpu`` labeler's labels (drafts for ``speculation=draft``; ``None`` where there are none) and
    its cascade routing key ``(declined, score)``, which ``--routed-share`` ranks pages by."""
    from dripper.labelers import build_labeler
    from dripper.routing import route_score

    def main_or_none(labels) -> list[bool] | None:
        return list(labels.main) if labels.main is not None else None

    oracle = [main_or_none(labels) for labels in build_labeler("oracle").label_batch(requests)]
    cpu = build_labeler("cpu").label_batch(requests)
    keys = [(labels.main is None, route_score(labels)) for labels in cpu]
    return oracle, [main_or_none(labels) for labels in cpu], keys


def _window(labels: list[bool] | None, call) -> list[bool] | None:
    return labels[call.first_block : call.first_block + call.n_blocks] if labels is not None else None


@dataclasses.dataclass
class BenchCalls:
    """The prepared calls: those benchmarked and the rest (training data for ``--train-steps``).

    ``drafts`` and ``oracle`` run parallel to ``calls``: the CPU labeler's and the oracle's labels of each
    call's blocks (``None`` where a page has none).
    """

    source: str
    context: int
    calls: list
    drafts: list
    oracle: list
    held_out: list[dict]


def load_calls(
    calls_file: Path, pages: int, max_prompt_tokens: int, routed_share: float | None = None
) -> BenchCalls:
    """The prepared calls as :class:`LMCall`, the first ``pages`` pages whose windows all fit the limit.

    With ``routed_share``, only the pages a cascade of that share would send to the LM, chosen among the
    prepared pages by the same rule as the pipeline's (:func:`dripper.routing.select_routed`: the
    pages the CPU labeler declined, then its least confident), before ``pages`` applies.
    """
    from dripper.labelers.lm_common import LMCall
    from dripper.routing import RoutePolicy, select_routed

    with gzip.open(calls_file, "rt", encoding="utf-8") as lines:
        bundle = json.load(lines)
    if "first_block" not in bundle["calls"][0]:
        raise SystemExit(f"{calls_file} predates oracle labels and drafts: run --prepare again")
    longest: dict[int, int] = {}
    for call in bundle["calls"]:
        longest[call["page"]] = max(longest.get(call["page"], 0), len(call["prompt_ids"]))
    keep = sorted(
        page for page, length in longest.items() if not max_prompt_tokens or length <= max_prompt_tokens
    )
    if routed_share is not None:
        if "cpu_route" not in bundle["calls"][0]:
            raise SystemExit(f"{calls_file} predates the CPU labeler's routing keys: run --prepare again")
        route = {call["page"]: tuple(call["cpu_route"]) for call in bundle["calls"]}
        chosen_pages = select_routed([route[page] for page in keep], RoutePolicy(share=routed_share))
        keep = sorted(keep[i] for i in chosen_pages)
    keep = set(keep[:pages] if pages else keep)
    chosen = [c for c in bundle["calls"] if c["page"] in keep]
    return BenchCalls(
        source=bundle["source"],
        context=bundle["context"],
        calls=[
            LMCall(
                c["page"], c["first_block"], c["n_blocks"], "", c["prompt_ids"], c["regex"], c["max_tokens"]
            )
            for c in chosen
        ],
        drafts=[c["cpu_draft"] for c in chosen],
        oracle=[c["oracle"] for c in chosen],
        held_out=[c for c in bundle["calls"] if c["page"] not in keep],
    )


# -- step 2: engines ----------------------------------------------------------------------------------


# (hidden, layers, query heads, KV heads, MLP) of the released models, and of the 2-layer CPU stand-in.
SHAPES = {
    "qwen3": (1024, 28, 16, 8, 3072),  # Qwen3-0.6B (v1.0 weights), head_dim 128
    "hunyuan": (1024, 24, 16, 8, 3584),  # HunYuan-0.5B (v1.1 weights), head_dim 128
}
TINY_SHAPE = (128, 2, 2, 1, 256)


def build_model(tiny: bool, device: str, digit_scale: float, arch: str = "qwen3"):
    """Qwen3-0.6B's or HunYuan-0.5B's architecture (or a 2-layer one) with random weights shaped like a labeler.

    Both take Qwen's vocabulary (the prompts are Qwen token ids); HunYuan's own is 120,818 tokens, so its
    embedding and head are larger here than in the release, its layers the same.
    """
    import torch
    from make_tiny_models import ARCHITECTURES, causal_lm, shape_label_preferences, vary_query_key_norms

    from dripper.labelers.lm_common import load_tokenizer

    tokenizer = load_tokenizer(TOKENIZER_DIR)
    hidden, layers, heads, kv_heads, mlp = TINY_SHAPE if tiny else SHAPES[arch]
    config = ARCHITECTURES[arch](hidden, layers, heads=heads, kv_heads=kv_heads, intermediate=mlp)
    config.initializer_range = 0.05
    config.tie_word_embeddings = False  # the label shaping needs its own head rows (0.16 B more parameters)
    config._attn_implementation = "sdpa"  # transformers' generate on the same attention kernels as ours
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = causal_lm(config)(config).to(dtype).eval()
    # Whole-word labels, as a trained labeler writes them; how often they switch follows digit_scale.
    shape_label_preferences(model, tokenizer, partial_labels=False, digit_scale=digit_scale)
    if arch == "hunyuan":  # uneven query/key norm weights: their order against RoPE matters, as when trained
        vary_query_key_norms(model)
    return model, tokenizer


def train_on_oracle(model, tokenizer, examples: list[dict], steps: int, max_tokens: int, device: str) -> dict:
    """A few steps of teacher forcing on oracle answers, so the model labels like a labeler: in runs.

    A random model's labels switch at random; a trained labeler's follow the page, where main content comes
    in long runs of blocks. That is what speculation gains from, so the CPU run trains the tiny model
    briefly on pages that are not benchmarked (``examples``: prepared calls with oracle labels). The loss
    is on answer tokens only; the LM head runs on those positions only.
    """
    import random

    import torch

    from dripper.prompt import answer_format

    answers = answer_format("compact")
    pool = [c for c in examples if c["oracle"] is not None and len(c["prompt_ids"]) <= max_tokens]
    if not pool:
        raise SystemExit("--train-steps: no held-out calls with oracle labels (prepare from dev pages)")
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    # Most blocks are "other": without weighting, a few steps teach the tiny model to say "other" always.
    main_token = tokenizer.convert_tokens_to_ids("main")
    main_share = sum(sum(c["oracle"]) for c in pool) / sum(len(c["oracle"]) for c in pool)
    main_weight = min((1 - main_share) / max(main_share, 1e-6), 20.0)
    rng = random.Random(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
    model.train()
    losses = []
    started = time.perf_counter()
    for _ in range(steps):
        call = rng.choice(pool)
        answer = tokenizer(answers.format_labels(call["oracle"]), add_special_tokens=False)["input_ids"]
        ids = torch.tensor([call["prompt_ids"] + answer + [stop]], device=device)
        start = len(call["prompt_ids"]) - 1  # the position that predicts the first answer token
        hidden = model.model(input_ids=ids).last_hidden_state[0, start:-1]
        targets = ids[0, start + 1 :]
        weights = torch.where(targets == main_token, main_weight, 1.0)
        token_losses = torch.nn.functional.cross_entropy(
            model.lm_head(hidden).float(), targets, reduction="none"
        )
        loss = (token_losses * weights).sum() / weights.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    tail = losses[-max(len(losses) // 10, 1) :]
    return {
        "trained_steps": steps,
        "training_pool_calls": len(pool),
        "main_label_weight": round(main_weight, 2),
        "first_loss": round(losses[0], 3),
        "final_loss": round(statistics.mean(tail), 3),
        "training_seconds": round(time.perf_counter() - started, 1),
    }


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
):
    """Our engine on every call, after a warm-up on two; returns the answer tokens (stop ids dropped).

    ``sequential``: through transformers' own forward one sequence at a time (:class:`SequentialRunner`, the
    path of architectures the slot runner does not cover) instead of the batched slot cache.
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
    name = (
        f"torch (sequential runner, speculation={speculation})"
        if sequential
        else f"torch (speculation={speculation})"
    )
    with Timer(device) as warm:
        engine.run(calls[:2])  # warm-up: kernels, allocator
    # At once, so a run cut off later still says what two calls cost (the first GPU run stalled unexplained).
    emit(
        {
            "warmup_of": name,
            "warmup_calls": len(calls[:2]),
            "warmup_prompt_tokens": sum(len(call.prompt_ids) for call in calls[:2]),
            "warmup_seconds": round(warm.seconds, 3),
            "warmup_forward_passes": engine.stats.forward_passes,
            "warmup_answer_tokens": engine.stats.answer_tokens,
        }
    )
    engine.stats = type(engine.stats)()
    with Timer(device) as timer:
        answers = engine.run(calls, drafts)
    labels = [_labels(answer, call) for answer, call in zip(answers, calls, strict=True)]
    stats = engine.stats
    pages = len({call.page for call in calls})
    report(
        name,
        model,
        calls,
        timer,
        stats.answer_tokens,
        sum(answer.forward_passes or 0 for answer in answers),  # per sequence, batching aside
        peak,
        batched_steps=stats.forward_passes,
        decisions_per_page=round(stats.decisions / pages, 1),
        main_share=round(_main_share(answers), 3),
        label_runs_per_page=round(sum(_runs(blocks) for blocks in labels) / pages, 1),
        oracle_agreement=_agreement_share(labels, bench.oracle),
        draft_agreement=_agreement_share(labels, drafts) if drafts is not None else None,
        draft_acceptance=round(stats.accepted_draft_tokens / max(stats.draft_tokens, 1), 3),
        failures=sum(answer.failure is not None for answer in answers),
    )
    return [_without_stops(answer.token_ids or [], vocabulary) for answer in answers]


def run_plain_generate(model, vocabulary, calls, device: str, peak):
    """transformers ``generate`` (greedy, KV cache, one call at a time) with the same constraint."""
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
        output = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=call.max_tokens,
            do_sample=False,
            logits_processor=LogitsProcessorList([RegexConstraint(call.regex, ids.shape[1])]),
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


def _main_share(answers) -> float:
    text = "".join(answer.text for answer in answers)
    return text.count("main") / max(text.count("main") + text.count("other"), 1)


def _labels(answer, call) -> list[bool] | None:
    from dripper.prompt import AnswerParseError, answer_format

    try:
        return answer_format("compact").parse(answer.text, call.n_blocks) if answer.failure is None else None
    except AnswerParseError:
        return None


def _runs(labels: list[bool] | None) -> int:
    """Runs of equal labels (1 + label switches)."""
    return 1 + sum(a != b for a, b in zip(labels, labels[1:], strict=False)) if labels else 0


def _runs_per_page(calls, labels: list) -> float | None:
    """Mean runs of equal labels per page, over the pages whose every call has ``labels``."""
    runs: dict[int, int] = {}
    missing = set()
    for call, blocks in zip(calls, labels, strict=True):
        if blocks is None:
            missing.add(call.page)
        runs[call.page] = runs.get(call.page, 0) + _runs(blocks)
    kept = [count for page, count in runs.items() if page not in missing]
    return round(sum(kept) / len(kept), 1) if kept else None


def _agreement_share(labels: list, reference: list) -> float | None:
    """Share of blocks whose label equals ``reference``'s, over calls where both exist."""
    pairs = [
        (a, b)
        for mine, theirs in zip(labels, reference, strict=True)
        if mine is not None and theirs is not None
        for a, b in zip(mine, theirs, strict=True)
    ]
    return round(sum(a == b for a, b in pairs) / len(pairs), 3) if pairs else None


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
    parser.add_argument("--output", type=Path, help="also append the result lines to this file")
    args = parser.parse_args(argv)
    _OUTPUT[:] = [args.output] if args.output else []
    _TAG.clear()
    if args.tag:
        _TAG["run"] = args.tag
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
            "oracle_label_runs_per_page": _runs_per_page(calls, bench.oracle),
            "cpu_labeler_runs_per_page": _runs_per_page(calls, bench.drafts),
        }
    )
    started = time.perf_counter()
    model, tokenizer = build_model(args.tiny, device, args.digit_scale, args.arch)
    vocabulary = vocabulary_for(tokenizer, model)
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
            )
            reference = [speculative[i] for i in chosen] if speculative is not None else None
            agreement("torch (sequential runner, speculation=previous)", reference, one_by_one)
    if not args.no_vllm:
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


def guarded(name: str, run, *args):
    """``run(*args)``, or ``None`` after emitting the error: on a one-shot GPU run one failing engine must
    not cost the others' figures."""
    try:
        return run(*args)
    except Exception as error:  # noqa: BLE001 - reported, and the run goes on
        emit({"engine": name, "error": f"{type(error).__name__}: {error}"[:2000]})
        return None


if __name__ == "__main__":
    raise SystemExit(main())
