"""What the torch engine's decoder and its runners share: the engine's options and the row of one call.

:mod:`~dripper.labelers.torch_decoder` decides tokens and :mod:`~dripper.labelers.torch_runners` runs the
forward passes; both read these, so they live below both (neither module imports the other's caller).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dripper.labelers.lm_common import LMCall
from dripper.labelers.lm_tokens import AnswerAutomaton

__all__ = ["DecodeRow", "EngineOptions"]

_BUDGET_BASE_PASSES = 16  # the prefill, the answer's opening and closing decisions, and slack


@dataclass(frozen=True)
class EngineOptions:
    """Knobs of :class:`~dripper.labelers.torch_decoder.ConstrainedDecoder`.

    Attributes:
        speculation: ``"previous"`` (guess each label as the one before), ``"draft"`` (labels given with the
            calls, e.g. from a CPU labeler) or ``"none"``.
        max_draft_tokens: Longest draft verified in one forward pass.
        max_batch: Sequences decoded together.
        kv_cache_tokens: KV-cache capacity in tokens over all slots (``None``: 1/2 of free GPU memory, or
            2**20 tokens on CPU).
        max_passes_per_block: A call's forward-pass budget is ``16 + max_passes_per_block × blocks``; a call
            that has not closed its answer by then ends as a recorded failure (its page goes to the
            fallback). The default, 3, is ten times the design point (~0.28 per block with speculation)
            and still covers decoding without speculation (one decision per label, two or three where a
            model spells labels in pieces). ``None``: only ``max_tokens`` bounds a call.
        call_deadline_s: Wall-clock seconds a call may take from its prefill; past it the call ends as a
            recorded failure. ``None``: no deadline.
        cuda_graphs: On CUDA, replay decode steps from CUDA graphs captured per padded shape (batch, width
            and attention span rounded up to buckets); a capture that fails falls back to eager steps.
        progress_every_s: How often
            :meth:`~dripper.labelers.torch_decoder.ConstrainedDecoder.run` reports progress to its callback.
    """

    speculation: str = "previous"
    max_draft_tokens: int = 32
    max_batch: int = 32
    kv_cache_tokens: int | None = None
    max_passes_per_block: float | None = 3.0
    call_deadline_s: float | None = None
    cuda_graphs: bool = True
    progress_every_s: float = 10.0

    def __post_init__(self) -> None:
        if self.speculation not in ("previous", "draft", "none"):
            raise ValueError(f"speculation must be previous, draft or none, got {self.speculation!r}")
        if self.max_draft_tokens < 0 or self.max_batch < 1:
            raise ValueError("max_draft_tokens must be >= 0 and max_batch >= 1")
        if self.max_passes_per_block is not None and self.max_passes_per_block <= 0:
            raise ValueError("max_passes_per_block must be > 0 (or None)")
        if self.call_deadline_s is not None and self.call_deadline_s <= 0:
            raise ValueError("call_deadline_s must be > 0 (or None)")

    def pass_budget(self, n_blocks: int) -> int | None:
        """Forward passes a call of ``n_blocks`` blocks may take (``None``: unbounded but for max_tokens)."""
        if self.max_passes_per_block is None:
            return None
        return _BUDGET_BASE_PASSES + math.ceil(self.max_passes_per_block * n_blocks)


@dataclass
class DecodeRow:
    """One call being decoded: its automaton state, its KV-cache slot, its pending and drafted tokens."""

    call: LMCall
    index: int
    automaton: AnswerAutomaton
    slot: int = -1
    fed: int = 0  # tokens in the KV cache
    state: int | None = 0  # automaton state after generated + pending tokens (None after a stop token)
    pending: list[int] = field(default_factory=list)  # decided, not yet fed
    draft: list[int] = field(default_factory=list)
    draft_states: list[int] = field(default_factory=list)  # state before each draft token
    generated: list[int] = field(default_factory=list)
    candidates: list[dict[bytes, float]] = field(default_factory=list)
    draft_end_state: int = 0
    draft_limit: int = 0  # adaptive: grows while drafts are accepted, shrinks when they are not
    labels_decided: int = 0
    last_word: str | None = None  # the label decided last
    spelling: list[int] = field(default_factory=list)  # tokens spelling the current label
    spelled: int = 0
    label_tokens: dict[str, list[int]] = field(default_factory=dict)  # how the model spells each label
    draft_labels: list[bool] | None = None
    forward_passes: int = 0
    pass_budget: int | None = None
    deadline: float | None = None  # time.monotonic() past which the call fails
    done: bool = False
    failure: str | None = None
