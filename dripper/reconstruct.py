"""Labels → main HTML: the subset of the original DOM that the main blocks cover.

Kept: every block labelled main with its whole subtree, its ancestors (as containers only), and ``<br>``
elements next to kept elements (upstream's "br recall"). Fixed relative to upstream
(docs/upstream.md#reconstruction):

- hidden, script/style, ``<nav>`` and closed-``<details>`` content inside a main block is removed (the
  model never saw it; upstream let it leak into the output);
- ``_item_id`` and the other internal attributes are removed, ``<cc-alg-uc-text>`` wrappers unwrapped;
- text of containers that belongs to no block (ancestors' own text, stray tails) is dropped rather than
  leaked;
- the mapping view is never re-parsed from bytes, so a ``<meta charset>`` cannot garble it.
"""

from __future__ import annotations

from collections.abc import Sequence

from lxml import etree

from dripper.simplify.dom import is_invisible_style
from dripper.simplify.segment import REF_ATTR
from dripper.simplify.tags import ITEM_ID_ATTR, SELECT_ATTR, TEXT_RUN_TAG
from dripper.simplify.text import is_hidden
from dripper.types import SimplifiedPage

_INTERNAL_ATTRS = (ITEM_ID_ATTR, SELECT_ATTR, REF_ATTR, "cc-block-type", "cc-no-block")
_ITEM_IDS = etree.XPath(f"//@{ITEM_ID_ATTR}")  # the values in document order, each with getparent()


def main_tree(page: SimplifiedPage, labels: Sequence[bool]) -> etree._Element | None:
    """The main-content tree (a pruned copy of the mapping view), or ``None`` when no block is main.

    Raises:
        ValueError: ``labels`` does not have one entry per block.
    """
    if len(labels) != page.n_blocks:
        raise ValueError(f"{len(labels)} labels for {page.n_blocks} blocks of page {page.doc_id!r}")
    wanted = {str(index + 1) for index, is_main in enumerate(labels) if is_main}
    if not wanted:
        return None
    root = page.mapping_root().__deepcopy__(None)
    main_elements = [item_id.getparent() for item_id in _ITEM_IDS(root) if item_id in wanted]
    if not main_elements:
        return None
    kept_subtrees = set(main_elements)
    containers: set[etree._Element] = set()
    for element in main_elements:
        for ancestor in element.iterancestors():
            if ancestor in containers:
                break
            containers.add(ancestor)
    _recall_breaks(root, kept_subtrees, containers)
    _prune(root, kept_subtrees, containers)
    for element in kept_subtrees:
        _remove_hidden(element)
    for element in (*containers, *kept_subtrees):
        _make_visible(element)
    etree.strip_tags(root, TEXT_RUN_TAG)
    etree.strip_attributes(root, *_INTERNAL_ATTRS)
    return root


def main_html(page: SimplifiedPage, labels: Sequence[bool]) -> str:
    """The main content as an HTML document string ('' when no block is main)."""
    root = main_tree(page, labels)
    if root is None:
        return ""
    return etree.tostring(root, method="html", encoding="unicode")


_VISIBLE_AS_DIV = frozenset({"noscript", "template"})


def _make_visible(element: etree._Element) -> None:
    """A kept block or container must not hide its content from the Markdown converter.

    The model saw (and labelled) blocks inside ``<noscript>``, ``hidden`` or namespaced containers; keep
    them as plain containers rather than letting the converter drop the whole subtree.
    """
    tag = element.tag
    if tag in _VISIBLE_AS_DIV or ":" in tag:
        element.tag = "div"
    for name in ("hidden", "aria-hidden"):
        element.attrib.pop(name, None)
    style = element.get("style")
    if style and ("none" in style or "hidden" in style):
        del element.attrib["style"]


def _recall_breaks(
    root: etree._Element, kept_subtrees: set[etree._Element], containers: set[etree._Element]
) -> None:
    # A <br> right before or after a kept element (in document order) is kept, so line structure between
    # kept inline runs survives.
    #
    # Only subtrees that hold a kept element or a <br> are walked: any other subtree could only reset the
    # state as its first element already does. Note that a <br> kept after a kept element is added to
    # kept_subtrees at its start, so its end event counts as a kept element's end (inside_kept goes below
    # zero and no later <br> is kept); the main HTML of every page was made that way, so the walk keeps it.
    leads_somewhere = set(containers)
    for br in root.iter("br"):
        for ancestor in br.iterancestors():
            if ancestor in leads_somewhere:
                break
            leads_somewhere.add(ancestor)
    previous_kept = False
    pending_breaks: list[etree._Element] = []
    inside_kept = 0
    walker = etree.iterwalk(root, events=("start", "end"))
    for event, element in walker:
        if not isinstance(element.tag, str):
            continue
        if element in kept_subtrees:
            if event == "start":
                inside_kept += 1
                if inside_kept == 1:
                    for br in pending_breaks:
                        _keep(br, kept_subtrees, containers)
                    pending_breaks = []
                if inside_kept > 0:
                    walker.skip_subtree()  # inside, only nested kept elements count, and they balance out
            else:
                inside_kept -= 1
                previous_kept = inside_kept == 0
            continue
        if event == "start" and element not in leads_somewhere:
            walker.skip_subtree()
        if inside_kept or event != "start":
            continue
        if element.tag == "br":
            if previous_kept:
                _keep(element, kept_subtrees, containers)
            else:
                pending_breaks.append(element)
        else:
            previous_kept = False
            pending_breaks = []


def _keep(element: etree._Element, kept_subtrees: set, containers: set) -> None:
    kept_subtrees.add(element)
    for ancestor in element.iterancestors():
        if ancestor in containers:
            break
        containers.add(ancestor)


def _prune(root: etree._Element, kept_subtrees: set, containers: set) -> None:
    stack = [root]
    while stack:
        container = stack.pop()
        if container.text and container.text.strip():
            container.text = None  # text of a container that no block claimed
        for child in list(container):
            if child in kept_subtrees:
                if child.tail and child.tail.strip():
                    child.tail = " "
            elif child in containers:
                if child.tail and child.tail.strip():
                    child.tail = " "
                stack.append(child)
            else:
                container.remove(child)  # its tail goes with it: it belongs to no main block


def _remove_hidden(root: etree._Element) -> None:
    doomed = []
    for element in root.iterdescendants():
        if not isinstance(element.tag, str):
            doomed.append(element)
            continue
        if (
            is_hidden(element)
            or _closed_details_child(element)
            or (style := element.get("style"))
            and is_invisible_style(style)
        ):
            doomed.append(element)
    removed: set[etree._Element] = set()
    for element in doomed:
        if any(ancestor in removed for ancestor in element.iterancestors()):
            continue
        removed.add(element)
        _drop_keeping_tail(element)


def _closed_details_child(element: etree._Element) -> bool:
    parent = element.getparent()
    return (
        parent is not None
        and parent.tag == "details"
        and element.tag != "summary"
        and parent.get("open") is None
    )


def _drop_keeping_tail(element: etree._Element) -> None:
    parent = element.getparent()
    if parent is None:
        return
    tail = element.tail
    previous = element.getprevious()
    parent.remove(element)
    if tail:
        if previous is not None:
            previous.tail = (previous.tail or "") + tail
        else:
            parent.text = (parent.text or "") + tail
