"""Simplification: raw HTML → the model's Simplified HTML and the aligned mapping view.

The model input is byte-compatible with ``mineru-html`` 1.1.2's ``simplify_html`` (the format the released
MinerU-HTML weights expect); see ``tests/dripper_core/test_simplify_conformance.py`` for the measured
agreement and README "Deliberate differences from upstream" for where and why it differs.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from lxml import etree

from dripper_core.simplify.align import AlignmentError, ItemShape, attach_id
from dripper_core.simplify.dom import (
    EmptyDocumentError,
    clean_processing_dom,
    parse_document,
    processing_copy,
    repair_html,
)
from dripper_core.simplify.items import cut_text, has_content, prune_attributes, shorten_lists
from dripper_core.simplify.segment import REF_ATTR, Segmenter
from dripper_core.simplify.tags import (
    CUTOFF_LENGTH,
    INLINE_TAGS,
    ITEM_ID_ATTR,
    TEXT_RUN_TAG,
    VOID_TAGS,
    wrap_document,
)
from dripper_core.simplify.text import visible_text
from dripper_core.types import Block, SimplifiedPage

__all__ = ["EmptyDocumentError", "SimplifyOptions", "simplify_html", "ITEM_ID_ATTR", "TEXT_RUN_TAG"]

_FULL_DOCUMENT = re.compile(r"^\s*<(?:html|!doctype)", re.IGNORECASE)
_ROUND_TRIP_PARSER = etree.HTMLParser()


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


def _as_item(tree: etree._Element, exact: bool) -> etree._Element | None:
    """The item tree as upstream's parser round trip leaves it (``None`` where upstream drops the item).

    The round trip is the identity for a subtree of a libxml2-parsed document except in two cases: an item
    rooted at ``<body>``/``<html>`` does not survive it, and an empty non-inline element, serialised as
    ``<li/>``, can swallow its following siblings. Only such items are round-tripped unless ``exact``
    asks for all (the conformance tests check that both give the same output).
    """
    if exact or tree.tag in ("body", "html") or _has_empty_container(tree):
        return _round_trip(tree)
    return tree


def _has_empty_container(tree: etree._Element) -> bool:
    for element in tree.iter():
        if (
            not element.text
            and len(element) == 0
            and element.tag not in INLINE_TAGS
            and element.tag not in VOID_TAGS
        ):
            return True
    return False


def _round_trip(tree: etree._Element) -> etree._Element | None:
    """Serialise the item as XML and parse it back as an HTML fragment, as upstream does.

    Returns ``None`` where upstream's ``fragment_fromstring`` raises (leading text, several elements):
    such items are dropped upstream.
    """
    markup = etree.tostring(tree, encoding="unicode")
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
        html: The page, decoded (see :func:`dripper_core.decode.decode_html` for bytes).
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
    original = parse_document(repair_html(html))
    processing, counterpart = processing_copy(original)
    hidden_removed = clean_processing_dom(processing)
    segmenter = Segmenter(processing, counterpart)
    candidates = segmenter.run(processing)

    pieces: list[str] = []
    mapped: list[tuple[int, str, etree._Element | None]] = []
    body_items = 0
    for candidate in candidates:
        item = _as_item(candidate.tree, options.exact_round_trip)
        if item is None and candidate.from_body and options.keep_body_text:
            _as_plain_div(candidate.tree)
            item = _as_item(candidate.tree, options.exact_round_trip)
            body_items += item is not None
        if item is None:
            continue
        shape = ItemShape.of(item)
        prune_attributes(item)
        shorten_lists(item)
        if not has_content(item):
            continue
        cut_text(item, options.cutoff_length)
        item_id = len(mapped) + 1
        item.set(ITEM_ID_ATTR, str(item_id))
        try:
            element = attach_id(candidate, shape, item_id, segmenter.refs, segmenter.block_type_marked)
        except AlignmentError:
            continue
        piece = etree.tostring(item, method="html", encoding="unicode").strip()
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
        blocks=blocks,
        url=url,
        stats={
            "n_blocks": len(blocks),
            "n_unmapped_blocks": sum(element is None for *_, element in mapped),
            "hidden_removed": hidden_removed,
            "body_text_items": body_items,
            "invalid_name_items": segmenter.skipped_invalid_names,
            "simplify_seconds": time.perf_counter() - started,
        },
    )
