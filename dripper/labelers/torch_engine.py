"""The ``torch`` labeler: our own constrained-decoding engine on a local transformers model.

Pages become calls (:class:`~dripper.labelers.lm_common.CallPlanner`, windowed to the context), the
calls are decoded by :class:`~dripper.labelers.torch_decoder.ConstrainedDecoder` (greedy, only label
choices cost a decoding step, lossless speculation), and the answers become labels with a confidence per
block. torch and transformers are imported when the labeler is built.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from dripper.labelers.base import BlockLabeler, LabelRequest, Labels, build_labeler, register_labeler
from dripper.labelers.lm_common import LMLabeler, open_local_model, stop_token_ids
from dripper.labelers.lm_prompts import SYSTEM_PROMPT
from dripper.labelers.lm_tokens import TokenVocabulary
from dripper.labelers.torch_decoder import ConstrainedDecoder, EngineOptions
from dripper.labelers.torch_runners import load_causal_lm
from dripper.prompt import answer_format as get_answer_format

_LOG = logging.getLogger(__name__)


def _log_progress(progress) -> None:
    # Mid-batch reports at INFO (a long batch shows it lives); the end of every batch only at DEBUG.
    level = logging.INFO if progress.calls_done < progress.calls else logging.DEBUG
    _LOG.log(level, "torch engine: %s", progress.as_dict())


@register_labeler("torch")
class TorchLabeler(LMLabeler):
    """Labels blocks with :class:`ConstrainedDecoder` on a local transformers model.

    Args:
        model: Model folder, or a Hugging Face repo id already in the local cache.
        revision: Revision of a cached repo id.
        answer_format: ``compact`` (v1.1 weights) or ``json`` (v1.0 weights).
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:1``…
        dtype: ``auto`` (bfloat16 on CUDA, float32 on CPU) or a torch dtype name.
        max_model_len: Context length; ``None`` takes the model's ``max_position_embeddings``.
        speculation: ``previous``, ``none``, or ``draft`` with ``draft_labeler``.
        draft_labeler: A labeler (instance or registered name) whose labels are the drafts.
        max_draft_tokens, max_batch, kv_cache_tokens: See :class:`EngineOptions`.
        max_passes_per_block, call_deadline_s: A call's budget (:class:`EngineOptions`): a call past it
            ends as a recorded failure and its page goes to the fallback, so no page can hold a batch.
        cuda_graphs: Replay decode steps from CUDA graphs on CUDA (:class:`EngineOptions`).

    Progress of long batches (calls done, forward passes/s, tokens/s) is logged at INFO by
    ``dripper.labelers.torch_engine`` every ``progress_every_s`` seconds.
    """

    name = "torch"

    @classmethod
    def needs_gpu(cls, options: Mapping[str, Any]) -> bool:
        return str(options.get("device", "auto")) != "cpu"  # auto takes CUDA where there is one

    def __init__(
        self,
        model: str,
        revision: str | None = None,
        answer_format: str = "compact",
        device: str = "auto",
        dtype: str = "auto",
        max_model_len: int | None = None,
        speculation: str = "previous",
        draft_labeler: str | BlockLabeler | None = None,
        max_draft_tokens: int = 32,
        max_batch: int = 32,
        kv_cache_tokens: int | None = None,
        max_passes_per_block: float | None = 3.0,
        call_deadline_s: float | None = None,
        cuda_graphs: bool = True,
        progress_every_s: float = 30.0,
        system_prompt: str = SYSTEM_PROMPT,
        trust_remote_code: bool = False,
    ) -> None:
        super().__init__()
        fmt = get_answer_format(answer_format)
        local = open_local_model(model, revision, max_model_len, trust_remote_code)
        self.model = load_causal_lm(local.folder, device, dtype, trust_remote_code)
        self.planner = local.planner(fmt, system_prompt)
        stop_ids = stop_token_ids(local.tokenizer, getattr(self.model, "generation_config", None))
        vocabulary = TokenVocabulary(local.token_bytes(), stop_ids)
        if speculation == "draft" and draft_labeler is None:
            raise ValueError("speculation='draft' needs a draft_labeler")
        self.draft_labeler = build_labeler(draft_labeler) if isinstance(draft_labeler, str) else draft_labeler
        if self.draft_labeler is not None:
            speculation = "draft"
            self.needs_block_text = self.draft_labeler.needs_block_text
        options = EngineOptions(
            speculation=speculation,
            max_draft_tokens=max_draft_tokens,
            max_batch=max_batch,
            kv_cache_tokens=kv_cache_tokens,
            max_passes_per_block=max_passes_per_block,
            call_deadline_s=call_deadline_s,
            cuda_graphs=cuda_graphs,
            progress_every_s=progress_every_s,
        )
        self.engine = ConstrainedDecoder(self.model, vocabulary, fmt, options)

    def label_batch(self, requests: Sequence[LabelRequest]) -> list[Labels]:
        calls, failures = self.planner.plan(requests)
        drafts = None
        if self.draft_labeler is not None:
            page_drafts = self.draft_labeler.label_batch(requests)
            drafts = [
                page_drafts[call.page].main[call.first_block : call.first_block + call.n_blocks]
                if page_drafts[call.page].main is not None
                else None
                for call in calls
            ]
        answers = self.engine.run(calls, drafts, progress=_log_progress)
        return self.planner.assemble(len(requests), calls, answers, failures)

    def close(self) -> None:
        self.model = None
        self.engine = None
