"""Prompts and answer formats of the released MinerU-HTML weights.

Templates are the upstream ``mineru-html`` 1.1.2 texts (``resources/prompts``), byte for byte: the released
weights were trained on them. Two answer formats:

- ``compact`` (v1.1): ``<answer>1main2other…</answer>``, decoded under the regex
  ``<answer>\\s*1(main|other)2(main|other)…\\s*</answer>``;
- ``json`` (v1.0, Qwen3-0.6B "Dripper"): ``</think>\\n\\n{"1":"main","2":"other"}``, the token sequence
  v1.0's state machine forced, expressed as a regex so any structured-output engine can enforce it.

The parser is tolerant (extra whitespace, a missing wrapper, truncated JSON) but strict on content: it
returns labels for exactly the page's ids or raises :class:`AnswerParseError`, which sends the page to
the fallback.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from dripper.hints import did_you_mean

_PLACEHOLDER = "<<<SIMPLIFIED_HTML>>>"
PROMPT_VERSIONS = ("short_compact", "compact", "v0")


class AnswerParseError(ValueError):
    """The model's answer does not give exactly one label per block id."""


@cache
def _template(version: str) -> str:
    if version not in PROMPT_VERSIONS:
        raise ValueError(f"unknown prompt version {version!r}; choose one of {', '.join(PROMPT_VERSIONS)}")
    return resources.files("dripper").joinpath(f"resources/prompts/{version}.txt").read_text("utf-8")


def build_prompt(simplified_html: str, version: str = "short_compact") -> str:
    """The user prompt for one page, exactly as upstream ``get_full_prompt(simplified_html, version)``."""
    return _template(version).replace(_PLACEHOLDER, simplified_html)


#: Characters per token assumed by :func:`prompt_tokens_estimate` (a rough BPE ratio for HTML prompts).
CHARS_PER_TOKEN = 3.5


def prompt_tokens_estimate(simplified_html: str, version: str = "short_compact") -> int:
    """A tokenizer-free estimate of a page's prompt tokens: ``ceil(prompt characters / 3.5)`` (the simplify
    stage's ``prompt_tokens_estimate`` column and a cascade's routed-token accounting)."""
    return math.ceil(len(build_prompt(simplified_html, version)) / CHARS_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class AnswerFormat:
    """How labels are written by the model: the constraint regex, a worst-case answer, and the parser."""

    name: str
    prompt_version: str

    def regex(self, n_blocks: int) -> str:
        """The regex that admits exactly the well-formed answers for ids ``1..n_blocks``."""
        if self.name == "compact":
            body = "".join(f"{item_id}(main|other)" for item_id in range(1, n_blocks + 1))
            return rf"<answer>\s*{body}\s*</answer>"
        if n_blocks == 0:
            return r"</think>\n\n\{\}"
        body = ",".join(f'"{item_id}":"(main|other)"' for item_id in range(1, n_blocks + 1))
        return rf"</think>\n\n\{{{body}\}}"

    def longest_answer(self, n_blocks: int) -> str:
        """The longest answer for ``n_blocks`` blocks (all ``other``), for context-length budgeting."""
        if self.name == "compact":
            return "<answer>" + "".join(f"{i}other" for i in range(1, n_blocks + 1)) + "</answer>"
        return "</think>\n\n{" + ",".join(f'"{i}":"other"' for i in range(1, n_blocks + 1)) + "}"

    def format_labels(self, labels: list[bool]) -> str:
        """Write labels in this format (the target text for training, and for tests)."""
        words = ["main" if label else "other" for label in labels]
        if self.name == "compact":
            return "<answer>" + "".join(f"{i}{w}" for i, w in enumerate(words, 1)) + "</answer>"
        return "</think>\n\n{" + ",".join(f'"{i}":"{w}"' for i, w in enumerate(words, 1)) + "}"

    def parse(self, answer: str, n_blocks: int) -> list[bool]:
        """Labels for ids ``1..n_blocks`` from a model answer.

        Raises:
            AnswerParseError: an id is missing, unknown, or labelled twice differently.
        """
        pairs = _parse_json_pairs(answer) if self.name == "json" else None
        if pairs is None:
            pairs = [(int(i), label) for i, label in _COMPACT_PAIR.findall(answer)]
        labels: dict[int, str] = {}
        for item_id, label in pairs:
            if labels.setdefault(item_id, label) != label:
                raise AnswerParseError(f"id {item_id} labelled both {labels[item_id]} and {label}")
        expected = set(range(1, n_blocks + 1))
        if set(labels) != expected:
            missing = sorted(expected - set(labels))[:5]
            extra = sorted(set(labels) - expected)[:5]
            raise AnswerParseError(
                f"answer labels {len(labels)} ids for {n_blocks} blocks (missing {missing}, unknown {extra})"
            )
        return [labels[item_id] == "main" for item_id in range(1, n_blocks + 1)]


_COMPACT_PAIR = re.compile(r"(\d+)\s*(main|other)")
_JSON_PAIR = re.compile(r'"(\d+)"\s*:\s*"(main|other)"')


def _parse_json_pairs(answer: str) -> list[tuple[int, str]] | None:
    start = answer.find("{")
    if start < 0:
        return None
    end = answer.rfind("}")
    if end > start:
        try:
            data = json.loads(answer[start : end + 1])
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            return [(int(k), v) for k, v in data.items() if str(k).isdigit() and v in ("main", "other")]
    # Truncated or malformed JSON: take the well-formed pairs that are there.
    return [(int(i), label) for i, label in _JSON_PAIR.findall(answer[start:])]


ANSWER_FORMATS = {
    "compact": AnswerFormat("compact", "short_compact"),
    "json": AnswerFormat("json", "v0"),
}


def answer_format(name: str) -> AnswerFormat:
    """The answer format called ``name`` (``compact`` or ``json``)."""
    try:
        return ANSWER_FORMATS[name]
    except KeyError:
        raise ValueError(
            f"answer_format {name!r}: choose one of {', '.join(ANSWER_FORMATS)}"
            + did_you_mean(name, ANSWER_FORMATS, n=1)
        ) from None
