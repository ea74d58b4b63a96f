"""Parsing and cleaning: raw HTML → the original DOM and the cleaned processing DOM.

The original DOM becomes the mapping view (ids are written into it); the processing DOM is a copy with
scripts, navigation and hidden nodes removed, from which the model's view is built. As upstream, the page
is first repaired by an HTML5 parser (lexbor) and re-serialised, then parsed by libxml2: the model-input
format depends on libxml2's tree, and the HTML5 pass makes that tree the browser's.
"""

from __future__ import annotations

import contextlib
import copy
import html as html_module
import re

from lxml import etree

from dripper.simplify.adoption_limit import reparse_at_adoption_limit
from dripper.simplify.legacy_select import legacy_select_markup
from dripper.simplify.tags import INVISIBLE_STYLE, NAV_MARKERS, REMOVED_TAGS, VOID_TAGS

# Elements the parser never puts text in (void elements, and those libxml2 also treats as empty).
_TEXTLESS_TAGS = VOID_TAGS | {"basefont", "isindex"}
_XML_DECLARATION = re.compile(r"<\?xml\s+.*?\??>", re.DOTALL)
# huge_tree lifts libxml2's 256-level depth limit, past which it silently drops the rest of the page.
_PARSER = etree.HTMLParser(remove_comments=True, huge_tree=True)


class EmptyDocumentError(ValueError):
    """The input parses to no document at all (empty, or nothing but whitespace and comments)."""


def repair_html(html: str) -> tuple[str, bool]:
    """Re-serialise ``html`` through lexbor's HTML5 parser (the tree a browser would build).

    Returns:
        The markup to parse, and whether lexbor wrote it (then every attribute name in it is in lower
        case, as the HTML5 tokenizer writes them, so a plain substring search finds any attribute).
    """
    from selectolax.lexbor import LexborHTMLParser

    if "</>" in html:
        # Modest, the parser behind the training data, kept a bare "</>" as text; lexbor drops it.
        html = html.replace("</>", "&lt;/&gt;")
    html = legacy_select_markup(html)
    try:
        repaired = reparse_at_adoption_limit(html, LexborHTMLParser(html)).html
    except Exception:  # lexbor rejects very little; libxml2's own recovery is the fallback
        return html, False
    return (repaired, True) if repaired is not None else (html, False)


def parse_document(html: str) -> etree._Element:
    """Parse (already repaired) HTML into an lxml tree rooted at ``<html>``.

    Raises:
        EmptyDocumentError: when nothing parses.
    """
    html = _XML_DECLARATION.sub("", html)
    if not html.strip():
        raise EmptyDocumentError("the page is empty")
    try:
        root = etree.fromstring(html, _PARSER)
    except (etree.ParserError, ValueError) as error:
        raise EmptyDocumentError(f"the page does not parse as HTML: {error}") from error
    if root is None:
        raise EmptyDocumentError("the page parses to no elements")
    _flatten_select_contents(root)
    _decode_raw_text_references(root)
    return root


# Raw-text elements whose character references Modest decodes (and writes back as they are) when their
# text holds something its tokenizer took for an end tag (``</b>``), where the HTML standard (lexbor) keeps
# them as written; libxml2 then reads either markup as raw text.
_RAW_TEXT_DECODED_TAGS = ("noframes", "noembed", "xmp")
_END_TAG_LIKE = re.compile(r"</[A-Za-z][^\s>]*[\s>]")


def _decode_raw_text_references(root: etree._Element) -> None:
    """Decode character references in raw-text elements as Modest does (``&amp;`` → ``&``).

    (lxml answers a tag the document never names at once, without walking the tree: most pages cost
    nothing.)
    """
    for element in root.iter(*_RAW_TEXT_DECODED_TAGS):
        if element.text and "&" in element.text and _END_TAG_LIKE.search(element.text):
            # A reference to a character lxml refuses (a control character) leaves the text as it is.
            with contextlib.suppress(ValueError):
                element.text = html_module.unescape(element.text)


_SELECT_CONTENT_TAGS = frozenset({"option", "optgroup", "script", "template", "hr"})


def _flatten_select_contents(root: etree._Element) -> None:
    """Unwrap markup inside ``<select>`` other than options, keeping its text.

    lexbor follows the 2025 HTML spec ("customizable select"), which keeps such markup; the parser behind
    the released weights' training data (Modest) follows the older spec, which ignores those tags.
    """
    for select in root.iter("select"):
        stray = {
            node.tag
            for node in select.iterdescendants()
            if isinstance(node.tag, str) and node.tag not in _SELECT_CONTENT_TAGS
        }
        if stray:
            etree.strip_tags(select, *stray)


