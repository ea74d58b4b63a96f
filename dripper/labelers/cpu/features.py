"""Block features for the CPU labeler: what a block looks like, where it sits, and what surrounds it.

Every feature is computed from the page alone (no site or page-id rules) and is meant to transfer across
sites and languages: character-based text statistics (no word lists of one language), link density, the
tag path and the class/id/role vocabulary of the block and its ancestors (matched against a small list of
structural words: content, comment, footer, nav, sidebar, related…), position in the page, the text held
by the block's containers, repeated structures, and the same statistics for neighbouring blocks.

:func:`page_features` gives the first-stage matrix: the character statistics of ``text_stats.py``, the
class words of ``vocabulary.py``, the page-structure features of ``structure.py`` (templates that repeat,
the Readability-style top candidate and the main run's extent) and the block's own layout, in the columns
that ``feature_table.py`` lays out (:data:`FEATURE_NAMES`, :class:`PageFeatures`; both re-exported here).
:func:`~dripper.labelers.cpu.context.context_features` (re-exported here) adds, for the second stage,
the first stage's probabilities of the block's neighbours and containers.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from lxml import etree

from dripper.labelers.cpu.context import CONTEXT_FEATURE_NAMES, CONTEXT_LEVELS, context_features
from dripper.labelers.cpu.feature_table import (
    CONTAINER_LEVELS,
    CONTAINER_NAMES,
    FEATURE_INDEX,
    FEATURE_NAMES,
    NEIGHBOUR_NAMES,
    NEIGHBOUR_OFFSETS,
    SUBTREE_NAMES,
    PageFeatures,
)
from dripper.labelers.cpu.structure import STRUCTURE_FEATURE_NAMES, PageStructure, structure_features
from dripper.labelers.cpu.text_stats import TEXT_STAT_NAMES, WORD, text_stats
from dripper.labelers.cpu.vocabulary import (
    BLOCK_TAG_INDEX,
    BLOCK_TAGS,
    GROUP_BIT,
    GROUP_NAMES,
    HEADINGS,
    KEYWORD_GROUPS,
    NEGATIVE_BITS,
    SEMANTIC_BIT,
    SEMANTIC_TAGS,
    class_tokens,
    element_profiles,
)
from dripper.simplify.tags import ITEM_ID_ATTR
from dripper.types import SimplifiedPage

__all__ = [
    "CONTEXT_FEATURE_NAMES",
    "FEATURE_NAMES",
    "KEYWORD_GROUPS",
    "PageFeatures",
    "class_tokens",
    "context_features",
    "page_features",
]

# The item ids as attribute values (each with getparent()): a third faster than selecting the elements.
_ITEM_IDS = etree.XPath(f"//@{ITEM_ID_ATTR}")
_SUBTREE_TAGS = ("a", "img", "li", "td", "th", "input", "button", "select", "textarea", "br")


def _title_tokens(root) -> set[str]:
    title = next(root.iter("title"), None)
    if title is None or not title.text:
        return set()
    return {token.casefold() for token in WORD.findall(title.text)}


def _subtree_counts(element, text_length: float, inside_link: bool) -> tuple[float, ...]:
    tags = [node.tag for node in element.iter(_SUBTREE_TAGS)]
    if not tags:  # most blocks: running text without links, images, items or controls
        return (0, text_length if inside_link else 0, 0, 0, 0, 0, 0)
    n_links = tags.count("a")
    if inside_link:
        linked = text_length
    elif n_links:
        # the non-space characters of each link's text
        linked = sum(len("".join("".join(node.itertext()).split())) for node in element.iter("a"))
    else:
        linked = 0
    n_images, n_items, n_breaks = tags.count("img"), tags.count("li"), tags.count("br")
    n_cells = tags.count("td") + tags.count("th")
    n_forms = len(tags) - n_links - n_images - n_items - n_breaks - n_cells
    return (n_links, min(linked, text_length), n_images, n_items, n_cells, n_forms, n_breaks)


def page_features(page: SimplifiedPage) -> PageFeatures:
    """First-stage features of every block of ``page`` (deterministic; needs ``Block.text``).

    Args:
        page: A simplified page whose mapping view is at hand (``mapping_root()``).

    Returns:
        The page's :class:`PageFeatures` (zero rows for a page without blocks).
    """
    blocks = page.blocks
    n = len(blocks)
    levels = len(CONTEXT_LEVELS)
    values = np.zeros((n, len(FEATURE_NAMES)), dtype=np.float32)
    if n == 0:
        empty = np.zeros((0, levels), dtype=np.int32)
        return PageFeatures(values, np.zeros(0, np.float32), empty, np.zeros(0, np.int32))
    root = page.mapping_root()
    if page.block_elements is not None and page.mapping_tree is root:
        given = page.block_elements  # the simplifier's own: no search of the tree for the ids
    else:
        elements: dict[str, object] = {}
        for item_id in _ITEM_IDS(root):  # attribute values in document order; each knows its element
            elements.setdefault(str(item_id), item_id.getparent())
        given = [elements.get(str(block.item_id)) for block in blocks]
    texts = [block.text for block in blocks]
    stats, length, spaces = text_stats(texts)  # length: Latin-equivalent (CJK says as much in a third)
    chars = np.fromiter(map(len, texts), dtype=np.float64, count=n)
    total_chars = float(chars.sum()) or 1.0

    # One pass over the blocks: element, ancestor chain (as container ids, nearest first), subtree counts.
    # An ancestor met before ends the walk up: the rest of the chain is that ancestor's, already known.
    block_elements: list = []
    chains: list[list[int]] = []
    container_ids: dict[object, int] = {}
    container_nodes: list = []
    container_tags: list[str] = []
    above: list[list[int]] = []  # per container: its own ancestors' ids, nearest first
    tags: list[str] = []
    subtree = np.zeros((n, len(SUBTREE_NAMES)), dtype=np.float64)
    visible = (chars - spaces).tolist()
    for index, (block, element) in enumerate(zip(blocks, given, strict=True)):
        block_elements.append(element)
        if element is None:
            chains.append([])
            tags.append(block.tag or "")
            continue
        tags.append(element.tag)
        chain = []
        for ancestor in element.iterancestors():
            slot = container_ids.get(ancestor)
            if slot is not None:
                chain.append(slot)
                chain += above[slot]
                break
            slot = container_ids[ancestor] = len(container_nodes)
            container_nodes.append(ancestor)
            container_tags.append(ancestor.tag)
            above.append([])
            chain.append(slot)
        for distance, slot in enumerate(chain):
            if above[slot] or distance == len(chain) - 1:
                break  # from here on the chain is made of known containers
            above[slot] = chain[distance + 1 :]
        chains.append(chain)
        in_link = element.tag == "a" or any(container_tags[slot] == "a" for slot in chain[:3])
        subtree[index] = _subtree_counts(element, visible[index], in_link)
    # Link share over non-space characters (block text joins inline runs with or without a space).
    link_chars = subtree[:, 1].copy()
    subtree[:, 1] = link_chars / np.maximum(chars - spaces, 1.0)
    link_share = subtree[:, 1]
    sentence_share = stats[:, TEXT_STAT_NAMES.index("sentence_punct_share")]
    is_heading = np.array([tag in HEADINGS for tag in tags], dtype=np.float64)
    # "Dense" blocks: running text (some length, sentence punctuation, few links): where articles live.
    dense = (length >= 60) & (link_share < 0.5) & ((sentence_share > 0) | (length >= 200))
    dense_chars = np.where(dense, chars, 0.0)
    total_dense = float(dense_chars.sum()) or 1.0

    # The chains as (block, container, distance) pairs: the container statistics, the path matrices and
    # every other use of the chains below are numpy operations over these.
    n_containers = len(container_nodes)
    chain_lengths = np.fromiter(map(len, chains), dtype=np.int64, count=n)
    pair_block = np.repeat(np.arange(n), chain_lengths)
    pair_container = np.fromiter(itertools.chain.from_iterable(chains), dtype=np.int64, count=len(pair_block))
    chain_starts = np.cumsum(chain_lengths) - chain_lengths
    pair_distance = np.arange(len(pair_block)) - np.repeat(chain_starts, chain_lengths)
    under_text = np.bincount(pair_container, weights=chars[pair_block], minlength=n_containers)
    under_dense = np.bincount(pair_container, weights=dense_chars[pair_block], minlength=n_containers)
    under_blocks = np.bincount(pair_container, minlength=n_containers).astype(np.float64)
    under_links = np.bincount(pair_container, weights=link_chars[pair_block], minlength=n_containers)
    depths = chain_lengths.astype(np.float64)
    # Depth of each container = its distance from the root along any chain that holds it.
    container_depth = np.zeros(n_containers, dtype=np.int64)
    container_depth[pair_container] = chain_lengths[pair_block] - 1 - pair_distance
    # The best container: the deepest element holding at least 60 % of the page's dense text.
    best = -1
    if dense_chars.sum() > 0 and n_containers:
        holding = np.flatnonzero(under_dense >= 0.6 * total_dense)
        if holding.size:
            best = int(holding[np.argmax(container_depth[holding])])

    column = values.T  # column views: values[:, j] == column[j]
    tag_columns = np.array([BLOCK_TAG_INDEX.get(tag, len(BLOCK_TAGS)) for tag in tags])
    values[np.arange(n), tag_columns] = 1.0
    log_chars = np.log1p(length)
    column[FEATURE_INDEX["log_length"]] = log_chars
    column[FEATURE_INDEX["chars_page_share"]] = chars / total_chars
    column[FEATURE_INDEX["chars_rank"]] = np.argsort(np.argsort(chars, kind="stable"), kind="stable") / max(
        n - 1, 1
    )
    column[FEATURE_INDEX["log_length_vs_page"]] = log_chars - log_chars.mean()
    column[FEATURE_INDEX["chars_vs_max"]] = chars / (chars.max() or 1.0)
    start = FEATURE_INDEX[TEXT_STAT_NAMES[0]]
    values[:, start : start + len(TEXT_STAT_NAMES)] = stats
    start = FEATURE_INDEX[SUBTREE_NAMES[0]]
    values[:, start : start + len(SUBTREE_NAMES)] = subtree
    markup_tags = np.array([block.simplified_html.count("<") for block in blocks], dtype=np.float64)
    markup = np.array([len(block.simplified_html) for block in blocks], dtype=np.float64)
    column[FEATURE_INDEX["markup_per_char"]] = markup / (chars + 10.0)
    column[FEATURE_INDEX["log_markup_tags"]] = np.log1p(markup_tags)
    column[FEATURE_INDEX["empty_text"]] = chars == 0
    column[FEATURE_INDEX["depth"]] = depths
    column[FEATURE_INDEX["depth_vs_page"]] = depths - np.median(depths)
    column[FEATURE_INDEX["position"]] = np.arange(n) / max(n - 1, 1)
    column[FEATURE_INDEX["position_chars"]] = np.concatenate(([0.0], np.cumsum(chars)[:-1])) / total_chars

    text_counts: dict[str, int] = {}
    for text in texts:
        text_counts[text] = text_counts.get(text, 0) + 1
    column[FEATURE_INDEX["duplicate_text_count"]] = [text_counts[text] if text else 0 for text in texts]
    # Class/id/role words, templates and body markup of the containers and block elements, in one pass
    # over each element's attributes.
    templates: dict[str, int] = {}
    bits, container_templates, container_body = element_profiles(container_nodes, templates)
    block_bits, block_templates, block_body = element_profiles(block_elements, templates)
    # A block's signature (its template and its parent's, tag and class words) as a pair of template ids:
    # distinct pairs for distinct signatures, numbered in order of first appearance.
    signature_ids: dict[object, int] = {}
    signatures = np.array(
        [
            signature_ids.setdefault(
                "?" if element is None else (template, container_templates[chain[0]] if chain else -1),
                len(signature_ids),
            )
            for element, template, chain in zip(block_elements, block_templates, chains, strict=True)
        ],
        dtype=np.int32,
    )
    column[FEATURE_INDEX["signature_count_log"]] = np.log(np.bincount(signatures)[signatures])
    column[FEATURE_INDEX["signature_text_share"]] = (
        np.bincount(signatures, weights=chars)[signatures] / total_chars
    )
    column[FEATURE_INDEX["signature_dense_share"]] = (
        np.bincount(signatures, weights=dense_chars)[signatures] / total_dense
    )
    title = _title_tokens(root)
    if title:
        overlap = []
        for text in texts:
            words = {word.casefold() for word in set(WORD.findall(text[:300]))} if text else None
            if words:
                shared = len(words & title)
                overlap.append(shared / max(len(words) + len(title) - shared, 1))  # Jaccard
            else:
                overlap.append(0.0)
        column[FEATURE_INDEX["title_overlap"]] = overlap
    first_h1 = next((index for index, tag in enumerate(tags) if tag == "h1"), -1)
    if first_h1 >= 0:
        column[FEATURE_INDEX["after_first_h1"]] = np.sign(np.arange(n) - first_h1)
        column[FEATURE_INDEX["blocks_from_first_h1"]] = (np.arange(n) - first_h1) / n
    column[FEATURE_INDEX["dense"]] = dense
    # Where the running text is: the share of it before the block, and how far the nearest dense block is.
    column[FEATURE_INDEX["dense_before"]] = (np.cumsum(dense_chars) - dense_chars) / total_dense
    dense_at = np.flatnonzero(dense)
    if dense_at.size:
        slots = np.searchsorted(dense_at, np.arange(n))
        left = dense_at[np.clip(slots - 1, 0, dense_at.size - 1)]
        right = dense_at[np.clip(slots, 0, dense_at.size - 1)]
        nearest = np.minimum(np.abs(np.arange(n) - left), np.abs(right - np.arange(n)))
        column[FEATURE_INDEX["blocks_to_dense"]] = np.log1p(nearest)
    else:
        column[FEATURE_INDEX["blocks_to_dense"]] = -1.0

    # Class/id/role vocabulary and semantic tags of the block and its ancestors, nearest first, as
    # 1 / (1 + distance) of the nearest match.
    n_groups, n_semantic = len(GROUP_NAMES), len(SEMANTIC_TAGS)
    # Path matrix, nearest first: the block's own element, then its ancestors (-1 past the root).
    width = int(depths.max()) + 1
    path = np.full((n, width), -1, dtype=np.int64)
    path[pair_block, 1 + pair_distance] = pair_container
    node_bits = np.array(bits + [0], dtype=np.int64)
    node_semantic = np.array([SEMANTIC_BIT.get(tag, 0) for tag in container_tags] + [0], np.int64)
    path_bits = node_bits[path]
    path_semantic = node_semantic[path]
    path_bits[:, 0] = block_bits
    path_semantic[:, 0] = [SEMANTIC_BIT.get(tag, 0) for tag in tags]
    nearness = 1.0 / (1.0 + np.arange(width))
    _nearest_match(path_bits, n_groups, nearness, values, FEATURE_INDEX[f"kw_{GROUP_NAMES[0]}"])
    _nearest_match(path_semantic, n_semantic, nearness, values, FEATURE_INDEX[f"anc_{SEMANTIC_TAGS[0]}"])
    start = FEATURE_INDEX[f"kw_self_{GROUP_NAMES[0]}"]
    values[:, start : start + n_groups] = (path_bits[:, :1] >> np.arange(n_groups)) & 1

    # Containers at fixed levels: padded matrix of ancestor ids (-1 above the root).
    max_level = max(max(CONTAINER_LEVELS), max(CONTEXT_LEVELS))
    ancestors = np.full((n, max_level), -1, dtype=np.int64)
    near = pair_distance < max_level
    ancestors[pair_block[near], pair_distance[near]] = pair_container[near]
    child_counts = np.array([len(node) for node in container_nodes], dtype=np.float64)
    page_link = float(link_chars.sum()) / total_chars
    for level in CONTAINER_LEVELS:
        base = FEATURE_INDEX[f"c{level}_{CONTAINER_NAMES[0]}"]
        ids = ancestors[:, level - 1]
        valid = ids >= 0
        safe = np.where(valid, ids, 0)
        if n_containers:
            text_under = under_text[safe]
            column[base] = np.where(valid, text_under / total_chars, 1.0)
            column[base + 1] = np.where(valid, under_dense[safe] / total_dense, 1.0)
            column[base + 2] = np.where(valid, under_blocks[safe] / n, 1.0)
            column[base + 3] = np.where(valid, under_links[safe] / np.maximum(text_under, 1.0), page_link)
            column[base + 4] = np.where(valid, np.log1p(child_counts[safe]), 0.0)
        else:
            values[:, base : base + 4] = (1.0, 1.0, 1.0, page_link)
    containers = np.stack([ancestors[:, level - 1] for level in CONTEXT_LEVELS], axis=1).astype(np.int32)
    if best >= 0:
        distance = np.full(n, -1.0)  # a chain holds each container at most once
        holds = pair_container == best
        distance[pair_block[holds]] = pair_distance[holds] + 1
        column[FEATURE_INDEX["best_container_inside"]] = distance > 0
        column[FEATURE_INDEX["best_container_distance"]] = distance

    # Neighbours: a few statistics of the blocks around, and the tree distance to them (edges through the
    # lowest common ancestor, from root-first paths padded so that no padding matches).
    own = np.stack([log_chars, link_share, sentence_share, is_heading], axis=1)
    width = int(depths.max()) if n else 0
    root_first = np.full((n, max(width, 1)), -2, dtype=np.int64)
    root_first[pair_block, chain_lengths[pair_block] - 1 - pair_distance] = pair_container
    root_first_other = np.where(root_first == -2, -3, root_first)
    for offset in NEIGHBOUR_OFFSETS:
        base = FEATURE_INDEX[f"n{offset:+d}_{NEIGHBOUR_NAMES[0]}"]
        block = np.full((n, 5), -1.0)
        if abs(offset) < n:
            this = slice(max(0, -offset), n - max(0, offset))
            other = slice(max(0, offset), n - max(0, -offset))
            block[this, :4] = own[other]
            same = root_first[this] == root_first_other[other]
            common = np.where(same.all(axis=1), same.shape[1], same.argmin(axis=1))
            block[this, 4] = depths[this] + depths[other] - 2 * common + 2
        values[:, base : base + 5] = block

    column[FEATURE_INDEX["page_log_blocks"]] = math.log1p(n)
    column[FEATURE_INDEX["page_log_length"]] = math.log1p(float(length.sum()))
    column[FEATURE_INDEX["page_link_share"]] = page_link
    column[FEATURE_INDEX["page_dense_share"]] = float(dense_chars.sum()) / total_chars
    column[FEATURE_INDEX["page_n_articles"]] = math.log1p(sum(1 for _ in root.iter("article")))
    column[FEATURE_INDEX["page_n_h1"]] = sum(tag == "h1" for tag in tags)
    column[FEATURE_INDEX["page_heading_share"]] = float(is_heading.mean())
    column[FEATURE_INDEX["page_max_share"]] = float(chars.max()) / total_chars
    structure = PageStructure(
        block_elements=block_elements,
        container_nodes=container_nodes,
        container_depth=container_depth,
        ancestors=ancestors,
        pair_block=pair_block,
        pair_container=pair_container,
        pair_distance=pair_distance,
        path=path,
        keyword_bits=node_bits,
        templates=templates,
        container_templates=np.array(container_templates, dtype=np.int64),
        block_templates=np.array(block_templates, dtype=np.int64),
        container_body=np.array(container_body + [False], dtype=bool),
        block_body=np.array(block_body, dtype=bool),
        content_bit=GROUP_BIT["content"],
        negative_bits=NEGATIVE_BITS,
        tags=tags,
        chars=chars,
        length=length,
        commas=stats[:, TEXT_STAT_NAMES.index("comma_share")] * chars,
        link_share=link_share,
        is_heading=is_heading.astype(bool),
    )
    start = FEATURE_INDEX[STRUCTURE_FEATURE_NAMES[0]]
    values[:, start : start + len(STRUCTURE_FEATURE_NAMES)] = structure_features(structure)
    return PageFeatures(values, chars.astype(np.float32), containers, signatures)


def _nearest_match(bits: np.ndarray, n_bits: int, nearness: np.ndarray, out: np.ndarray, start: int) -> None:
    """For each bit, ``nearness`` of the first path position that has it (0 where none does)."""
    n, width = bits.shape
    unpacked = np.unpackbits(
        bits.astype("<u4").view(np.uint8).reshape(n, width, 4), axis=2, bitorder="little"
    )[:, :, :n_bits]
    first = unpacked.argmax(axis=1)
    out[:, start : start + n_bits] = np.where(unpacked.any(axis=1), nearness[first], 0.0)
