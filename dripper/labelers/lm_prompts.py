"""Prompts exactly as the released MinerU-HTML weights saw them, and windows of a page's blocks.

- ``compact`` (v1.1): the ``short_compact`` prompt is chat-templated **twice**: first as a lone user turn
  (no generation prompt), then that string becomes the user turn after the system message
  ``You are a helpful assistant.``, with the generation prompt; ``enable_thinking=False`` both times.
- ``json`` (v1.0, Qwen3 "Dripper"): the raw ``v0`` prompt, no template; v1.0's state machine forced
  ``</think>\\n\\n`` as the first answer tokens, so that text ends the prompt here and the answer regex
  constrains the rest (``{"1":"main",…}``).

(docs/upstream.md#the-prompt and docs/upstream.md#answer-formats-and-decoding.) A window of consecutive
blocks is a valid page of its own: the blocks' simplified HTML, ids renumbered from 1, wrapped as the
simplifier wraps a page.

Nothing here imports torch or vLLM; the tokenizer is the caller's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from dripper.prompt import AnswerFormat, build_prompt
from dripper.simplify.tags import wrap_document

SYSTEM_PROMPT = "You are a helpful assistant."
JSON_FORCED_PREFIX = "</think>\n\n"
_ITEM_ID = re.compile(r'^(<[^>]*?\s_item_id=")(\d+)(")')
ANSWER_SLACK_TOKENS = 16
"""Tokens allowed beyond one token per byte of the longest answer (optional whitespace, EOS)."""


class PromptRenderer:
    """Simplified HTML → the exact text (and token ids) the released weights were given.

    Args:
        tokenizer: The model's tokenizer (its chat template is used for ``compact``).
        fmt: The answer format (``compact`` or ``json``), which fixes the prompt version and wrapping.
        system_prompt: System message of the outer chat turn (``compact`` only).
    """

    def __init__(self, tokenizer: Any, fmt: AnswerFormat, system_prompt: str = SYSTEM_PROMPT) -> None:
        self.tokenizer = tokenizer
        self.format = fmt
        self.system_prompt = system_prompt
        self._budgets: dict[int, int] = {}  # window packing asks for every size up to the window's
        if fmt.name == "compact" and not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "the compact format wraps prompts in the model's chat template, but this tokenizer has none; "
                "use a model folder with its tokenizer_config.json/chat_template.jinja"
            )

    def render(self, simplified_html: str) -> str:
        """The full prompt text for one page (or window)."""
        if self.format.name == "json":
            return build_prompt(simplified_html, self.format.prompt_version) + JSON_FORCED_PREFIX
        return self.tokenizer.apply_chat_template(
            self.chat_messages(simplified_html),
            tokenize=False,
            add_generation_prompt=True,
            enable_thinking=False,
        )

    def chat_messages(self, simplified_html: str) -> list[dict[str, str]]:
        """The same prompt as chat messages, for a server that applies the template (``compact`` only)."""
        if self.format.name != "compact":
            raise ValueError("the json format (v1.0) used no chat template; send it as a completion")
        prompt = build_prompt(simplified_html, self.format.prompt_version)
        once = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, enable_thinking=False
        )
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": once}]

    def encode(self, text: str) -> list[int]:
        # As vLLM encodes a text prompt (special tokens added: none for Qwen, a BOS for some models).
        return self.tokenizer(text)["input_ids"]

    def answer_regex(self, n_blocks: int) -> str:
        """The constraint on the answer the model writes (after anything the prompt already forced)."""
        regex = self.format.regex(n_blocks)
        if self.format.name == "json":
            forced = r"</think>\n\n"
            if not regex.startswith(forced):
                raise ValueError(
                    f"unexpected json answer regex {regex[:40]!r}; expected it to start with {forced}"
                )
            regex = regex[len(forced) :]
        return regex

    def answer_budget(self, n_blocks: int) -> int:
        """Tokens the answer may take: one per byte of the longest answer, plus slack."""
        budget = self._budgets.get(n_blocks)
        if budget is None:
            longest = self.format.longest_answer(n_blocks)
            if self.format.name == "json":
                longest = longest[len(JSON_FORCED_PREFIX) :]
            budget = self._budgets[n_blocks] = len(longest.encode("utf-8")) + ANSWER_SLACK_TOKENS
        return budget


def window_html(block_pieces: Sequence[str], first_id: int) -> str:
    """Simplified HTML of consecutive blocks, ids renumbered from 1 (``first_id`` becomes 1)."""
    renumbered = []
    for offset, piece in enumerate(block_pieces):
        match = _ITEM_ID.match(piece)
        if match is None or int(match.group(2)) != first_id + offset:
            raise ValueError(
                f"block {first_id + offset}: its markup does not start with _item_id={first_id + offset}"
            )
        renumbered.append(f"{match.group(1)}{offset + 1}{match.group(3)}{piece[match.end() :]}")
    return wrap_document("".join(renumbered))  # wrapped as the simplifier wraps a whole page
