"""``<select>`` contents as the older HTML spec parses them, applied to the markup before lexbor sees it.

The parser behind upstream's model input (Modest, the older spec's "in select" insertion mode) ignores
every tag inside a ``<select>`` but ``option``, ``optgroup``, ``hr``, ``script`` and ``template``; their
text stays, and an open ``<option>`` is closed only by the next ``<option>``/``<optgroup>``, its end tag or
the select's end. lexbor follows the 2025 spec ("customizable select"), which keeps such markup, so that
``<option>A<ul><option>B</ul>t`` nests ``B`` inside ``A`` and leaves ``t`` outside ``B``. Which end tags were
written is lost in lexbor's tree, so the stray tags are dropped from the markup instead: then both specs
build the same options. ``dom._flatten_select_contents`` remains for what this leaves (a select inside a
table, where the older spec's "in select in table" mode ends it at table tags, is left to the parsers).
"""

from __future__ import annotations

import re

# A tag as the tokenizer reads it: a quote opens a value only after "=", and a quoted value may hold ">"
# (so "<select" inside a value left open by a missing quote is no tag). Atomic, so a tag that never ends
# cannot backtrack.
_TAG = r"""<(/?)([a-zA-Z][^\s/>]*)(?>=\s*(?:"[^"]*"|'[^']*')|[^>])*+>"""
# Outside a select: comments and raw-text elements (where "<select" is text), and every tag (skipped
# unless it opens a select).
_OUTSIDE = re.compile(
    r"<!--.*?(?:-->|\Z)"
    r"|<(script|style|textarea|title|xmp|iframe|noembed|noframes)\b(?>=\s*(?:\"[^\"]*\"|'[^']*')|[^>])*+>"
    r".*?(?:</\1\s*>|\Z)"
    r"|" + _TAG.replace("(/?)", "(?P<end>/?)").replace("([a-zA-Z]", "(?P<name>[a-zA-Z]"),
    re.IGNORECASE | re.DOTALL,
)
# Inside a select: comments, script/template with their content (kept as they are), and any other tag.
_INSIDE = re.compile(
    r"<!--.*?(?:-->|\Z)"
    r"|<(script|template)\b(?>=\s*(?:\"[^\"]*\"|'[^']*')|[^>])*+>.*?(?:</\1\s*>|\Z)"
    r"|" + _TAG,
    re.IGNORECASE | re.DOTALL,
)
_KEPT_TAGS = frozenset({"option", "optgroup", "hr"})
# Tags that end the select in the older spec (``input``, ``keygen``, ``textarea``, ``select``), or that may
# end it in a table ("in select in table"): the rest is left to the parsers.
_END_TAGS = frozenset(
    {"select", "input", "keygen", "textarea", "caption", "table", "tbody", "tfoot", "thead", "tr", "td", "th"}
)
_HAS_SELECT = re.compile(r"<select\b", re.IGNORECASE)
_SELECT_END = re.compile(r"</select", re.IGNORECASE)
# Within a select, anything but option, optgroup and hr tags, or what may hide a "</select>" (a comment,
# a script): only then is the page scanned tag by tag, which most pages with a select never need.
_STRAY = re.compile(r"<!--|</?(?!(?:option|optgroup|hr)\b)[a-zA-Z]", re.IGNORECASE)


def legacy_select_markup(html: str) -> str:
    """``html`` with the tags inside each ``<select>`` that the older spec ignores removed (text kept).

    Returns ``html`` itself (no copy) when it holds no ``<select>``, or nothing to remove.
    """
    if not _may_hold_stray_tags(html):
        return html
    pieces: list[str] = []
    written = 0  # html[:written] is in pieces
    position = 0
    while True:
        match = _OUTSIDE.search(html, position)
        if match is None:
            break
        position = match.end()
        if match.group("end") != "" or match.group("name").lower() != "select":
            continue  # a comment, raw-text element, end tag or other tag
        position, removed = _select_contents(html, position)
        for start, end in removed:
            pieces.append(html[written:start])
            written = end
    if not pieces:
        return html
    pieces.append(html[written:])
    return "".join(pieces)


def _may_hold_stray_tags(html: str) -> bool:
    """Whether some ``<select`` is followed, before the next ``</select``, by a tag it may have to lose.

    Text-level: a ``<select`` in a comment or attribute counts too (the scan then tells them apart)."""
    for match in _HAS_SELECT.finditer(html):
        end = _SELECT_END.search(html, match.end())
        if _STRAY.search(html, match.end(), end.start() if end is not None else len(html)) is not None:
            return True
    return False


def _select_contents(html: str, position: int) -> tuple[int, list[tuple[int, int]]]:
    """The end of the select opened before ``position`` and the spans of the tags to remove in it."""
    removed: list[tuple[int, int]] = []
    while True:
        match = _INSIDE.search(html, position)
        if match is None:
            return len(html), removed
        position = match.end()
        name = match.group(3)
        if name is None:  # comment, script, template
            continue
        name = name.lower()
        if name in _END_TAGS:
            return match.start(), removed
        if name not in _KEPT_TAGS:
            removed.append((match.start(), match.end()))
