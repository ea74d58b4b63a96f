"""Per-item simplification of the model's view: attribute pruning, list shortening, text cut.

Each function mutates one detached item tree in place, exactly as ``mineru-html`` 1.1.2 does
(docs/upstream.md#per-item-simplification), so the Simplified HTML matches what the released weights saw
in training.
"""

from __future__ import annotations

from lxml import etree

from dripper.simplify.tags import CUTOFF_LENGTH, ELLIPSIS, UNCOUNTED_TEXT_TAGS

_KEPT_IMG_ATTRS = ("alt", "class", "id")
_KEPT_ATTRS = ("class", "id")
_LISTS = ("ul", "ol", "dl")


def prune_attributes(item: etree._Element, rewrite: bool = False) -> None:
    """Keep ``class`` and ``id`` everywhere, plus ``src`` (unless a data URI) and ``alt`` on images.

    ``rewrite`` sets every kept value again even where nothing changes, as upstream does: then a value
    holding a character lxml refuses from Python (U+FFFE, U+FFFF, which upstream's round trip keeps)
    raises ``ValueError`` here as it does upstream, where that drops the item.
    """
    for element in item.iter(etree.Element):
        attrib = element.attrib
        if not attrib:
            continue
        items = attrib.items()
        if element.tag == "img":
            src = attrib.get("src", "").strip()
            kept = [("src", src)] if src and not src.startswith("data:image/") else []
            kept += [(name, attrib.get(name, "").strip()) for name in _KEPT_IMG_ATTRS]
        elif (
            not rewrite
            and len(items) == 1
            and items[0][0] in _KEPT_ATTRS
            and (value := items[0][1])
            and value.strip() == value
        ):
            continue  # the most common case: a lone class or id that is kept as it is
        else:
            kept = [(name, attrib.get(name, "").strip()) for name in _KEPT_ATTRS]
        kept = [(name, value) for name, value in kept if value]
        if rewrite or items != kept:  # most already hold exactly what is kept, in that order
            attrib.clear()
            attrib.update(kept)


def shorten_lists(item: etree._Element) -> None:
    """Show lists as first entry, ``<span>...</span>``, last entry (``dl``: first and last dt groups)."""
    # Top-down: lists in document order, each shortened before the lists inside it; a list that went with
    # a removed entry is skipped. Most items hold no list at all.
    lists = list(item.iter(*_LISTS))
    removed: set[etree._Element] = set()
    for element in lists:
        if removed and _inside(element, removed, item):
            continue
        children = list(element)
        if len(children) <= 2:
            continue
        if element.tag != "dl":
            for child in children[1:-1]:
                element.remove(child)
                removed.add(child)
            children[-1].addprevious(_list_ellipsis())
            continue
        terms = [index for index, child in enumerate(children) if child.tag == "dt"]
        if len(terms) > 1:
            first_group = children[terms[0] : terms[1]]
            last_group = children[terms[-1] :]
            for child in children:
                element.remove(child)
            removed.update(children[: terms[0]])
            removed.update(children[terms[1] : terms[-1]])
            element.extend(first_group)
            element.append(_list_ellipsis())
            element.extend(last_group)


def _inside(element: etree._Element, removed: set[etree._Element], item: etree._Element) -> bool:
    """Whether ``element`` is, or sits below, one of the ``removed`` subtrees (rather than in ``item``)."""
    node = element
    while node is not None and node is not item:
        if node in removed:
            return True
        node = node.getparent()
    return False


def _list_ellipsis() -> etree._Element:
    ellipsis = etree.Element("span")
    ellipsis.text = "..."
    return ellipsis


def has_content(item: etree._Element) -> bool:
    """Whether the item shows non-blank text or an image with a src.

    As upstream, an image counts by its src alone: text following an ``<img>`` (its tail) is not looked at.
    """
    for element in item.iter():
        if element.text and not element.text.isspace():
            return True
        if element.tag == "img":
            if element.get("src", "").strip():
                return True
        elif element is not item and element.tail and not element.tail.isspace():
            return True
    return False


def cut_text(item: etree._Element, max_length: int = CUTOFF_LENGTH) -> None:
    """Cut the item's visible text to ``max_length`` characters plus ``...``, dropping what follows.

    Text inside ``table`` and ``math`` is neither counted nor cut; tail text always counts (an upstream
    quirk kept for fidelity). At the cut, everything after it in document order is blanked and the
    following siblings of the cut node and of its ancestors are removed.
    """
    if sum(map(len, item.itertext())) <= max_length:  # all text and tails below: at least what counts
        return
    # (kind, node, text, can_cut) in document order. A frame is (node, excluded, parent_excluded,
    # closing); the closing frame emits the node's tail once its subtree is done.
    entries: list[tuple[str, etree._Element, str, bool]] = []
    total = 0
    # The item is cut as a tree of its own: what is around it in its document (its tail, its ancestors and
    # their siblings) is neither counted nor touched.
    stack = [(item, item.tag in UNCOUNTED_TEXT_TAGS, False, False)]
    while stack:
        node, excluded, parent_excluded, closing = stack.pop()
        if closing:
            if node.tail and node is not item:
                entries.append(("tail", node, node.tail, not parent_excluded))
                total += len(node.tail)
            continue
        if node.text and not excluded:
            entries.append(("text", node, node.text, True))
            total += len(node.text)
        stack.append((node, excluded, parent_excluded, True))
        for child in reversed(node):
            stack.append((child, excluded or child.tag in UNCOUNTED_TEXT_TAGS, excluded, False))
    if total <= max_length:
        return
    used = 0
    cut_done = False
    for kind, node, text, can_cut in entries:
        if cut_done:
            if kind == "text":
                node.text = None
            else:
                node.tail = None
            continue
        if used + len(text) <= max_length:
            used += len(text)
        elif can_cut:
            cut = text[: max_length - used] + ELLIPSIS
            if kind == "text":
                node.text = cut
            else:
                node.tail = cut
            used = max_length
            cut_done = True
            _drop_following(node, item)
        else:
            used += len(text)


def _drop_following(node: etree._Element, item: etree._Element) -> None:
    """Remove the following siblings of ``node`` and of each of its ancestors below ``item``."""
    while node is not item:
        parent = node.getparent()
        following = list(node.itersiblings())
        for sibling in following:
            parent.remove(sibling)
        node = parent
