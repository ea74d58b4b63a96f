"""Page-structure features of the CPU labeler's first stage: where the article is, and what repeats around it.

The losses of the earlier model were mostly regions that look like text but are not the article: teaser
cards of related stories after it, reader comments, and boxes whose items repeat one template. These
features describe such regions from the page's own structure, in any language:

- ``item_body``: the block sits in an element marked up as the article's body (schema.org
  ``itemprop=articleBody``, ``text`` or ``reviewBody``); ``page_has_item_body`` says whether the page marks
  one at all (outside it, then, is not the body).
- ``repeat_max_log`` / ``repeat_level``: the most siblings sharing one template (tag and class words) among
  the block and its nearest ancestors, and how near that repeated element is: cards, list items, comments.
- ``nested_repeats``: how many of the block's ancestors repeat a template of a deeper ancestor (threads of
  replies nest one comment template in another).
- ``link_title`` and ``c2_link_titles``/``c4_link_titles``: headline-like links (a heading or short text that
  is almost all link) and how many the block's containers hold: a container of several is a teaser list.
- ``in_candidate``, ``in_candidate_group``, ``candidate_text_share``: the Readability-style top candidate
  (paragraph scores given to parents and grandparents, weighted by class words and link density; as in
  Readability, paragraphs inside an element whose class words say comment, sidebar, footer… and not
  content are not scored), and the siblings Readability would add to it.
- ``after_candidate`` / ``before_candidate``: how far (in blocks, over the page's blocks) the block lies past
  the last block of the candidate or before its first: the main run's extent.
- ``group_repeat_log``, ``group_text_share``, ``text_before_group_share``, ``candidate_in_group``: the block's
  repeated group (the siblings sharing the classed template of its nearest element that repeats at least
  three times: the comments of a thread, the posts of a forum, the cards of a teaser list), how much of the
  page's text the group holds and precedes it, and how much of the Readability candidate lies inside it:
  replies under an article are a group after most of the text and outside the candidate; a forum's posts
  are the candidate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["STRUCTURE_FEATURE_NAMES", "PageStructure", "structure_features"]

STRUCTURE_FEATURE_NAMES: tuple[str, ...] = (
    "item_body",
    "page_has_item_body",
    "repeat_max_log",
    "repeat_level",
    "nested_repeats",
    "link_title",
    "c2_link_titles",
    "c4_link_titles",
    "in_candidate",
    "in_candidate_group",
    "candidate_text_share",
    "after_candidate",
    "before_candidate",
    "group_repeat_log",
    "group_text_share",
    "text_before_group_share",
    "candidate_in_group",
)

_REPEAT_LEVELS = 5  # the block's element and its four nearest ancestors
_GROUP_REPEAT = 3  # siblings of one classed template that make a repeated group
# Readability's class weight and tag bonuses (readability.js initializeNode / getClassWeight).
_CLASS_WEIGHT = 25.0
_TAG_BONUS = {"div": 5.0, "pre": 3.0, "td": 3.0, "blockquote": 3.0, "article": 5.0, "section": 2.0}
_TAG_MALUS = {"form": -3.0, "ol": -3.0, "ul": -3.0, "dl": -3.0, "li": -3.0, "th": -5.0, "address": -3.0}
for _level in range(1, 7):
    _TAG_MALUS[f"h{_level}"] = -5.0
_TAG_SCORE = {tag: _TAG_BONUS.get(tag, 0.0) + _TAG_MALUS.get(tag, 0.0) for tag in {*_TAG_BONUS, *_TAG_MALUS}}
_CANDIDATE_SIBLING_SHARE = 0.2  # siblings scoring this share of the top are added (as Readability does)


@dataclass(slots=True)
class PageStructure:
    """What :func:`~dripper.labelers.cpu.features.page_features` knows of a page's tree.

    Attributes:
        block_elements: Each block's element in the mapping view (``None`` when not found).
        container_nodes: The ancestors of the blocks, by container id.
        container_depth: Depth of each container (0 = root).
        ancestors: ``(n, levels)`` container id of each block's ancestor at level 1, 2… (-1 above the root).
        pair_block, pair_container, pair_distance: Each (block, ancestor) pair of the chains, with the
            ancestor's distance (0 = parent).
        path: ``(n, width)`` the block's element (column 0: -1, it is not a container) then its ancestors'
            container ids, nearest first (-1 past the root).
        templates: Template names (tag and class words) → ids, of the containers and block elements.
        container_templates, block_templates: Template id of each container and block element (-1: none).
        container_body, block_body: Marked up as the article body (schema.org ``itemprop``); the
            containers' has one extra ``False`` at the end for -1.
        keyword_bits: Class-word group bits of each container (``KEYWORD_GROUPS`` order), one extra 0 at
            the end for -1.
        content_bit, negative_bits: The bits of the ``content`` group and of the groups Readability
            penalises (comment, footer, nav, sidebar, related, share, ad).
        tags: Each block element's tag.
        chars, length: Visible characters per block (and Latin-equivalent length).
        commas: Comma-like characters per block.
        link_share: Share of the block's text inside links.
        is_heading: h1–h6 blocks.
    """

    block_elements: list
    container_nodes: list
    container_depth: np.ndarray
    ancestors: np.ndarray
    pair_block: np.ndarray
    pair_container: np.ndarray
    pair_distance: np.ndarray
    path: np.ndarray
    templates: dict[str, int]
    container_templates: np.ndarray
    block_templates: np.ndarray
    container_body: np.ndarray
    block_body: np.ndarray
    keyword_bits: np.ndarray
    content_bit: int
    negative_bits: int
    tags: list[str]
    chars: np.ndarray
    length: np.ndarray
    commas: np.ndarray
    link_share: np.ndarray
    is_heading: np.ndarray


def structure_features(page: PageStructure) -> np.ndarray:
    """``(n_blocks, len(STRUCTURE_FEATURE_NAMES))`` float64 features (see the module docstring)."""
    n = len(page.tags)
    out = np.zeros((n, len(STRUCTURE_FEATURE_NAMES)), dtype=np.float64)
    nodes = page.container_nodes
    n_containers = len(nodes)
    column = {name: index for index, name in enumerate(STRUCTURE_FEATURE_NAMES)}

    # Templates of every container and block element, and how many siblings share each (among the
    # elements that hold or are blocks: the rest of the page does not change what repeats around text).
    templates = page.templates
    container_template, block_template = page.container_templates, page.block_templates
    body_container, body_block = page.container_body, page.block_body
    # A container's parent is the next container of any chain holding it.
    container_parent = np.full(n_containers, -1, dtype=np.int64)
    if len(page.pair_block) > 1:
        same = page.pair_block[1:] == page.pair_block[:-1]
        container_parent[page.pair_container[:-1][same]] = page.pair_container[1:][same]
    block_parent = page.ancestors[:, 0] if page.ancestors.shape[1] else np.full(n, -1, dtype=np.int64)
    # Siblings: same parent and template, counted over containers and block elements together.
    n_templates = max(len(templates), 1)
    parents = np.concatenate([container_parent, block_parent])
    keys = parents * n_templates + np.concatenate([container_template, block_template])
    known = (parents >= 0) & (keys >= 0)
    unique, inverse, counts = np.unique(keys[known], return_inverse=True, return_counts=True)
    repeat = np.ones(len(keys), dtype=np.float64)
    repeat[known] = counts[inverse]
    container_repeat = np.append(repeat[:n_containers], 1.0)  # -1 (above the root): no repeat
    block_repeat = repeat[n_containers:]
    levels = min(_REPEAT_LEVELS - 1, page.ancestors.shape[1])
    repeats = np.concatenate([block_repeat[:, None], container_repeat[page.ancestors[:, :levels]]], axis=1)
    best_level = repeats.argmax(axis=1)
    out[:, column["repeat_max_log"]] = np.log(repeats.max(axis=1))
    out[:, column["repeat_level"]] = np.where(repeats.max(axis=1) > 1, 1.0 / (1.0 + best_level), 0.0)

    # Whether each template has class words (one extra False at the end, for -1: no template).
    classed = np.array([not key.endswith(".") for key in templates] + [False], dtype=bool)
    # Nested templates: ancestors whose template is that of a deeper ancestor (one comment in another).
    width = page.path.shape[1] - 1
    if width > 0 and n_containers:
        chain_templates = np.where(page.path[:, 1:] >= 0, container_template[page.path[:, 1:]], -1)
        ordered = np.sort(chain_templates, axis=1)
        repeated = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
        # Templates of plain wrappers (div without class words) repeat in every page: only count classed ones.
        repeated &= classed[np.maximum(ordered[:, 1:], 0)]
        out[:, column["nested_repeats"]] = repeated.sum(axis=1)

    # Schema.org body markup on the block's element or an ancestor.
    if body_container.any() or body_block.any():
        inside = body_block.copy()
        holds = body_container[page.pair_container]
        inside[page.pair_block[holds]] = True
        out[:, column["item_body"]] = inside
        out[:, column["page_has_item_body"]] = 1.0

    # Headline-like links and how many of them the block's containers hold.
    link_title = (page.link_share > 0.6) & (page.length >= 10) & ((page.length <= 200) | page.is_heading)
    out[:, column["link_title"]] = link_title
    if n_containers:
        under = np.bincount(page.pair_container, weights=link_title[page.pair_block], minlength=n_containers)
        for level, name in ((2, "c2_link_titles"), (4, "c4_link_titles")):
            if page.ancestors.shape[1] >= level:
                ids = page.ancestors[:, level - 1]
                out[:, column[name]] = np.where(ids >= 0, np.log1p(under[np.maximum(ids, 0)]), 0.0)

    group = _repeated_groups(page, out, column, repeats, classed, container_parent, block_parent, levels)
    _candidate(page, out, column, container_parent, group)
    return out


def _repeated_groups(
    page: PageStructure,
    out: np.ndarray,
    column: dict[str, int],
    repeats: np.ndarray,
    classed: np.ndarray,
    container_parent: np.ndarray,
    block_parent: np.ndarray,
    levels: int,
) -> np.ndarray:
    """Each block's repeated group (-1: none) and the group features but ``candidate_in_group``."""
    n = len(page.tags)
    n_templates = max(len(page.templates), 1)
    # Level 0 is the block's element, level k its k-th ancestor: parent and template of each.
    parents = [block_parent]
    templates = [page.block_templates]
    for level in range(levels):
        ids = page.ancestors[:, level]
        safe = np.maximum(ids, 0)
        parents.append(np.where(ids >= 0, container_parent[safe], -1))
        templates.append(np.where(ids >= 0, page.container_templates[safe], -1))
    parent_at = np.stack(parents, axis=1)
    template_at = np.stack(templates, axis=1)
    eligible = (repeats >= _GROUP_REPEAT) & (parent_at >= 0) & (template_at >= 0) & classed[template_at]
    has_group = eligible.any(axis=1)
    nearest = eligible.argmax(axis=1)
    rows = np.arange(n)
    keys = np.where(has_group, parent_at[rows, nearest] * n_templates + template_at[rows, nearest], -1)
    group = np.full(n, -1, dtype=np.int64)
    if has_group.any():
        _, group[has_group] = np.unique(keys[has_group], return_inverse=True)
        n_groups = int(group.max()) + 1
        chars = page.chars.astype(np.float64)
        total = float(chars.sum()) or 1.0
        member = group >= 0
        group_chars = np.bincount(group[member], weights=chars[member], minlength=n_groups)
        first = np.full(n_groups, n, dtype=np.int64)
        np.minimum.at(first, group[member], rows[member])
        before = np.concatenate([[0.0], np.cumsum(chars)])[first]
        out[member, column["group_repeat_log"]] = np.log(repeats[rows, nearest][member])
        out[member, column["group_text_share"]] = group_chars[group[member]] / total
        out[member, column["text_before_group_share"]] = before[group[member]] / total
    return group


