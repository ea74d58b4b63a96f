"""What the LM labelers share: model files, calls and answers, and planning pages into context windows.

An LM labeler turns each page into one or more :class:`LMCall` (a fully templated prompt, its token ids,
the answer regex and a token budget), lets its engine answer them (:class:`LMAnswer`), and turns the
answers back into :class:`~dripper.labelers.base.Labels` (:meth:`CallPlanner.assemble`). Prompts
come from :mod:`~dripper.labelers.lm_prompts`, token-level constraints and confidences from
:mod:`~dripper.labelers.lm_tokens`.

Long pages: a prompt plus its worst-case answer that exceeds the context is split into windows of
consecutive blocks, each a valid prompt of its own; labels are mapped back by offset. Only a block that
does not fit alone fails the page (upstream sends every over-long page to the fallback).

Nothing here imports torch, vLLM or lxml; the tokenizer comes from ``transformers`` when a labeler is built.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from dripper.labelers.base import BlockLabeler, LabelRequest, Labels
from dripper.labelers.lm_prompts import SYSTEM_PROMPT, PromptRenderer, window_html
from dripper.labelers.lm_tokens import token_bytes_table
from dripper.prompt import AnswerFormat, AnswerParseError, answer_format

logger = logging.getLogger(__name__)
# Windows are packed by summed block token counts; the exact count differs a little.
_WINDOW_MARGIN_TOKENS = 16


class LMLabeler(BlockLabeler):
    """Base of the language-model labelers (vLLM, torch, an OpenAI-compatible server): they read the
    Simplified HTML only, need a ``model``, and take an ``answer_format`` the spec checks before any shard."""

    needs_block_text = False
    is_lm = True
    required_options = {"model": "a local model folder or a Hugging Face id in the cache"}

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        if options.get("answer_format") is not None:
            answer_format(str(options["answer_format"]))  # raises with the known formats

    @classmethod
    def needs_gpu(cls, options: Mapping[str, Any]) -> bool:
        return True


def install_hint(package: str, extra: str) -> str:
    return f"{package} is not installed; install it with `pip install 'dripper-platform[{extra}]'`"


# -- model files -------------------------------------------------------------------------------------


def resolve_model_dir(model: str | Path, revision: str | None = None) -> Path:
    """A local model folder: ``model`` itself if it is a folder, else its snapshot in the HF cache.

    Never downloads (``local_files_only``): production images pre-fetch weights, tests build their own.

    Raises:
        FileNotFoundError: neither a folder nor in the cache, with the command that fetches it.
    """
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download
    except ImportError as error:  # a bare install: the LM extra brings it (with transformers)
        raise ImportError(install_hint("huggingface_hub", "lm")) from error
    try:
        return Path(snapshot_download(str(model), revision=revision, local_files_only=True))
    except Exception as error:
        fetch = f"huggingface-cli download {model}" + (f" --revision {revision}" if revision else "")
        raise FileNotFoundError(
            f"model {model!r} (revision {revision or 'default'}) is neither a local folder nor in the "
            f"Hugging Face cache ({type(error).__name__}); fetch it first: {fetch}"
        ) from error


def load_tokenizer(model_dir: str | Path, trust_remote_code: bool = False) -> Any:
    """The model's tokenizer, from local files only.

    Loaded once per folder and shared by every labeler in the process (loading Qwen's takes seconds):
    treat it as read-only.
    """
    return _load_tokenizer(str(Path(model_dir).resolve()), trust_remote_code)


@lru_cache(maxsize=4)
def _load_tokenizer(model_dir: str, trust_remote_code: bool) -> Any:
    try:
        from transformers import AutoTokenizer
    except ImportError as error:
        raise ImportError(install_hint("transformers", "lm")) from error
    return AutoTokenizer.from_pretrained(
        model_dir, local_files_only=True, trust_remote_code=trust_remote_code
    )


@dataclass(frozen=True)
class LocalModel:
    """What an LM labeler reads from a model folder: its tokenizer, context length and LM-head width."""

    folder: Path
    tokenizer: Any
    context: int
    vocab_size: int

    def planner(self, fmt: AnswerFormat, system_prompt: str = SYSTEM_PROMPT) -> CallPlanner:
        """A :class:`CallPlanner` for this model's prompts and context."""
        return CallPlanner(PromptRenderer(self.tokenizer, fmt, system_prompt), self.context)

    def token_bytes(self) -> tuple[bytes | None, ...]:
        """The bytes of every token id up to the LM head's width (see :func:`token_bytes_table`)."""
        return token_bytes_table(self.tokenizer, self.vocab_size)


def open_local_model(
    model: str | Path,
    revision: str | None = None,
    max_model_len: int | None = None,
    trust_remote_code: bool = False,
) -> LocalModel:
    """Resolve ``model`` (a folder or a cached repo id) and read its tokenizer and sizes; never downloads.

    ``max_model_len`` overrides the context length the model's ``config.json`` states.
    """
    folder = resolve_model_dir(model, revision)
    tokenizer = load_tokenizer(folder, trust_remote_code)
    context = max_model_len or model_context_length(folder)
    if context is None:
        raise ValueError(f"{folder}: config.json states no context length; pass max_model_len")
    return LocalModel(folder, tokenizer, context, model_vocab_size(folder, tokenizer))


def model_context_length(model_dir: str | Path) -> int | None:
    """``max_position_embeddings`` (or an equivalent) from the model's ``config.json``, if stated."""
    config_file = Path(model_dir) / "config.json"
    if not config_file.exists():
        return None
    config = json.loads(config_file.read_text("utf-8"))
    for scope in (config, config.get("text_config") or {}):
        for key in ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions"):
            if isinstance(scope.get(key), int):
                return scope[key]
    return None


def model_vocab_size(model_dir: str | Path, tokenizer: Any) -> int:
    """The LM head's width (``vocab_size`` in ``config.json``), which may exceed the tokenizer's."""
    config_file = Path(model_dir) / "config.json"
    if config_file.exists():
        config = json.loads(config_file.read_text("utf-8"))
        size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
        if isinstance(size, int):
            return size
    return len(tokenizer)


def stop_token_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """EOS ids of the tokenizer and the generation config (what vLLM stops on)."""
    eos = getattr(generation_config, "eos_token_id", None)
    ids = {tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [eos])}
    return sorted(token_id for token_id in ids if token_id is not None)


