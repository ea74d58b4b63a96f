"""Segmentation: the processing DOM → candidate items (paragraphs) in document order.

An item is either a leaf block element (a block with no block inside, or a whole data table / content
list) or a run of inline content between blocks. The block predicate, table and list classification and
the walk follow ``mineru-html`` 1.1.2 (docs/upstream.md#segmentation) so that item boundaries, hence ids,
are identical.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from lxml import etree

from dripper.simplify.tags import INLINE_TAGS, NO_BLOCK_TAGS, TABLE_STRUCTURE_TAGS

_HTML_FACTORY = etree.HTMLParser()
XML_INCOMPATIBLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
"""Characters lxml refuses in a string it is given (``ValueError: All strings must be XML compatible``),
though its parser keeps them in the tree, whether the page holds them raw or as character references
(``&#26;``). Upstream builds each item by setting the element's text and attributes from Python, so an
item whose own text, own attributes or run texts hold one is dropped there; deeper ones are deep-copied,
and its serialise-and-reparse step turns them into U+FFFD (all but U+FFFE/U+FFFF, which drop the item
where upstream sets them again: kept attributes, cut texts)."""
REF_ATTR = "data-dripper-ref"
"""Marks an item's root and direct children with the index of their original element (like upstream's
``data-uid``) so the item can be aligned with the original DOM after its round trip through the parser."""


class ItemKind(Enum):
    BLOCK = "block_element"
    INLINE_ELEMENTS = "inline_elements"
    TEXT = "unwrapped_text"
    MIXED = "mixed"


@dataclass(slots=True)
class Candidate:
    """An item before per-item simplification: its tree (refs set) and the original element it came from."""

    kind: ItemKind
    tree: etree._Element
    """The item's tree: a block's element in the processing DOM itself, a run's new root."""
    original: etree._Element
    from_body: bool
    """The item's node is ``<body>`` itself: upstream cannot build such an item (text lost)."""
    source: etree._Element
    """The processing-DOM element the item was built from (a run's: its parent)."""
    run_sources: tuple[etree._Element, ...] = ()
    """A run's elements in the processing DOM (copied into its tree)."""
    holds_xml_incompatible: bool = False
    """Its tree holds a character lxml cannot store (a control character: see :data:`XML_INCOMPATIBLE`)."""


# Cells and list entries are blocks or not depending on their table or list (classified in Python); any
# other element is a block by its tag alone: when it is neither inline nor ``math``.
_CONTEXT_TAGS = ("td", "th", "li", "dt", "dd")
_NOT_PLAIN_BLOCK_TAGS = tuple(sorted(INLINE_TAGS | NO_BLOCK_TAGS | set(_CONTEXT_TAGS)))


class _Classifier:
    """The block predicate, with upstream's table and list classification.

    ``blocks`` and ``holders`` (elements with a block below them) are computed once per page, so the walk
    asks set membership instead of scanning subtrees.
    """

    def __init__(self, processing: etree._Element) -> None:
        self.data_tables = {table: _is_data_table(table) for table in processing.iter("table")}
        self.content_lists: dict[etree._Element, bool] = {}
        # Classified in document order; while classifying a list, lists after it count as unclassified
        # (their items as blocks), which is what makes a list holding a list a layout list upstream.
        for list_element in processing.iter("ul", "ol", "dl"):
            self.content_lists[list_element] = self._is_content_list(list_element)
        # Set difference of two tag-filtered iterations: no Python step per element.
        self.blocks: set[etree._Element] = set(processing.iter(etree.Element))
        self.blocks.difference_update(processing.iter(*_NOT_PLAIN_BLOCK_TAGS))
        self.blocks.update(node for node in processing.iter(*_CONTEXT_TAGS) if self.is_block(node))
        self.holders = self._holders_of(self.blocks)

    def is_block(self, element: etree._Element) -> bool:
        tag = element.tag
        if tag in ("td", "th"):
            return self._judge(element, ("table",), self.data_tables)
        if tag == "li":
            return self._judge(element, ("ul", "ol"), self.content_lists)
        if tag in ("dt", "dd"):
            return self._judge(element, ("dl",), self.content_lists)
        return isinstance(tag, str) and tag not in NO_BLOCK_TAGS and tag not in INLINE_TAGS

    @staticmethod
    def _judge(element: etree._Element, container_tags: tuple[str, ...], whole_items: dict) -> bool:
        # A cell / list item is a block only inside a layout table / non-content list.
        for ancestor in element.iterancestors(*container_tags):
            return not whole_items.get(ancestor, False)
        return False

    @staticmethod
    def _holders_of(blocks: set[etree._Element]) -> set[etree._Element]:
        """Every element with a block below it, not counting blocks inside ``math``.

        Walks up from each block until an element already known to hold one (so each element is visited
        once), stopping at ``math``: nothing inside it makes its ancestors hold blocks.
        """
        holders: set[etree._Element] = set()
        for block in blocks:
            parent = block.getparent()
            while parent is not None and parent not in holders and parent.tag not in NO_BLOCK_TAGS:
                holders.add(parent)
                parent = parent.getparent()
        return holders

    def _scan_has_blocks(self, element: etree._Element) -> bool:
        if element.tag in NO_BLOCK_TAGS:
            return False
        stack = list(element)
        while stack:
            node = stack.pop()
            if self.is_block(node):
                return True
            if node.tag not in NO_BLOCK_TAGS:
                stack.extend(node)
        return False

    def _is_content_list(self, list_element: etree._Element) -> bool:
        allowed = ("li",) if list_element.tag in ("ul", "ol") else ("dt", "dd")
        items = [child for child in list_element if child.tag in ("li", "dt", "dd")]
        if not items:
            return False
        if any(isinstance(child.tag, str) and child.tag not in allowed for child in list_element):
            return False
        if (list_element.text and list_element.text.strip()) or any(
            child.tail and child.tail.strip() for child in list_element
        ):
            return False
        return not any(self._scan_has_blocks(item) for item in items)


