"""Simplification: raw HTML → the model's Simplified HTML and the aligned mapping view.

The model input is byte-compatible with ``mineru-html`` 1.1.2's ``simplify_html`` (the format the released
MinerU-HTML weights expect); see docs/extraction.md "The model input" and
``research/upstream_conformance.py`` for the measured agreement, ``tests/simplify/test_conformance.py`` and
``test_upstream_differential.py`` for the checks, and docs/lm-labelers.md "Deliberate differences from
upstream" for where and why it differs.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from lxml import etree

from dripper.simplify.align import ANNOTATED, ItemShape, attach_id
from dripper.simplify.dom import (
    EmptyDocumentError,
    clean_processing_dom,
    parse_document,
    processing_copy,
    repair_html,
)
from dripper.simplify.items import cut_text, has_content, prune_attributes, shorten_lists
from dripper.simplify.segment import REF_ATTR, Candidate, ItemKind, Segmenter
from dripper.simplify.tags import (
    CUTOFF_LENGTH,
    INLINE_TAGS,
    ITEM_ID_ATTR,
    SELECT_ATTR,
    TEXT_RUN_TAG,
    VOID_TAGS,
    wrap_document,
)
from dripper.simplify.text import visible_text
from dripper.types import Block, SimplifiedPage

__all__ = ["EmptyDocumentError", "SimplifyOptions", "simplify_html", "ITEM_ID_ATTR", "TEXT_RUN_TAG"]

_FULL_DOCUMENT = re.compile(r"^\s*<(?:html|!doctype)", re.IGNORECASE)
_ROUND_TRIP_PARSER = etree.HTMLParser()
# XML-incompatible characters (segment.XML_INCOMPATIBLE): searching the markup for each with ``in`` is a
# memchr per character (none at all for U+FFFE/U+FFFF in a page of narrower characters), several times
# faster than a regex character class over the text, and twice as fast as searching its UTF-8 encoding.
_XML_INCOMPATIBLE = tuple(
    chr(code) for code in [*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0xFFFE, 0xFFFF]
)


def _may_hold_xml_incompatible(markup: str, repaired: bool) -> bool:
    """Whether the tree parsed from ``markup`` may hold an XML-incompatible character.

    They come as raw characters or as character references (``&#26;``, ``&#x0B;``); both parsers decode
    a reference to a control character into the tree as is. lexbor's markup (``repaired``) holds every
    such character decoded (``&#0;`` and lone surrogates as U+FFFD), so searching it finds both forms;
    markup libxml2 parses unrepaired may hold them as references, so any numeric reference counts.
    """
    return any(character in markup for character in _XML_INCOMPATIBLE) or (not repaired and "&#" in markup)


@dataclass(frozen=True, slots=True)
class SimplifyOptions:
    """Options of the simplification.

    Attributes:
        cutoff_length: Characters of text shown per item before ``...`` (upstream: 500).
        keep_body_text: Make items of text that sits directly under ``<body>``, which upstream silently
            drops (the only deliberate change to the model input; it adds items only on such pages).
        block_text: Fill :attr:`Block.text` (the block's full visible text, which text-based labelers
            need; an LM labeler does not, and skipping it saves a pass over the blocks).
        exact_round_trip: Pass every item through upstream's serialise-and-reparse step instead of only
            those where it changes something (slower; for conformance checks).
    """

    cutoff_length: int = CUTOFF_LENGTH
    keep_body_text: bool = True
    exact_round_trip: bool = False
    block_text: bool = True

    def __post_init__(self) -> None:
        if self.cutoff_length < 1:
            raise ValueError(f"cutoff_length must be positive, got {self.cutoff_length}")


def _as_item(
    tree: etree._Element, exact: bool, has_empty_container: bool | None = None
) -> etree._Element | None:
    """The item tree as upstream's parser round trip leaves it (``None`` where upstream drops the item).

    The round trip is the identity for a subtree of a libxml2-parsed document except where: an item
    rooted at ``<body>``/``<html>`` does not survive it; an empty non-inline element, serialised as
    ``<li/>``, can swallow its following siblings; a raw-text element's text is escaped once more; the
    removal of a hidden element left text where the parser would not (see :class:`EmptyContainers`). Only
    such items are round-tripped unless ``exact`` asks for all (the conformance tests check that both give
    the same output). ``has_empty_container`` says whether the item is of the last three kinds when already
    known (:class:`EmptyContainers`), else only the empty containers are looked up.
    """
    if has_empty_container is None:
        has_empty_container = _has_empty_container(tree)
    if exact or tree.tag in ("body", "html") or has_empty_container:
        return _round_trip(tree)
    return tree


# Elements with no child but an empty text, if any (removing a hidden node can leave a text of ''); whether
# they are containers is checked in Python.
_CHILDLESS = etree.XPath("descendant-or-self::*[not(node()[not(self::text())]) and not(text() != '')]")


_EMPTY_ELEMENTS = etree.XPath("descendant-or-self::*[not(node())]")


def _is_empty_container(element: etree._Element) -> bool:
    return element.tag not in INLINE_TAGS and element.tag not in VOID_TAGS


def _has_empty_container(tree: etree._Element) -> bool:
    return any(_is_empty_container(element) for element in _CHILDLESS(tree))


# libxml2 (2.14, as the HTML5 tokenizer) reads these as raw text, so their text (markup as text, escaped
# once in the tree's markup) is escaped once more by upstream's round trip: ``&amp;lt;a&amp;gt;``.
_RAW_TEXT_TAGS = ("noframes", "noembed", "xmp", "plaintext")


class EmptyContainers:
    """Which subtrees of the processing DOM need upstream's round trip, found once per page.

    Those holding an empty non-inline element, a raw-text element (:data:`_RAW_TEXT_TAGS`), or a void
    element that took the tail of a removed hidden one as its text (``tail_receivers``, see
    :func:`clean_processing_dom`). An item copied from such a subtree needs the round trip; asking once
    for the whole page instead of once per item saves an XPath evaluation per item.
    """

    def __init__(self, processing: etree._Element, tail_receivers: list[etree._Element] | tuple = ()) -> None:
        self._holding: set[etree._Element] = set()
        # No child node at all: the processing DOM stores no text as None, never as ''.
        empty = (element for element in _EMPTY_ELEMENTS(processing) if _is_empty_container(element))
        # (lxml answers a tag the document never names at once, without walking the tree.)
        for element in (*empty, *processing.iter(*_RAW_TEXT_TAGS), *tail_receivers):
            node = element
            while node is not None and node not in self._holding:
                self._holding.add(node)
                node = node.getparent()

    def in_candidate(self, candidate: Candidate) -> bool:
        """Whether the candidate's item tree holds an empty non-inline element."""
        if candidate.kind is ItemKind.BLOCK:
            return candidate.source in self._holding
        # A run: a new root (never empty: it has text or children) around copies of the run's elements.
        return any(source in self._holding for source in candidate.run_sources)


def _round_trip(tree: etree._Element) -> etree._Element | None:
    """Serialise the item as XML and parse it back as an HTML fragment, as upstream does.

    Returns ``None`` where upstream's ``fragment_fromstring`` raises (leading text, several elements):
    such items are dropped upstream.
    """
    markup = etree.tostring(tree, encoding="unicode", with_tail=False)
    if not _FULL_DOCUMENT.match(markup):
        markup = f"<html><body>{markup}</body></html>"
    try:
        document = etree.fromstring(markup, _ROUND_TRIP_PARSER)
    except (etree.ParserError, ValueError):
        return None
    if document is None or document.tag != "html":
        return None
    bodies = [child for child in document if child.tag == "body"]
    if len(bodies) != 1:
        return None
    body = bodies[0]
    if (body.text and body.text.strip()) or len(body) != 1:
        return None
    item = body[0]
    if item.tail and item.tail.strip():
        return None
    item.tail = None
    return item


def _as_plain_div(tree: etree._Element) -> None:
    """Turn a ``<body>`` item root into an attribute-less ``<div>`` (keeping only its alignment ref)."""
    ref = tree.get(REF_ATTR)
    tree.tag = "div"
    tree.attrib.clear()
    if ref is not None:
        tree.set(REF_ATTR, ref)


def simplify_html(
    html: str, doc_id: str = "", url: str | None = None, options: SimplifyOptions | None = None
) -> SimplifiedPage:
    """Build the Simplified HTML (model input) and the mapping view of one page.

    Args:
        html: The page, decoded (see :func:`dripper.decode.decode_html` for bytes).
        doc_id: Carried into the result.
        url: Carried into the result.
        options: Simplification options; defaults match upstream plus the body-text fix.

    Returns:
        The page's :class:`SimplifiedPage`; ``blocks[i].item_id == i + 1``.

    Raises:
        EmptyDocumentError: when the input holds no parseable document.
    """
    options = options or SimplifyOptions()
    started = time.perf_counter()
    markup, names_lowercased = repair_html(html)
    original = parse_document(markup)
    processing, counterpart = processing_copy(original)
    hidden_removed, tail_receivers = clean_processing_dom(processing)
    empty_containers = EmptyContainers(processing, tail_receivers)
    segmenter = Segmenter(processing, counterpart, _may_hold_xml_incompatible(markup, names_lowercased))
    candidates = segmenter.run(processing)
    # Only pages annotated with cc-select (WebMainBench's) have it to copy onto blocks: one search of the
    # page spares one per block on all others. A substring search of lexbor's markup (attribute names in
    # lower case) rules out most pages faster than the XPath over every attribute of the tree.
    annotated_page = (not names_lowercased or SELECT_ATTR in markup) and ANNOTATED(original)

    pieces: list[str] = []
    mapped: list[tuple[int, str, etree._Element | None]] = []
    body_items = 0
    for candidate in candidates:
        # An item holding XML-incompatible characters is round-tripped as upstream does (they become U+FFFD).
        needs_round_trip = candidate.holds_xml_incompatible or empty_containers.in_candidate(candidate)
        item = _as_item(candidate.tree, options.exact_round_trip, needs_round_trip)
        # Only runs are aligned through the refs their tree carries.
        is_run = candidate.kind is not ItemKind.BLOCK
        shape = ItemShape.of(item, candidate.tree) if item is not None and is_run else None
        if (
            candidate.from_body
            and options.keep_body_text
            and (item is None or (is_run and shape.unalignable))
        ):
            # Upstream loses this run of <body> (no item, or one it cannot align): ours keeps it as a <div>.
            _as_plain_div(candidate.tree)
            item = _as_item(candidate.tree, options.exact_round_trip, needs_round_trip or None)
            body_items += item is not None
            shape = None
        if item is None:
            continue
        if shape is None and is_run:
            shape = ItemShape.of(item, candidate.tree)
        try:
            prune_attributes(item, rewrite=candidate.holds_xml_incompatible)
            shorten_lists(item)
            if not has_content(item):
                continue
            cut_text(item, options.cutoff_length)
        except ValueError:
            if not candidate.holds_xml_incompatible:
                raise
            # U+FFFE/U+FFFF survive the round trip and lxml refuses them where upstream sets them: dropped.
            segmenter.skipped_xml_incompatible += 1
            continue
        item_id = len(mapped) + 1
        item.set(ITEM_ID_ATTR, str(item_id))
        try:
            element = attach_id(
                candidate, shape, item_id, segmenter.refs, segmenter.block_type_marked, annotated_page
            )
        except ValueError:  # AlignmentError, or a wrapper text lxml refuses: upstream drops the item too
            continue
        piece = etree.tostring(item, method="html", encoding="unicode", with_tail=False).strip()
        pieces.append(piece)
        mapped.append((item_id, piece, element))

    simplified = wrap_document("".join(pieces))
    blocks = [
        Block(
            item_id=item_id,
            tag=element.tag if element is not None else "",
            simplified_html=piece,
            text=visible_text(element) if element is not None and options.block_text else "",
        )
        for item_id, piece, element in mapped
    ]
    return SimplifiedPage(
        doc_id=doc_id,
        simplified_html=simplified,
        mapping_tree=original,
        block_elements=[element for *_, element in mapped],
        blocks=blocks,
        url=url,
        stats={
            "n_blocks": len(blocks),
            "n_unmapped_blocks": sum(element is None for *_, element in mapped),
            "hidden_removed": hidden_removed,
            "body_text_items": body_items,
            "invalid_name_items": segmenter.skipped_invalid_names,
            "xml_incompatible_items": segmenter.skipped_xml_incompatible,
            "simplify_seconds": time.perf_counter() - started,
        },
    )