# -- calls and answers -------------------------------------------------------------------------------


@dataclass(slots=True)
class LMCall:
    """One prompt for the engine: a whole page, or a window of its blocks.

    Attributes:
        page: Index of the page in the labeler's batch.
        first_block: 0-based index of the window's first block in the page.
        n_blocks: Blocks in this window (ids 1..n_blocks in the prompt).
        prompt: The full prompt text (templated).
        prompt_ids: Its token ids (what every engine is given, so they all see the same tokens).
        regex: The answer constraint.
        max_tokens: Token budget of the answer.
    """

    page: int
    first_block: int
    n_blocks: int
    prompt: str
    prompt_ids: list[int]
    regex: str
    max_tokens: int
    simplified_html: str = ""


@dataclass(slots=True)
class LMAnswer:
    """An engine's answer to one :class:`LMCall`.

    Attributes:
        text: The generated answer.
        margins: Per-label log-probability margin (main − other) at the token that chose the label, where
            the engine exposes log-probabilities; ``None`` otherwise.
        failure: Why there is no usable answer (the page goes to the fallback).
        token_ids: The generated token ids, when known.
        forward_passes: Model forward passes spent on this call (engines that count them).
    """

    text: str
    margins: list[float] | None = None
    failure: str | None = None
    token_ids: list[int] | None = None
    forward_passes: int | None = None


@dataclass
class PlanStats:
    """What planning saw: prompt sizes and windowing."""

    pages: int = 0
    windows: int = 0
    windowed_pages: int = 0
    prompt_tokens: int = 0
    oversized_blocks: int = 0
    prompt_lengths: list[int] = field(default_factory=list)


