"""Visible text and hidden-node rules shared by the mapping view, labelers and reconstruction."""

from __future__ import annotations

import re

from lxml import etree

NEVER_VISIBLE_TAGS = frozenset(
    [
        "script",
        "style",
        "noscript",
        "template",
        "head",
        "title",
        "meta",
        "link",
        "iframe",
        "frame",
        "object",
        "embed",
        "nav",
    ]
)
_WHITESPACE = re.compile(r"\s+")


def is_hidden(element: etree._Element) -> bool:
    """Whether the element is hidden from a reader: by its tag, ``hidden``, ``aria-hidden`` or inline style."""
    tag = element.tag
    if not isinstance(tag, str) or tag in NEVER_VISIBLE_TAGS:
        return True
    attrib = element.attrib
    if not attrib:
        return False
    if "hidden" in attrib or attrib.get("aria-hidden", "").strip().lower() == "true":
        return True
    style = attrib.get("style")
    return bool(style) and _style_hides(style)


def _style_hides(style: str) -> bool:
    for declaration in style.lower().split(";"):
        key, _, value = declaration.partition(":")
        key, value = key.strip(), value.replace("!important", "").strip()
        if (key == "display" and value == "none") or (
            key == "visibility" and value in ("hidden", "collapse")
        ):
            return True
    return False


def visible_text(element: etree._Element) -> str:
    """The element's visible text (hidden subtrees skipped), whitespace collapsed to single spaces.

    Hidden means :func:`is_hidden`; the element's own tail is not included.
    """
    parts: list[str] = []
    stack: list[tuple[etree._Element, bool]] = [(element, False)]
    while stack:
        node, closing = stack.pop()
        if closing:
            if node.tail and node is not element:
                parts.append(node.tail)
            continue
        if not is_hidden(node):
            if node.text:
                parts.append(node.text)
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(node))
        elif node.tail and node is not element:
            parts.append(node.tail)
    return _WHITESPACE.sub(" ", "".join(parts)).strip()
