"""Alignment: write each item's id into the original DOM, which becomes the mapping view.

A leaf block gets the id on its own element. A run of inline content gets it on a new
``<cc-alg-uc-text>`` wrapper around the original nodes of the run (or on its inline parent), exactly
where ``mineru-html`` 1.1.2 puts it (docs/upstream.md#alignment-with-the-original-dom).
"""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from dripper.simplify.segment import REF_ATTR, Candidate, ItemKind
from dripper.simplify.tags import INLINE_TAGS, ITEM_ID_ATTR, SELECT_ATTR, TEXT_RUN_TAG

_FIRST_ANNOTATED_DESCENDANT = etree.XPath(f"descendant::*[@{SELECT_ATTR}][1]")
ANNOTATED = etree.XPath(f"boolean(//@{SELECT_ATTR})")


class AlignmentError(ValueError):
    """The item's nodes are no longer where the run expects them; upstream drops such an item."""


@dataclass(slots=True)
class ItemShape:
    """What alignment needs to know of an item tree right after its parser round trip."""

    tag: str
    has_children: bool
    root_ref: int | None
    child_refs: list[int]
    text: str | None
    root_replaced: bool
    """The round trip made another element than the run's own root the item root."""

    @property
    def unalignable(self) -> bool:
        """Upstream cannot align it: a run element became the item root and holds elements, which upstream
        (marking every node) looks up under the run's parent, where they are not, and drops the item."""
        return self.root_replaced and self.has_children and self.tag not in INLINE_TAGS

    @classmethod
    def of(cls, tree: etree._Element, built: etree._Element) -> ItemShape:
        """The shape of ``tree``, the item after its round trip of ``built`` (the run's tree as built)."""
        root_ref = tree.get(REF_ATTR)
        return cls(
            tag=tree.tag,
            has_children=len(tree) > 0,
            root_ref=int(root_ref) if root_ref is not None else None,
            child_refs=[int(ref) for child in tree if (ref := child.get(REF_ATTR)) is not None],
            text=tree.text,
            root_replaced=tree is not built and root_ref != built.get(REF_ATTR),
        )


def attach_id(
    candidate: Candidate,
    shape: ItemShape | None,
    item_id: int,
    refs: list[etree._Element],
    holds_blocks: set[etree._Element],
    annotated_page: bool = True,
) -> etree._Element | None:
    """Put ``item_id`` on the original DOM; return the element now carrying it (``None`` if none does).

    ``shape`` is the item's after its round trip; a block needs none (its candidate's original is the
    element).

    ``annotated_page`` false says no element of the page has ``cc-select`` (nothing to copy onto blocks).

    Raises:
        AlignmentError: the run's nodes cannot be found under its parent (the item must be dropped).
    """
    value = str(item_id)
    parent = candidate.original
    if candidate.kind is ItemKind.BLOCK:
        parent.set(ITEM_ID_ATTR, value)
        for annotated in _FIRST_ANNOTATED_DESCENDANT(parent) if annotated_page else ():
            parent.set(SELECT_ATTR, annotated.get(SELECT_ATTR))
        return parent
    own = refs[shape.root_ref] if shape.root_ref is not None else None
    if shape.has_children:
        if shape.tag in INLINE_TAGS:
            if own is None:
                raise AlignmentError("item root has no original element")
            if own.tag != "body" and own not in holds_blocks:
                own.set(ITEM_ID_ATTR, value)
                return own
        if shape.unalignable:
            # The round trip made one of the run's elements the item root (a run of <body> holding one
            # element): its children carry no ref here, and upstream's are not under the parent.
            raise AlignmentError("item root is a run element holding elements of its own")
        children = [refs[ref] for ref in shape.child_refs]
        return _wrap_children(parent, children, value) if children else None
    if candidate.kind is ItemKind.INLINE_ELEMENTS:
        if own is None:
            raise AlignmentError("item root has no original element")
        own.set(ITEM_ID_ATTR, value)
        return own
    if shape.text and shape.text.strip():
        return _wrap_text(parent, shape.text.strip(), value)
    return None


def _wrapper(parent: etree._Element, value: str) -> etree._Element:
    wrapper = etree.Element(TEXT_RUN_TAG)
    wrapper.set(ITEM_ID_ATTR, value)
    if parent.get(SELECT_ATTR) is not None:
        wrapper.set(SELECT_ATTR, parent.get(SELECT_ATTR))
    return wrapper


def _wrap_children(parent: etree._Element, children: list[etree._Element], value: str) -> etree._Element:
    first, last = children[0], children[-1]
    try:
        start, end = parent.index(first), parent.index(last)
    except ValueError as error:
        raise AlignmentError("run nodes moved") from error
    leading = parent.text if start == 0 else parent[start - 1].tail
    trailing = last.tail
    wrapper = _wrapper(parent, value)
    if leading:
        wrapper.text = leading
        if start == 0:
            parent.text = None
        else:
            parent[start - 1].tail = None
    wrapper.extend(parent[start : end + 1])  # moves the nodes, tails included
    parent.insert(start, wrapper)
    if last.tag == "br" and trailing:
        wrapper.tail = trailing
        last.tail = None
    return wrapper


def _wrap_text(parent: etree._Element, text: str, value: str) -> etree._Element | None:
    if parent.text and parent.text.strip() == text:
        wrapper = _wrapper(parent, value)
        wrapper.text = parent.text
        parent.text = None
        parent.insert(0, wrapper)
        return wrapper
    for child in parent:
        if child.tail and child.tail.strip() == text:
            wrapper = _wrapper(parent, value)
            wrapper.text = child.tail
            child.tail = None
            child.addnext(wrapper)
            return wrapper
    return None
