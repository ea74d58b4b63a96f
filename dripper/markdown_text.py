"""Markdown as plain text, for comparing an extraction with a reference that may be either.

:func:`normalize_markdown` is what the "normalised" ROUGE figure (:mod:`dripper.eval.metrics`) and the CPU
labeler's snippet matching (:mod:`dripper.labelers.cpu.training_set`) compare; it lives below both so the
labelers do not import the evaluation layer.
"""

from __future__ import annotations

import re

__all__ = ["markdown_plain_text", "normalize_markdown"]

# Markdown normalisation. Line-anchored markers are removed before the inline runs so that "* * *" is
# recognised as a rule, not as a bullet followed by emphasis.
_RULE = re.compile(r"^[ \t]*([-*_=])(?:[ \t]*\1){2,}[ \t]*$", re.MULTILINE)
_BLOCK_MARKER = re.compile(
    r"^[ \t]*(?:"
    r">[ \t]?"  # quote marks
    r"|#{1,6}(?=[ \t]|$)"  # ATX heading hashes
    r"|[-*+•][ \t]+"  # list bullets
    r"|\d{1,9}[.)](?=[ \t]|$)"  # list numbers
    r")",
    re.MULTILINE,
)
_INLINE_MARKUP = re.compile(r"[*_|`]+")


def normalize_markdown(text: str) -> str:
    """Strip Markdown markup and collapse all whitespace to single spaces.

    Removes heading hashes, list bullets and numbers, block-quote marks (repeatedly, so "> - item" loses
    both), horizontal rules, and runs of ``*``, ``_``, ``|`` and backticks. Backslash escapes (html2text's
    ``1\\.``, ``\\*``) are deliberately kept: unescaping them moved trafilatura's dev figure 0.006 away from
    the published 0.939.

    Args:
        text: Markdown or plain text.

    Returns:
        One line of text without leading or trailing whitespace.
    """
    text = _RULE.sub(" ", text)
    # Nested markers ("> > 1. item") need several passes; three covers real pages.
    for _ in range(3):
        stripped = _BLOCK_MARKER.sub("", text)
        if stripped == text:
            break
        text = stripped
    text = _INLINE_MARKUP.sub(" ", text)
    return " ".join(text.split())


_TABLE_RULE = re.compile(r"^[\s|:-]*-[\s|:-]*$")


def markdown_plain_text(text: str) -> str:
    """Markdown as plain text for a corpus: each line stripped of its markup (:func:`normalize_markdown`),
    table rules dropped, paragraphs kept apart by one blank line."""
    lines = []
    for line in text.splitlines():
        plain = "" if _TABLE_RULE.match(line) else normalize_markdown(line)
        if plain or (lines and lines[-1]):
            lines.append(plain)
    return "\n".join(lines).strip()