def _nearest_table_is(node: etree._Element, table: etree._Element) -> bool:
    for ancestor in node.iterancestors("table"):
        return ancestor is table
    return False


_CELLS_WITH_HEADERS = etree.XPath("descendant::td[@headers] | descendant::th[@headers]")
_LAYOUT_FREE_TAGS = tuple(sorted(TABLE_STRUCTURE_TAGS | INLINE_TAGS))


def _is_data_table(table: etree._Element) -> bool:
    if any(_nearest_table_is(node, table) for node in table.iter("caption", "col", "colgroup")):
        return True
    if any(_nearest_table_is(cell, table) for cell in _CELLS_WITH_HEADERS(table)):
        return True
    if table.get("role") == "table" or table.get("data-table"):
        return True
    # Only table structure and inline tags below (counted: every node, processing instructions included,
    # against the nodes with those tags).
    return sum(1 for _ in table.iterdescendants()) == sum(
        1 for _ in table.iterdescendants(*_LAYOUT_FREE_TAGS)
    )


class Segmenter:
    """Walks the processing DOM and emits :class:`Candidate` items in document order."""

    def __init__(
        self,
        processing: etree._Element,
        counterpart: dict[etree._Element, etree._Element],
        xml_incompatible: bool = False,
    ) -> None:
        """``xml_incompatible`` says the page may hold :data:`XML_INCOMPATIBLE` characters (only then are
        items checked for them)."""
        self.classifier = _Classifier(processing)
        self.xml_incompatible = xml_incompatible
        self.skipped_xml_incompatible = 0
        self.counterpart = counterpart
        self.refs: list[etree._Element] = []
        self._ref_index: dict[etree._Element, int] = {}
        self.block_type_marked: set[etree._Element] = set()
        self.candidates: list[Candidate] = []
        self._seen: set[tuple[str | None, str | None]] = set()
        self.skipped_invalid_names = 0
        self._tag_is_valid: dict[str, bool] = {}

    def run(self, processing: etree._Element) -> list[Candidate]:
        self._walk(processing)
        return self.candidates

    def _ref(self, element: etree._Element, processing_node: etree._Element) -> None:
        index = self._ref_index.get(processing_node)
        if index is None:
            index = self._ref_index[processing_node] = len(self.refs)
            self.refs.append(self.counterpart[processing_node])
        element.set(REF_ATTR, str(index))

    def _is_block_or_holds_blocks(self, child: etree._Element) -> bool:
        if child in self.classifier.blocks:
            return True
        if child in self.classifier.holders:
            if child.tag in INLINE_TAGS:
                # An inline element holding blocks: upstream flags its original (cc-block-type), which
                # later forbids putting a run's id on it directly.
                self.block_type_marked.add(self.counterpart[child])
            return True
        return False

    def _walk(self, node: etree._Element) -> None:
        run: list[tuple[str, object]] = []
        if node.text and node.text.strip():
            run.append(("direct_text", node.text.strip()))
        for child in node:
            if self._is_block_or_holds_blocks(child):
                if child.tag == "br":
                    run.append(("element", child))
                if run:
                    self._emit_run(node, run, final=False)
                    run = []
                if child.tag != "br":
                    if self.classifier.data_tables.get(child) or child not in self.classifier.holders:
                        self._emit_block(child)
                    else:
                        self._walk(child)
                if child.tail and child.tail.strip():
                    run.append(("tail_text", child.tail.strip()))
            else:
                run.append(("element", child))
                if child.tail and child.tail.strip():
                    run.append(("tail_text", child.tail.strip()))
        if run:
            self._emit_run(node, run, final=True)

    def _new_root(self, source: etree._Element) -> etree._Element | None:
        # An HTML-parser element: like upstream's lxml.html.Element it accepts any tag and attribute
        # name HTML allows (o:p, xml:lang, @click), which etree.Element would reject.
        try:
            root = _HTML_FACTORY.makeelement(source.tag)
            root.attrib.update(source.attrib)
        except ValueError:
            self.skipped_invalid_names += 1
            return None
        return root

    def _emit_run(self, node: etree._Element, run: list[tuple[str, object]], final: bool) -> None:
        holds_incompatible = False
        if self.xml_incompatible:
            if _sets_incompatible(run):
                self.skipped_xml_incompatible += 1  # upstream fails to set such a text: the run is dropped
                return
            holds_incompatible = any(
                kind == "element" and (_holds_xml_incompatible(item) or _incompatible(item.tail))
                for kind, item in run
            )
        root = self._new_root(node)
        if root is None:
            return
        self._ref(root, node)
        last_inserted = None
        for index, (kind, item) in enumerate(run):
            if kind == "element":
                item_copy = item.__deepcopy__(None)
                if index == len(run) - 1 and item_copy.tag == "br":
                    item_copy.tail = None
                self._ref(item_copy, item)
                root.append(item_copy)
                last_inserted = item
            elif last_inserted is None:
                root.text = item if not root.text else root.text + " " + item
            # Text after an inserted element is its tail, already carried by the element's copy.
        sources = tuple(item for kind, item in run if kind == "element")
        kinds = {kind for kind, _ in run}
        if kinds == {"direct_text"}:
            kind = ItemKind.TEXT
        elif kinds == {"element"}:
            kind = ItemKind.INLINE_ELEMENTS
        elif final and kinds <= {"direct_text", "tail_text"}:
            kind = ItemKind.TEXT
        else:
            kind = ItemKind.MIXED
        self._add(kind, root, node, sources, holds_incompatible)

    def _valid_tag(self, tag: str) -> bool:
        """Whether an HTML element of this name can be made from Python (upstream builds each item so).

        libxml2 keeps names such as ``ahref="`` (from ``<ahref="/x">``) that lxml refuses to create; the
        answer is cached per tag, so a block costs one dict look-up.
        """
        valid = self._tag_is_valid.get(tag)
        if valid is None:
            try:
                _HTML_FACTORY.makeelement(tag)
                valid = True
            except ValueError:
                valid = False
            self._tag_is_valid[tag] = valid
        return valid

    def _emit_block(self, child: etree._Element) -> None:
        if not self._valid_tag(child.tag):
            # Upstream's clone of the block raises and the block is dropped (its tail still counts).
            self.skipped_invalid_names += 1
            return
        # The block is simplified in place: the processing DOM is ours, and no other item shares its nodes
        # (every element is in one item only), so copying it into a tree of its own would be wasted work.
        # Its tail stays in the processing DOM: the per-item steps and the serialisation leave it out.
        holds_incompatible = False
        if self.xml_incompatible:
            if _incompatible(child.text) or any(map(_incompatible, child.attrib.values())):
                self.skipped_xml_incompatible += 1  # upstream fails to copy them onto the item: dropped
                return
            holds_incompatible = _holds_xml_incompatible(child)
        child.text = child.text or None  # an emptied text ('') must serialise as upstream's None
        # No ref: a block is aligned through its candidate's original element.
        self._add(ItemKind.BLOCK, child, child, holds_xml_incompatible=holds_incompatible)

    def _add(
        self,
        kind: ItemKind,
        root: etree._Element,
        node: etree._Element,
        run_sources: tuple[etree._Element, ...] = (),
        holds_xml_incompatible: bool = False,
    ) -> None:
        # Upstream drops an item whose serialisation, node identities included, equals an earlier one.
        # Every element is in one item only, so that happens just for text-only runs of the same node.
        if len(root) == 0 and kind is not ItemKind.BLOCK:
            key = (root.get(REF_ATTR), root.text)
            if key in self._seen:
                return
            self._seen.add(key)
        self.candidates.append(
            Candidate(
                kind,
                root,
                self.counterpart[node],
                node.tag == "body",
                node,
                run_sources,
                holds_xml_incompatible,
            )
        )


def _sets_incompatible(run: list[tuple[str, object]]) -> bool:
    """Whether upstream, building the run, sets a text lxml refuses.

    A text before the run's first element becomes the root's text (stripped, as the run holds it); a text
    after an element is its tail, which upstream extends from Python (``tail += " " + text``), so the whole
    tail counts: a control character that ``str.strip`` takes for whitespace (``\x0b``, ``\x0c``,
    ``\x1c``-``\x1f``) at its end still makes upstream drop the run.
    """
    last_element = None
    for kind, item in run:
        if kind == "element":
            last_element = item
        elif _incompatible(item if last_element is None else last_element.tail):
            return True
    return False


def _incompatible(text: str | None) -> bool:
    return text is not None and XML_INCOMPATIBLE.search(text) is not None


def _holds_xml_incompatible(element: etree._Element) -> bool:
    """Whether the subtree's texts, tails below it or attribute values hold an XML-incompatible character."""
    return any(map(_incompatible, element.itertext())) or any(
        _incompatible(value) for node in element.iter(etree.Element) for value in node.attrib.values()
    )
