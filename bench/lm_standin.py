"""The LM engine benchmark's stand-in model: the released architectures, random weights, labeler behaviour.

No trained weights reach the GPU machine, so ``bench/lm_engine.py`` measures the engine on a model with
Qwen3-0.6B's (or HunYuan-0.5B's) exact architecture and random weights. What the engine costs depends on
how the model answers: a trained labeler writes ``<answer>1main2other…</answer>`` with labels in long runs,
which speculation verifies many blocks per forward pass. A random model does neither, so two stand-ins:

- ``oracle`` (the default): the shaped random model below, steered toward the oracle answer of each call
  (the labels from the page's ground truth, as ``--prepare`` stored them). The steering lives in the
  benchmark only, as a wrapper of the engine's runner (:class:`OracleSteering`) and a logits processor for
  transformers ``generate`` (:class:`OracleLogits`): at every position whose answer so far is a prefix of
  the oracle answer it adds ``margin`` logits to the oracle's next token, through the hidden state (one
  indexed add per step, counted in the timings). The model computes everything a trained one would; its
  answers follow the reference labels at any width and depth, so speculation is measured at a trained
  labeler's acceptance rate.
- ``shaped``: the model alone (labels follow the block ids, switching far more often than a labeler's).

2026-12-04's GPU run stalled on the shaped model: its whitespace penalty sat in hidden dimension 0, which
the final RMSNorm divides by the residual stream's size, so at 1024 wide it no longer outweighed the 437
whitespace tokens the regex allows after ``<answer>`` and every call wrote whitespace to ``max_tokens``.
:func:`calibrate_label_bias` now sets the final norm's weight on that dimension from a measured forward
pass, so the bias survives normalisation at any shape.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from lm_calls import TOKENIZER_DIR

# (hidden, layers, query heads, KV heads, MLP) of the released models, and of the 2-layer CPU stand-in.
SHAPES = {
    "qwen3": (1024, 28, 16, 8, 3072),  # Qwen3-0.6B (v1.0 weights), head_dim 128
    "hunyuan": (1024, 24, 16, 8, 3584),  # HunYuan-0.5B (v1.1 weights), head_dim 128
}
TINY_SHAPE = (128, 2, 2, 1, 256)
CHECK_SHAPE = (1024, 2, 16, 8, 3072)  # --stand-in-check: Qwen3-0.6B's width and vocabulary, 2 layers
STAND_INS = ("oracle", "shaped")
BIAS_AFTER_NORM = 2.0  # hidden dimension 0 after the final norm, as the 128-wide model has it (2.18)


def build_model(shape: tuple, device: str, digit_scale: float, arch: str = "qwen3"):
    """A model of ``arch`` at ``shape`` with random weights shaped like a labeler, and Qwen's tokenizer.

    Both architectures take Qwen's vocabulary (the prompts are Qwen token ids); HunYuan's own is 120,818
    tokens, so its embedding and head are larger here than in the release, its layers the same.
    """
    import torch
    from make_tiny_models import ARCHITECTURES, causal_lm, shape_label_preferences, vary_query_key_norms

    from dripper.labelers.lm_common import load_tokenizer

    tokenizer = load_tokenizer(TOKENIZER_DIR)
    hidden, layers, heads, kv_heads, mlp = shape
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
    calibrate_label_bias(model, tokenizer)
    return model, tokenizer


def calibrate_label_bias(model, tokenizer, target: float = BIAS_AFTER_NORM) -> float:
    """Scale the final norm's weight on hidden dimension 0 so that dimension reads ``target`` after it.

    ``shape_label_preferences`` keeps dimension 0 of the residual stream constant and biases the LM head
    through it; RMSNorm divides it by the stream's RMS, which grows with width and depth. The RMS is
    measured on a short text (the median over positions); returns the weight set.
    """
    import torch

    ids = tokenizer("<answer>1main2other3main</answer> " * 8, add_special_tokens=False)["input_ids"]
    device = next(model.parameters()).device
    captured = {}
    norm = model.model.norm
    hook = norm.register_forward_hook(lambda module, args, out: captured.setdefault("x", args[0]))
    try:
        with torch.inference_mode():
            model.model(input_ids=torch.tensor([ids], device=device))
    finally:
        hook.remove()
    x = captured["x"][0].float()
    rms = x.pow(2).mean(-1).add(norm.variance_epsilon).sqrt()
    constant = x[:, 0].abs().median().item()
    weight = target * rms.median().item() / max(constant, 1e-6)
    with torch.no_grad():
        norm.weight[0] = weight
    return weight


class OracleTargets:
    """The oracle answer of each call, and the token that continues a given answer prefix toward it."""

    def __init__(self, tokenizer, vocabulary, calls, oracle: list) -> None:
        from dripper.prompt import answer_format

        fmt = answer_format("compact")
        self.tokenizer = tokenizer
        self.token_bytes = vocabulary.token_bytes
        self.by_prompt: dict[tuple[int, ...], bytes] = {}
        self.lengths: set[int] = set()
        for call, labels in zip(calls, oracle, strict=True):
            if labels is not None:
                self.by_prompt[tuple(call.prompt_ids)] = fmt.format_labels(labels).encode()
                self.lengths.add(len(call.prompt_ids))
        self._next: dict[tuple[bytes, int], int | None] = {}

    def find(self, tokens: list[int]) -> tuple[int, bytes] | None:
        """``(prompt length, oracle answer)`` of the call whose prompt starts ``tokens`` (a prefill)."""
        for length in range(len(tokens), max(len(tokens) - 8, 0), -1):  # prompt + a few forced tokens
            if length in self.lengths:
                target = self.by_prompt.get(tuple(tokens[:length]))
                if target is not None:
                    return length, target
        return None

    def next_token(self, target: bytes, offset: int) -> int | None:
        """The token that continues ``target[:offset]`` (``None`` at its end)."""
        key = (target, offset)
        if key not in self._next:
            rest = target[offset : offset + 24].decode("utf-8", errors="ignore")
            ids = self.tokenizer(rest, add_special_tokens=False)["input_ids"] if rest else []
            self._next[key] = ids[0] if ids else None
        return self._next[key]

    def advance(self, target: bytes, offset: int | None, token: int) -> int | None:
        """The byte offset after ``token`` if ``target[:offset]`` + it still spells a prefix of ``target``,
        else ``None`` (off target: steering stops for the rest of the answer)."""
        if offset is None:
            return None
        data = self.token_bytes[token] or b""
        return offset + len(data) if target[offset : offset + len(data)] == data else None

    def steer_offset(self, target: bytes, answer: list[int]) -> int | None:
        """Byte length of ``answer`` if it spells a prefix of ``target``, else ``None`` (steering stops)."""
        offset: int | None = 0
        for token in answer:
            offset = self.advance(target, offset, token)
        return offset


class _Sequence:
    """What a slot holds, as the steering sees it."""

    def __init__(self, prompt_length: int, target: bytes) -> None:
        self.prompt_length, self.target = prompt_length, target
        self.tokens: list[int] = []
        self.offsets: list[int | None] = []  # per answer token: byte offset after it (None: off target)


class OracleSteering:
    """Wraps the engine's runner: after each forward pass, adds ``margin`` logits toward the oracle's next
    token at every position whose answer so far spells a prefix of the oracle answer (benchmark only)."""

    def __init__(self, runner, model, targets: OracleTargets, margin: float = 40.0) -> None:
        import torch

        self.torch = torch
        self.runner = runner
        self.targets = targets
        self.head = model.get_output_embeddings().weight
        self.scale = margin / self.head.float().pow(2).sum(-1).clamp_min(1e-6)  # per token: margin / |row|²
        self.device = self.head.device
        self.sequences: dict[int, _Sequence | None] = {}
        self.steered = 0

    def __getattr__(self, name: str) -> Any:  # groups, slots, truncate…: the runner's own
        return getattr(self.runner, name)

    def move(self, source: int, target: int, length: int) -> None:
        self.runner.move(source, target, length)
        self.sequences[target] = self.sequences.pop(source, None)

    def forward(self, slots, starts, inputs, causal_fresh):
        hidden = self.runner.forward(slots, starts, inputs, causal_fresh)
        rows, cols, tokens = [], [], []
        for i, (slot, start, fed) in enumerate(zip(slots, starts, inputs, strict=True)):
            if start == 0:
                found = self.targets.find(fed)
                self.sequences[slot] = _Sequence(*found) if found else None
            sequence = self.sequences.get(slot)
            if sequence is None:
                continue
            del sequence.tokens[start:]
            del sequence.offsets[max(start - sequence.prompt_length, 0) :]
            sequence.tokens.extend(fed)
            for j in range(len(fed)):
                position = start + j
                if position < sequence.prompt_length - 1:
                    continue
                if position >= sequence.prompt_length:
                    previous = sequence.offsets[-1] if sequence.offsets else 0
                    token = sequence.tokens[position]
                    sequence.offsets.append(self.targets.advance(sequence.target, previous, token))
                offset = sequence.offsets[-1] if position >= sequence.prompt_length else 0
                token = self.targets.next_token(sequence.target, offset) if offset is not None else None
                if token is not None:
                    rows.append(i)
                    cols.append(j)
                    tokens.append(token)
        if tokens:
            torch = self.torch
            index = torch.tensor([rows, cols, tokens], device=self.device)
            push = self.head[index[2]] * self.scale[index[2], None].to(self.head.dtype)
            hidden[index[0], index[1]] += push.to(hidden.dtype)
            self.steered += len(tokens)
        return hidden


def oracle_logits(targets: OracleTargets, model, prompt_ids: list[int], margin: float = 40.0):
    """A transformers ``LogitsProcessor`` steering ``generate`` as :class:`OracleSteering` steers our engine
    (the same push, applied to the logits: ``margin × head · head[t] / |head[t]|²``)."""
    from transformers import LogitsProcessor

    head = model.get_output_embeddings().weight
    found = targets.find(prompt_ids)

    class OracleLogits(LogitsProcessor):
        def __call__(self, input_ids, scores):
            if found is None:
                return scores
            length, target = found
            offset = targets.steer_offset(target, input_ids[0, length:].tolist())
            token = targets.next_token(target, offset) if offset is not None else None
            if token is not None:
                row = head[token]
                push = (head @ row).float() * (margin / row.float().pow(2).sum().clamp_min(1e-6))
                scores = scores + push[None, : scores.shape[-1]].to(scores.dtype)
            return scores

    return OracleLogits()


def train_on_oracle(model, tokenizer, examples: list[dict], steps: int, max_tokens: int, device: str) -> dict:
    """A few steps of teacher forcing on oracle answers, so the model labels like a labeler: in runs.

    For the ``shaped`` stand-in: a random model's labels switch at random; a trained labeler's follow the
    page, where main content comes in long runs of blocks. ``examples``: prepared calls not benchmarked,
    with oracle labels. The loss is on answer tokens only; the LM head runs on those positions only.
    """
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


class StandInError(SystemExit):
    """The stand-in does not answer as the benchmark needs: stop before measuring anything."""


def check_warmup(stand_in: str, answers, calls, oracle: list, labels: list) -> dict:
    """The warm-up's verdict on the stand-in; raises :class:`StandInError` with the reason when it fails.

    Every stand-in must close its answers (a model that never does measures ``max_tokens``, not the
    engine: 2026-12-04); the ``oracle`` stand-in must also give the oracle's labels.
    """
    failures = [answer.failure for answer in answers if answer.failure is not None]
    if failures:
        raise StandInError(
            f"stand-in {stand_in!r} failed {len(failures)}/{len(answers)} warm-up calls ({failures[0]}): "
            "it would measure a model that does not close its answers, not the engine. See "
            "docs/benchmarks.md (the 2026-12-04 run)."
        )
    if stand_in == "oracle":
        wrong = [
            call.page
            for call, mine, theirs in zip(calls, labels, oracle, strict=True)
            if theirs is not None and mine != theirs
        ]
        if wrong:
            raise StandInError(
                f"stand-in 'oracle' did not follow the oracle labels on warm-up page(s) {wrong}: the "
                "steering margin no longer outweighs the model's logits; the acceptance rate would not be "
                "a trained labeler's"
            )
    return {"stand_in": stand_in, "warmup_check": "passed", "warmup_calls": len(answers)}
