"""Tag sets and constants of the Simplified HTML format.

They are part of the model-input format the released MinerU-HTML weights were trained on
(``mineru-html`` 1.1.2), so they must not be "improved": see docs/upstream.md#segmentation and
docs/upstream.md#constants.
"""

from __future__ import annotations

import re

ITEM_ID_ATTR = "_item_id"
TEXT_RUN_TAG = "cc-alg-uc-text"
"""Wrapper element in the mapping view for a run of inline content that has no element of its own."""
SELECT_ATTR = "cc-select"
"""WebMainBench's annotation attribute; copied onto blocks so training labels transfer."""

INLINE_TAGS = frozenset(
    [
        "map",
        "optgroup",
        "span",
        "input",
        "time",
        "u",
        "strong",
        "small",
        "sub",
        "samp",
        "blink",
        "b",
        "code",
        "nobr",
        "strike",
        "bdo",
        "basefont",
        "abbr",
        "var",
        "i",
        "cccode-inline",
        "s",
        "pic",
        "label",
        "mark",
        "object",
        "ccmath-inline",
        "svg",
        "button",
        "a",
        "font",
        "dfn",
        "sup",
        "kbd",
        "q",
        "script",
        "acronym",
        "option",
        "img",
        "big",
        "cite",
        "em",
        "marked-tail",
        "marked-text",
    ]
)
VOID_TAGS = frozenset(
    [
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
    ]
)
TABLE_STRUCTURE_TAGS = frozenset(
    ["caption", "colgroup", "col", "thead", "tbody", "tfoot", "tr", "td", "th", "br"]
)
REMOVED_TAGS = ("title", "head", "style", "script", "link", "meta", "iframe", "frame", "nav")
NO_BLOCK_TAGS = frozenset({"math"})
UNCOUNTED_TEXT_TAGS = frozenset({"math", "table"})
"""Text inside these is not counted (nor cut) by the per-item truncation."""
INVISIBLE_STYLE = {
    "display": "none",
    "font-size": "0px",
    "color": "transparent",
    "visibility": "hidden",
    "opacity": "0",
}
NAV_MARKERS = frozenset({"nav"})
"""A ``class`` or ``id`` exactly equal to one of these, on a child of ``<body>``, removes the element."""

CUTOFF_LENGTH = 500
ELLIPSIS = "..."
DOCUMENT_PREFIX = '<html><head><meta charset="utf-8"></head><body>'
DOCUMENT_SUFFIX = "</body></html>"

_TAG = re.compile(r"(<[^>]+>)")
_WHITESPACE = re.compile(r"\s+")


def wrap_document(block_markup: str) -> str:
    """The page's Simplified HTML from its blocks' markup: the document wrapper around it, and whitespace
    runs in text (not inside tags) collapsed to one space."""
    parts = _TAG.split(DOCUMENT_PREFIX + block_markup + DOCUMENT_SUFFIX)  # text at even indexes
    parts[::2] = [_WHITESPACE.sub(" ", text) if text else text for text in parts[::2]]
    return "".join(parts).strip()