def processing_copy(original: etree._Element) -> tuple[etree._Element, dict[etree._Element, etree._Element]]:
    """Deep-copy ``original`` and map every element of the copy to its original.

    The map is built before anything is removed from the copy, so it pairs nodes by document order
    (built by ``dict(zip(...))`` over element-only iterators: no Python step per node).
    """
    processing = copy.deepcopy(original)
    counterpart = dict(zip(processing.iter(etree.Element), original.iter(etree.Element), strict=True))
    return processing, counterpart


def is_invisible_style(style: str) -> bool:
    for declaration in style.split(";"):
        if ":" not in declaration:
            continue
        key, _, value = declaration.partition(":")
        if INVISIBLE_STYLE.get(key.strip()) == value.strip():
            return True
    return False


# Candidates for removal, in document order (an XPath union is sorted): children of ``<body>`` marked as
# navigation, elements with an inline style (checked in Python), and the hidden content of a closed
# ``<details>``. Evaluated on the root, ``descendant`` leaves out the root itself, which has no parent.
_REMOVAL_CANDIDATES = etree.XPath(
    "//body/*[{markers}] | descendant::*[@style] | descendant::details[not(@open)]/*[not(self::summary)]".format(
        markers=" or ".join(f"@class='{marker}' or @id='{marker}'" for marker in sorted(NAV_MARKERS))
    )
)


def _should_remove(element: etree._Element) -> bool:
    parent = element.getparent()
    if parent.tag == "body" and (
        element.get("class", "") in NAV_MARKERS or element.get("id", "") in NAV_MARKERS
    ):
        return True
    style = element.get("style")
    if style and is_invisible_style(style):
        return True
    return parent.tag == "details" and element.tag != "summary" and parent.get("open") is None


def _remove_keeping_tail(element: etree._Element) -> etree._Element | None:
    """Remove ``element``, moving its tail as upstream does; return a void element that took it as text.

    Upstream appends the tail to the previous sibling's tail, or to its *text* when it has no tail: so
    ``<br><span hidden></span>text`` gives a ``<br>`` holding text, which HTML serialisation drops and
    upstream's serialise-and-reparse step turns back into the ``<br>``'s tail. An empty result is stored as
    no text (None), as the parser stores it, so that "no text" has one form in the processing DOM.
    """
    parent = element.getparent()
    tail = element.tail or ""
    element.tail = None
    previous = element.getprevious()
    if previous is None:
        parent.text = (parent.text or "") + tail or None
    elif previous.tail is not None:
        previous.tail = previous.tail + tail or None
    elif previous.text is not None:
        previous.text = previous.text + tail or None
    else:
        previous.text = tail or None
    parent.remove(element)
    if tail and previous is not None and previous.tail is None and previous.tag in _TEXTLESS_TAGS:
        return previous
    return None


def clean_processing_dom(processing: etree._Element) -> tuple[int, list[etree._Element]]:
    """Remove chrome and hidden nodes from the processing DOM in place.

    Tags in ``REMOVED_TAGS`` go with their tail text (as lxml removes them upstream); hidden elements keep
    their tail. Hidden elements inside hidden elements need no separate removal, so only the outermost are
    removed, in document order (the order upstream's bottom-up pass produces for them).

    Returns:
        How many hidden elements went, and the void elements that took the tail of one as their text (see
        :func:`_remove_keeping_tail`): upstream's serialise-and-reparse step changes the items holding them.
    """
    etree.strip_elements(processing, *REMOVED_TAGS, with_tail=True)
    doomed: list[etree._Element] = []
    for element in _REMOVAL_CANDIDATES(processing):
        if doomed and _is_descendant(element, doomed[-1]):
            continue
        if _should_remove(element):
            doomed.append(element)
    tail_receivers = [
        receiver for element in doomed if (receiver := _remove_keeping_tail(element)) is not None
    ]
    return len(doomed), tail_receivers


def _is_descendant(element: etree._Element, ancestor: etree._Element) -> bool:
    parent = element.getparent()
    while parent is not None:
        if parent is ancestor:
            return True
        parent = parent.getparent()
    return False
