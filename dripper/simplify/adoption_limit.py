"""A link left open eight or more blocks above the next ``<a>`` closed as Modest, upstream's parser, closes it.

An ``<a>`` start tag while another ``a`` is still in the list of active formatting elements runs the
adoption agency algorithm, which moves that link down one block per round and stops after eight rounds,
leaving a copy of it below the eighth block. The HTML standard (lexbor) then removes only the *original*
link from the lists, so the copy stays open: the new link nests inside it, and the copy is reopened in the
next paragraph (``<p><a class="C">Some </a><a>See</a></p>``). Modest, whose trees the released weights
were trained on, removes the copy instead (``<p>Some <a>See</a></p>``).

An ``</a>`` written just before such a start tag gives Modest's tree from lexbor: the end tag runs the
same eight rounds, and the start tag then finds the copy and closes it. (Below more than eight blocks,
the start tag's rounds still move the copy further down, where Modest leaves it: the blocks below keep an
empty copy, or one around what they already held.)
Anywhere else the end tag would change nothing, in the standard: it runs the rounds the start tag would
have run, after which the start tag finds no link left open. As lexbor departs from that on some broken
markup, the end tag is only written before the start tags whose link lexbor nests inside another link,
which the limit does and well-formed pages rarely have.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from selectolax.lexbor import LexborHTMLParser

# Two link start tags with no link end tag between: the first text-level condition (cheap, ``finditer``).
_LINK_TAG = re.compile(r"<(/?)a[\s/>]", re.IGNORECASE)
# A tag as the tokenizer reads it (a quoted value may hold ">"), a comment, or a raw-text element whose
# content is text; atomic so that a tag that never ends cannot backtrack.
_TOKEN = re.compile(
    r"<!--.*?(?:-->|\Z)"
    r"|<(script|style|textarea|title|xmp|iframe|noembed|noframes)\b(?>=\s*(?:\"[^\"]*\"|'[^']*')|[^>])*+>"
    r".*?(?:</\1\s*>|\Z)"
    r"|<(?P<end>/?)(?P<name>[a-zA-Z][^\s/>]*)(?P<rest>(?>=\s*(?:\"[^\"]*\"|'[^']*')|[^>])*+)>",
    re.IGNORECASE | re.DOTALL,
)
# Links inside these are not HTML links (SVG's, MathML's): the markup in them is left alone.
_FOREIGN = frozenset({"svg", "math"})
_MARK = "data-dripper-link"


def reparse_at_adoption_limit(html: str, parsed: LexborHTMLParser) -> LexborHTMLParser:
    """lexbor's tree of ``html`` with the links left open at the adoption agency's limit closed, as Modest does.

    ``parsed`` is lexbor's tree of ``html``; it is returned as it is unless it holds a link inside a link
    and the markup a link start tag following an unclosed one (then ``html`` is parsed twice more: once
    to learn which start tags give the nested links, once with ``</a>`` before them).
    """
    if not may_leave_link_open(html) or parsed.css_first("a a") is None:
        return parsed
    from selectolax.lexbor import LexborHTMLParser

    starts = list(_html_link_starts(html))
    marked = _insert_at(
        html, [(match.end("name"), f' {_MARK}="{index}"') for index, (match, _) in enumerate(starts)]
    )
    nested = {node.attributes.get(_MARK) for node in LexborHTMLParser(marked).css("a a")}
    closing = [
        (match.start(), "</a>")
        for index, (match, after_open_link) in enumerate(starts)
        if after_open_link and str(index) in nested
    ]
    return LexborHTMLParser(_insert_at(html, closing)) if closing else parsed


def may_leave_link_open(html: str) -> bool:
    """Whether ``html`` has an ``<a>`` start tag following another with no ``</a>`` between them."""
    previous_was_start = False
    for match in _LINK_TAG.finditer(html):
        is_start = not match.group(1)
        if is_start and previous_was_start:
            return True
        previous_was_start = is_start
    return False


def _html_link_starts(html: str) -> Iterator[tuple[re.Match[str], bool]]:
    """Each ``<a>`` start tag of the HTML namespace, and whether an earlier one is still unclosed."""
    link_open = False
    foreign_depth = dict.fromkeys(_FOREIGN, 0)  # open <svg>/<math>, by their own start and end tags
    for match in _TOKEN.finditer(html):
        name = match.group("name")
        if name is None:  # a comment or raw-text element
            continue
        name = name.lower()
        closing = match.group("end") == "/"
        if name in _FOREIGN:
            if closing:
                foreign_depth[name] = max(foreign_depth[name] - 1, 0)
            elif not match.group("rest").rstrip().endswith("/"):
                foreign_depth[name] += 1
            continue
        if name == "plaintext" and not closing:
            return  # the rest of the page is text
        if name != "a" or any(foreign_depth.values()):
            continue
        if not closing:
            yield match, link_open
        link_open = not closing


def _insert_at(html: str, insertions: list[tuple[int, str]]) -> str:
    """``html`` with each text inserted at its position (positions in increasing order)."""
    pieces: list[str] = []
    written = 0
    for position, text in insertions:
        pieces += (html[written:position], text)
        written = position
    pieces.append(html[written:])
    return "".join(pieces)
