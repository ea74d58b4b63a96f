"""Our batched greedy engine with constrained decoding, jump-forward and lossless speculation.

Only label choices cost model work. At every answer position the engine asks the answer automaton
(:class:`~dripper.labelers.lm_tokens.AnswerAutomaton`, vLLM's structured-output semantics) which tokens
the regex allows. One allowed token is *forced*: it is appended without a decoding step and fed with the
next forward pass (jump-forward). Several allowed tokens are a *decision*: the argmax of the model's logits
over exactly those tokens (partial label tokens and whitespace included), as vLLM's greedy decoding picks.

Speculation is lossless: after each decision the engine drafts the remaining answer (each label guessed
as the previous label, or from a draft labeler, spelled with the tokens the model last used for it; forced
tokens in between), feeds the draft in the same forward pass, and keeps the longest prefix on which the
draft equals the greedy choice, plus the greedy token where they first differ. The labels are therefore
those of plain greedy constrained decoding; only the number of forward passes changes.

Llama-family models (Qwen2/Qwen3/Llama/Mistral) and HunYuanDenseV1 (the v1.1 weights) run on a slot KV
cache with per-sequence lengths, so many pages decode in one batch
(:mod:`~dripper.labelers.torch_runners`); other architectures run through the transformers forward one
sequence at a time.
Logits are computed only for allowed tokens (a few rows of the LM head). CPU in tests, CUDA in production.
The options and the state of one call being decoded, which the runners read too, are in
:mod:`~dripper.labelers.torch_options` (re-exported here: ``EngineOptions``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dripper.labelers.lm_common import LMAnswer, LMCall
from dripper.labelers.lm_tokens import AnswerAutomaton, TokenVocabulary, label_margins
from dripper.labelers.torch_options import DecodeRow, EngineOptions
from dripper.labelers.torch_runners import SequentialRunner, SlotRunner, to_device
from dripper.prompt import AnswerFormat

# Architectures whose decoder layers SlotRunner reproduces exactly (tests compare with transformers).
_SLOT_MODEL_TYPES = {"qwen3", "qwen2", "llama", "mistral", "hunyuan_v1_dense"}
_LABEL_START = frozenset((ord("m"), ord("o")))


@dataclass
class EngineStats:
    """Counters over all :meth:`ConstrainedDecoder.run` calls."""

    calls: int = 0
    prompt_tokens: int = 0
    answer_tokens: int = 0
    forced_tokens: int = 0
    decisions: int = 0
    forward_passes: int = 0
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            key: round(value, 4) if isinstance(value, float) else value for key, value in vars(self).items()
        }


@dataclass(frozen=True)
class EngineProgress:
    """Where a :meth:`ConstrainedDecoder.run` stands: sent to its ``progress`` callback."""

    calls_done: int
    calls: int
    failures: int
    forward_passes: int
    prompt_tokens: int
    answer_tokens: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        seconds = max(self.seconds, 1e-9)
        return {
            **vars(self),
            "seconds": round(self.seconds, 2),
            "forward_passes_per_s": round(self.forward_passes / seconds, 2),
            "prompt_tokens_per_s": round(self.prompt_tokens / seconds),
            "answer_tokens_per_s": round(self.answer_tokens / seconds, 1),
        }


class ConstrainedDecoder:
    """Greedy constrained decoding of :class:`LMCall` batches on a transformers causal LM.

    Args:
        model: A ``transformers`` causal LM (eval mode, on its device).
        vocabulary: The tokenizer's tokens as bytes, with the stop ids.
        fmt: The answer format (for label positions and margins).
        options: Engine options.
    """

    def __init__(
        self, model: Any, vocabulary: TokenVocabulary, fmt: AnswerFormat, options: EngineOptions
    ) -> None:
        import torch

        self.torch = torch
        self.model = model
        self.vocabulary = vocabulary
        self.format = fmt
        self.options = options
        self.device = next(model.parameters()).device
        self.lm_head = model.get_output_embeddings().weight
        self.stats = EngineStats()
        self._token_sets: dict[tuple[int, ...], Any] = {}  # allowed sets' ids, on the device
        self._progress: Callable[[EngineProgress], None] | None = None
        self._word_defaults = {word: self._spell(word) for word in ("main", "other")}
        if getattr(model.config, "model_type", "") in _SLOT_MODEL_TYPES:
            self.runner: Any = SlotRunner(model, options.max_draft_tokens + 64, options.cuda_graphs)
        else:
            self.runner = SequentialRunner(model)

    def _spell(self, word: str) -> list[int]:
        """A tokenization of ``word`` by longest vocabulary match (the draft's default spelling)."""
        data, tokens = word.encode(), []
        keys = {key: ids[0] for key, ids in zip(self.vocabulary.keys, self.vocabulary.ids, strict=True)}
        while data:
            for end in range(len(data), 0, -1):
                if data[:end] in keys:
                    tokens.append(keys[data[:end]])
                    data = data[end:]
                    break
            else:
                return []
        return tokens

    # -- public ------------------------------------------------------------------------------------

    def run(
        self,
        calls: Sequence[LMCall],
        draft_labels: Sequence[list[bool] | None] | None = None,
        progress: Callable[[EngineProgress], None] | None = None,
    ) -> list[LMAnswer]:
        """Decode every call; one :class:`LMAnswer` per call, in order.

        ``progress`` is called every ``options.progress_every_s`` seconds and once at the end, so a long
        run can be told from a stuck one.
        """
        started = time.perf_counter()
        self._progress, self._run_started, self._last_report = progress, started, started
        # Progress is this run's share of the counters (stats add up over runs), plus calls ended.
        self._run_base = replace(self.stats)
        self._run_calls, self._calls_done, self._calls_failed = len(calls), 0, 0
        rows = []
        for index, call in enumerate(calls):
            automaton = AnswerAutomaton(call.regex, self.vocabulary)
            row = DecodeRow(call=call, index=index, automaton=automaton, state=automaton.start)
            if draft_labels is not None and self.options.speculation == "draft":
                row.draft_labels = draft_labels[index]
            rows.append(row)
        order = sorted(rows, key=lambda row: -(len(row.call.prompt_ids) + row.call.max_tokens))
        with self.torch.inference_mode():
            for group in self.runner.groups(order, self.options):
                self._run_group(group)
        self.stats.calls += len(calls)
        self.stats.seconds += time.perf_counter() - started
        self._report(force=True)
        self._progress = None
        return [self._answer(row) for row in rows]

    def _report(self, force: bool = False) -> None:
        if self._progress is None:
            return
        now = time.perf_counter()
        if not force and now - self._last_report < self.options.progress_every_s:
            return
        self._last_report = now
        stats, base = self.stats, self._run_base
        self._progress(
            EngineProgress(
                calls_done=self._calls_done,
                calls=self._run_calls,
                failures=self._calls_failed,
                forward_passes=stats.forward_passes - base.forward_passes,
                prompt_tokens=stats.prompt_tokens - base.prompt_tokens,
                answer_tokens=stats.answer_tokens - base.answer_tokens,
                seconds=now - self._run_started,
            )
        )

    def _finish(self, rows: list[DecodeRow]) -> None:
        """Count the rows that ended in the last pass (for progress)."""
        for row in rows:
            if row.done:
                self._calls_done += 1
                self._calls_failed += row.failure is not None

    # -- scheduling --------------------------------------------------------------------------------

    def _run_group(self, group: list[DecodeRow]) -> None:
        """Continuous batching within a group of similar lengths: a freed slot is refilled at once.

        Active rows are kept in slots ``0..n-1`` (a row from the top moves into a freed slot), so a decode
        step reads one contiguous block of the KV cache instead of gathering every row's span.
        """
        waiting = list(group)
        active: list[DecodeRow] = []
        while waiting or active:
            fresh = []
            while waiting and len(active) + len(fresh) < self.runner.slots:
                row = waiting.pop(0)
                row.slot = len(active) + len(fresh)
                self._start(row)
                fresh.append(row)
            for row in fresh:  # prefill one sequence at a time: plain causal attention, no padding
                self._feed([row], causal_fresh=True)
            self._finish(fresh)
            active = self._compact(active + [row for row in fresh if not row.done])
            if active:
                self._feed(active, causal_fresh=False)
                self._finish(active)
                active = self._compact([row for row in active if not row.done])
            self._report()

    def _compact(self, active: list[DecodeRow]) -> list[DecodeRow]:
        """Move rows into the free slots below ``len(active)``; returns the rows in slot order."""
        count = len(active)
        holes = sorted(set(range(count)) - {row.slot for row in active})
        movers = sorted((row for row in active if row.slot >= count), key=lambda row: -row.slot)
        for hole, row in zip(holes, movers, strict=True):
            self.runner.move(row.slot, hole, row.fed)
            row.slot = hole
        return sorted(active, key=lambda row: row.slot)

    def _start(self, row: DecodeRow) -> None:
        self.stats.prompt_tokens += len(row.call.prompt_ids)
        row.pass_budget = self.options.pass_budget(row.call.n_blocks)
        if self.options.call_deadline_s is not None:
            row.deadline = time.monotonic() + self.options.call_deadline_s
        self._jump_forward(row)
        row.pending = list(row.call.prompt_ids) + row.pending

    def _feed(self, rows: list[DecodeRow], causal_fresh: bool) -> None:
        """One forward pass over each row's pending tokens and draft, then verification and the next decision."""
        inputs = []
        for row in rows:
            self._build_draft(row)
            inputs.append(row.pending + row.draft)
        hidden = self.runner.forward(
            [row.slot for row in rows], [row.fed for row in rows], inputs, causal_fresh
        )
        self.stats.forward_passes += 1
        width = hidden.shape[1]
        requests = []  # (row number, flat hidden index, state) for every position that may need a choice
        for number, row in enumerate(rows):
            row.forward_passes += 1
            first = number * width + len(row.pending) - 1
            states = [*row.draft_states, row.draft_end_state if row.draft else row.state]
            requests.extend((number, first + offset, state) for offset, state in enumerate(states))
        choices = self._greedy(rows, hidden.reshape(-1, hidden.shape[-1]), requests)
        for number, row in enumerate(rows):
            row.fed += len(row.pending)
            row.pending = []
            self._accept(row, choices[number])

    def _greedy(
        self, rows: list[DecodeRow], hidden: Any, requests: list[tuple[int, int, int]]
    ) -> list[list[tuple]]:
        """Greedy choice, with candidate logits, at every requested position: ``(token, candidates, state)``.

        Logits are computed only for allowed tokens: one small matmul per distinct allowed set, and one
        transfer to the host for the whole batch.
        """
        torch = self.torch
        allowed = [rows[number].automaton.allowed(state) for number, _, state in requests]
        by_set: dict[tuple[int, ...], list[int]] = {}
        for i, tokens in enumerate(allowed):
            if not tokens:
                number = requests[i][0]
                raise RuntimeError(f"call {rows[number].index}: the answer regex allows no token here")
            if len(tokens) > 1:
                by_set.setdefault(tokens, []).append(i)
        values: dict[int, list[float]] = {}
        if by_set:
            # Every position in one host-to-device copy (pinned, non-blocking on CUDA), the allowed sets'
            # ids cached on the device, and one transfer back: the step's only host sync.
            at = to_device([requests[i][1] for members in by_set.values() for i in members], self.device)
            pieces, offset = [], 0
            for tokens, members in by_set.items():
                ids = self._token_set(tokens)
                rows_at = at[offset : offset + len(members)]
                offset += len(members)
                pieces.append((hidden[rows_at] @ self.lm_head[ids].T).float().flatten())
            flat = torch.cat(pieces).tolist()
            offset = 0
            for tokens, members in by_set.items():
                for i in members:
                    values[i] = flat[offset : offset + len(tokens)]
                    offset += len(tokens)
        table = self.vocabulary.token_bytes
        choices: list[list[tuple]] = [[] for _ in rows]
        for i, (number, _, state) in enumerate(requests):
            tokens = allowed[i]
            if len(tokens) == 1:
                choices[number].append((tokens[0], {table[tokens[0]] or b"": 0.0}, state))
                continue
            logits = values[i]
            best = max(
                range(len(tokens)), key=logits.__getitem__
            )  # the first maximum: the lowest id, as argmax
            candidates = {table[token] or b"": logit for token, logit in zip(tokens, logits, strict=True)}
            choices[number].append((tokens[best], candidates, state))
        return choices

    def _token_set(self, tokens: tuple[int, ...]) -> Any:
        ids = self._token_sets.get(tokens)
        if ids is None:
            if len(self._token_sets) > 4096:  # distinct sets are few per regex; bound them anyway
                self._token_sets.clear()
            ids = self._token_sets[tokens] = to_device(list(tokens), self.device)
        return ids

    def _accept(self, row: DecodeRow, choices: list[tuple]) -> None:
        """Keep the draft's longest prefix that equals the greedy choices, then take the next greedy token."""
        accepted = 0
        while accepted < len(row.draft) and choices[accepted][0] == row.draft[accepted]:
            self._record(row, *choices[accepted])
            accepted += 1
        self.stats.draft_tokens += len(row.draft)
        self.stats.accepted_draft_tokens += accepted
        if row.draft:
            full = accepted == len(row.draft)
            row.draft_limit = min(self.options.max_draft_tokens, 2 * len(row.draft) if full else accepted + 4)
        row.fed += accepted
        self.runner.truncate(row.slot, row.fed)
        row.draft, row.draft_states = [], []
        token, candidates, state = choices[accepted]
        self._record(row, token, candidates, state)
        row.pending = [token]
        row.state = None if token in self.vocabulary.stop_ids else row.automaton.advance(state, token)
        if row.state is not None:
            self._jump_forward(row)
        if row.state is None or row.automaton.finished(row.state):
            row.done = True
        elif len(row.generated) >= row.call.max_tokens:
            row.done = True
            row.failure = f"answer exceeded max_tokens={row.call.max_tokens}"
        elif row.pass_budget is not None and row.forward_passes >= row.pass_budget:
            row.done = True
            row.failure = (
                f"answer unfinished after {row.forward_passes} forward passes (the budget for "
                f"{row.call.n_blocks} blocks at max_passes_per_block={self.options.max_passes_per_block})"
            )
        elif row.deadline is not None and time.monotonic() > row.deadline:
            row.done = True
            row.failure = (
                f"answer unfinished at the call deadline (call_deadline_s={self.options.call_deadline_s})"
            )

    def _record(self, row: DecodeRow, token: int, candidates: dict[bytes, float], state: int) -> None:
        """Append a chosen token; track which label it starts or spells (for drafts and counts)."""
        self.stats.answer_tokens += 1
        self.stats.forced_tokens += len(candidates) == 1
        self.stats.decisions += len(candidates) > 1
        row.generated.append(token)
        row.candidates.append(candidates)
        data = self.vocabulary.token_bytes[token] or b""
        if set(row.automaton.moves(state)) == _LABEL_START:
            row.labels_decided += 1
            row.last_word = "main" if data[:1] == b"m" else "other"
            row.spelling, row.spelled = [token], len(data)
        elif row.spelling and row.spelled < len(row.last_word):
            row.spelling.append(token)
            row.spelled += len(data)
        else:
            return
        if row.spelled >= len(row.last_word):
            row.label_tokens[row.last_word] = row.spelling

    def _jump_forward(self, row: DecodeRow) -> None:
        """Append every forced token (the regex allows exactly one) to the pending tokens, no model step."""
        automaton = row.automaton
        while not automaton.finished(row.state) and len(row.generated) < row.call.max_tokens:
            tokens = automaton.allowed(row.state)
            if len(tokens) != 1 or tokens[0] in self.vocabulary.stop_ids:
                return
            self._record(row, tokens[0], {self.vocabulary.token_bytes[tokens[0]] or b"": 0.0}, row.state)
            row.pending.append(tokens[0])
            row.state = automaton.advance(row.state, tokens[0])

    def _build_draft(self, row: DecodeRow) -> None:
        """Draft the answer ahead: guessed labels spelled as the model spelled them, forced tokens between."""
        row.draft, row.draft_states = [], []
        if self.options.speculation == "none" or row.fed == 0:
            return  # a fresh prompt: nothing is decided yet to draft from
        automaton = row.automaton
        state, label_index, word = row.state, row.labels_decided, row.last_word
        row.draft_limit = row.draft_limit or self.options.max_draft_tokens
        limit = min(row.draft_limit, row.call.max_tokens - len(row.generated))
        while len(row.draft) < limit and not automaton.finished(state):
            tokens = automaton.allowed(state)
            if len(tokens) == 1 and tokens[0] not in self.vocabulary.stop_ids:
                spelling = list(tokens)
            elif set(automaton.moves(state)) == _LABEL_START:
                if row.draft_labels is not None and label_index < len(row.draft_labels):
                    word = "main" if row.draft_labels[label_index] else "other"
                if word is None:
                    break
                spelling = row.label_tokens.get(word) or self._word_defaults[word]
                label_index += 1
            else:
                break
            for token in spelling:
                following = automaton.advance(state, token)
                if following is None or len(row.draft) >= limit:
                    break
                row.draft.append(token)
                row.draft_states.append(state)
                state = following
            else:
                continue
            break
        row.draft_end_state = state

    def _answer(self, row: DecodeRow) -> LMAnswer:
        table = self.vocabulary.token_bytes
        tokens = [token for token in row.generated if token not in self.vocabulary.stop_ids]
        chosen = [table[token] or b"" for token in tokens]
        text = b"".join(chosen).decode("utf-8", errors="replace")
        margins = None
        if row.failure is None:
            candidates = [
                c
                for t, c in zip(row.generated, row.candidates, strict=True)
                if t not in self.vocabulary.stop_ids
            ]
            margins = label_margins(self.format, chosen, candidates, row.call.n_blocks)
        return LMAnswer(
            text=text,
            margins=margins,
            failure=row.failure,
            token_ids=row.generated,
            forward_passes=row.forward_passes,
        )