class CallPlanner:
    """Pages → :class:`LMCall` (windowed to fit ``max_model_len``) and answers → :class:`Labels`.

    Args:
        renderer: Prompt rendering and answer constraints.
        max_model_len: Context length (prompt + answer) in tokens.
    """

    def __init__(self, renderer: PromptRenderer, max_model_len: int) -> None:
        if max_model_len < 256:
            raise ValueError(f"max_model_len={max_model_len} is too small for any prompt")
        self.renderer = renderer
        self.max_model_len = max_model_len
        self.stats = PlanStats()
        self._overhead: int | None = None

    @property
    def format(self) -> AnswerFormat:
        return self.renderer.format

    def plan(self, requests: Sequence[LabelRequest]) -> tuple[list[LMCall], dict[int, str]]:
        """Calls for every page that can be labelled, and ``{page index: failure}`` for the others."""
        calls: list[LMCall] = []
        failures: dict[int, str] = {}
        for index, request in enumerate(requests):
            simplified = request.simplified
            n_blocks = simplified.n_blocks
            self.stats.pages += 1
            if n_blocks == 0:
                failures[index] = "no blocks"
                continue
            call = self._call(index, 0, n_blocks, simplified.simplified_html)
            if self._fits(call):
                calls.append(call)
                self.stats.windows += 1
                self.stats.prompt_tokens += len(call.prompt_ids)
                self.stats.prompt_lengths.append(len(call.prompt_ids))
                continue
            try:
                windows = self._windows(index, [block.simplified_html for block in simplified.blocks])
            except _BlockTooLong as error:
                self.stats.oversized_blocks += 1
                failures[index] = str(error)
                continue
            self.stats.windowed_pages += 1
            self.stats.windows += len(windows)
            self.stats.prompt_tokens += sum(len(window.prompt_ids) for window in windows)
            self.stats.prompt_lengths.append(len(call.prompt_ids))
            calls.extend(windows)
        return calls, failures

    def _call(self, page: int, first_block: int, n_blocks: int, simplified_html: str) -> LMCall:
        prompt = self.renderer.render(simplified_html)
        return LMCall(
            page=page,
            first_block=first_block,
            n_blocks=n_blocks,
            prompt=prompt,
            prompt_ids=self.renderer.encode(prompt),
            regex=self.renderer.answer_regex(n_blocks),
            max_tokens=self.renderer.answer_budget(n_blocks),
            simplified_html=simplified_html,
        )

    def _fits(self, call: LMCall) -> bool:
        return len(call.prompt_ids) + call.max_tokens <= self.max_model_len

    def _windows(self, page: int, pieces: list[str]) -> list[LMCall]:
        """Greedy packing of consecutive blocks by estimated tokens, each window then checked exactly."""
        if self._overhead is None:
            self._overhead = len(self.renderer.encode(self.renderer.render(window_html([], 1))))
        encoded = self.renderer.tokenizer(pieces, add_special_tokens=False)["input_ids"]
        piece_tokens = [len(ids) for ids in encoded]
        limit = self.max_model_len - _WINDOW_MARGIN_TOKENS
        windows: list[LMCall] = []
        start = 0
        while start < len(pieces):
            end = start + 1
            used = self._overhead + piece_tokens[start]
            while (
                end < len(pieces)
                and used + piece_tokens[end] + self.renderer.answer_budget(end - start + 1) <= limit
            ):
                used += piece_tokens[end]
                end += 1
            while True:
                call = self._call(page, start, end - start, window_html(pieces[start:end], start + 1))
                if self._fits(call):
                    break
                if end - start == 1:
                    raise _BlockTooLong(
                        f"block {start + 1} alone needs {len(call.prompt_ids)} prompt tokens + "
                        f"{call.max_tokens} answer tokens > max_model_len={self.max_model_len}"
                    )
                end = start + max(1, (end - start) * 9 // 10)
            windows.append(call)
            start = end
        return windows

    def assemble(
        self, n_pages: int, calls: Sequence[LMCall], answers: Sequence[LMAnswer], failures: dict[int, str]
    ) -> list[Labels]:
        """One :class:`Labels` per page from the answers of its calls (windows in block order)."""
        per_page: dict[int, list[tuple[LMCall, LMAnswer]]] = {}
        for call, answer in zip(calls, answers, strict=True):
            per_page.setdefault(call.page, []).append((call, answer))
        results: list[Labels] = []
        for page in range(n_pages):
            if page in failures:
                results.append(Labels.failed(failures[page]))
                continue
            results.append(
                self._page_labels(sorted(per_page.get(page, []), key=lambda item: item[0].first_block))
            )
        return results

    def _page_labels(self, parts: list[tuple[LMCall, LMAnswer]]) -> Labels:
        if not parts:
            return Labels.failed("no answer")
        main: list[bool] = []
        margins: list[float] | None = []
        raw = []
        for call, answer in parts:
            window = f" (window at block {call.first_block + 1})" if len(parts) > 1 else ""
            if answer.failure:
                return Labels(main=None, failure=answer.failure + window, raw_output=answer.text or None)
            try:
                labels = self.format.parse(answer.text, call.n_blocks)
            except AnswerParseError as error:
                return Labels(
                    main=None, failure=f"unparsable answer{window}: {error}", raw_output=answer.text
                )
            main.extend(labels)
            raw.append(answer.text)
            if margins is not None and answer.margins is not None and len(answer.margins) == call.n_blocks:
                margins.extend(answer.margins)
            else:
                margins = None
        return Labels(main=main, confidence=margins, raw_output="\n".join(raw))


class _BlockTooLong(ValueError):
    pass