def _candidate(
    page: PageStructure,
    out: np.ndarray,
    column: dict[str, int],
    container_parent: np.ndarray,
    repeated_group: np.ndarray,
) -> None:
    """The Readability-style top candidate and its siblings: which blocks it holds, where it ends."""
    n_containers = len(page.container_nodes)
    n = len(page.tags)
    if not n_containers or page.ancestors.shape[1] < 2:
        return
    # Paragraph scores: blocks of some length, 1 + commas + a point per 100 characters (at most 3).
    eligible = (page.length >= 25) & ~page.is_heading
    # Readability first drops the unlikely candidates: elements whose own class words are of a negative
    # group (comments, sidebars, footers…) and not of the content group, with all they hold.
    bits = page.keyword_bits[:n_containers]
    unlikely = ((bits & page.negative_bits) != 0) & ((bits & page.content_bit) == 0)
    if unlikely.any():
        dropped = np.bincount(page.pair_block[unlikely[page.pair_container]], minlength=n) > 0
        eligible &= ~dropped
    score = np.where(eligible, 1.0 + page.commas + np.minimum(page.length / 100.0, 3.0), 0.0)
    node_score = np.zeros(n_containers + 1)
    for level, share in ((0, 1.0), (1, 0.5)):
        ids = page.ancestors[:, level]
        valid = ids >= 0
        node_score[:n_containers] += np.bincount(
            ids[valid], weights=score[valid] * share, minlength=n_containers
        )
    scored = node_score[:n_containers] > 0
    initial = np.zeros(n_containers)
    nodes = page.container_nodes
    for slot in np.flatnonzero(scored).tolist():  # only scored containers can be the candidate
        initial[slot] = _TAG_SCORE.get(nodes[slot].tag, 0.0)
    initial += np.where(bits & page.content_bit, _CLASS_WEIGHT, 0.0)
    initial -= np.where(bits & page.negative_bits, _CLASS_WEIGHT, 0.0)
    under_chars = np.bincount(
        page.pair_container, weights=page.chars[page.pair_block], minlength=n_containers
    )
    under_links = np.bincount(
        page.pair_container, weights=(page.chars * page.link_share)[page.pair_block], minlength=n_containers
    )
    link_density = under_links / np.maximum(under_chars, 1.0)
    final = np.where(scored, (node_score[:n_containers] + initial) * (1.0 - link_density), -np.inf)
    top = int(np.argmax(final))
    if not np.isfinite(final[top]) or final[top] <= 0:
        return
    holds = page.pair_container == top
    inside = np.zeros(n, dtype=bool)
    inside[page.pair_block[holds]] = True
    distance = np.full(n, -1.0)
    distance[page.pair_block[holds]] = page.pair_distance[holds] + 1
    out[:, column["in_candidate"]] = np.where(inside, 1.0 / distance.clip(min=1.0), 0.0)
    # Siblings of the top candidate (same parent) scoring at least a fifth of it join it.
    chosen = inside.copy()
    parent = container_parent[top]
    if parent >= 0:
        threshold = max(10.0, _CANDIDATE_SIBLING_SHARE * final[top])
        siblings = np.flatnonzero((container_parent == parent) & (final >= threshold))
        chosen[page.pair_block[np.isin(page.pair_container, siblings)]] = True
    out[:, column["in_candidate_group"]] = chosen
    total = float(page.chars.sum()) or 1.0
    out[:, column["candidate_text_share"]] = float(page.chars[chosen].sum()) / total
    members = np.flatnonzero(chosen)
    candidate_chars = float(page.chars[chosen].sum())
    grouped = repeated_group >= 0
    if candidate_chars and grouped.any():
        inside_chars = np.bincount(
            repeated_group[grouped],
            weights=(page.chars * chosen)[grouped].astype(np.float64),
            minlength=int(repeated_group.max()) + 1,
        )
        out[grouped, column["candidate_in_group"]] = inside_chars[repeated_group[grouped]] / candidate_chars
    if members.size:
        positions = np.arange(n)
        out[:, column["after_candidate"]] = np.maximum(positions - members[-1], 0) / n
        out[:, column["before_candidate"]] = np.maximum(members[0] - positions, 0) / n
