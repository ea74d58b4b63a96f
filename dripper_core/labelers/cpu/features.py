"""Block features for the CPU labeler: what a block looks like, where it sits, and what surrounds it.

Every feature is computed from the page alone (no site or page-id rules) and is meant to transfer across
sites and languages: character-based text statistics (no word lists of one language), link density, the
tag path and the class/id/role vocabulary of the block and its ancestors (matched against a small list of
structural words: content, comment, footer, nav, sidebar, related…), position in the page, the text held
by the block's containers, repeated structures, and the same statistics for neighbouring blocks.

:func:`page_features` gives the first-stage matrix; :func:`context_features` adds, for the second stage,
the first stage's probabilities of the block's neighbours and containers (collective smoothing: a block in
a container whose other blocks are main is likely main).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from lxml import etree

from dripper_core.simplify.tags import ITEM_ID_ATTR, TEXT_RUN_TAG
from dripper_core.types import SimplifiedPage

__all__ = [
    "CONTEXT_FEATURE_NAMES",
    "FEATURE_NAMES",
    "KEYWORD_GROUPS",
    "PageFeatures",
    "class_tokens",
    "context_features",
    "page_features",
]

# -- vocabulary -------------------------------------------------------------------------------------------

#: Structural words of class/id/role/itemprop values, grouped by what they say about a region. Tokens are
#: matched whole (after a plural ``s`` is dropped); words of four letters or more also as the head or tail
#: of a compound token (``commentlist``, ``sidebarleft``, ``postcontent``).
KEYWORD_GROUPS: dict[str, tuple[str, ...]] = {
    "content": (
        "content", "article", "post", "entry", "story", "body", "text", "main", "blog", "news", "prose",
        "markdown", "richtext", "rte", "articlebody", "single", "page", "detail", "copy", "maincontent",
    ),
    "comment": ("comment", "reply", "replie", "respond", "discussion", "disqus", "feedback", "review"),
    "nav": ("nav", "navbar", "navigation", "menu", "breadcrumb", "pagination", "pager", "submenu", "skip"),
    "footer": ("footer", "foot", "copyright", "bottom", "legal", "contentinfo", "colophon"),
    "header": ("header", "masthead", "topbar", "banner", "top", "logo", "brand", "branding"),
    "sidebar": ("sidebar", "aside", "widget", "rail", "side", "complementary", "secondary", "column"),
    "related": (
        "related", "recommend", "recommended", "popular", "trending", "similar", "teaser", "promo",
        "sponsor", "sponsored", "outbrain", "taboola", "more", "readmore", "also", "latest", "recent", "next",
        "prev", "previous",
    ),
    "share": ("share", "sharing", "social", "follow", "facebook", "twitter", "print", "email", "whatsapp"),
    "ad": ("ad", "ads", "advert", "advertisement", "adsense", "dfp", "banner-ad", "commercial", "affiliate"),
    "byline": ("author", "byline", "date", "time", "meta", "published", "posted", "dateline", "timestamp"),
    "title": ("title", "headline", "heading", "h1", "name", "subtitle", "headline-text"),
    "media": ("caption", "figure", "figcaption", "credit", "image", "img", "photo", "media", "gallery", "video"),
    "overlay": (
        "cookie", "consent", "modal", "popup", "overlay", "newsletter", "subscribe", "signup", "login",
        "register", "gdpr", "paywall", "dialog", "alert", "notice",
    ),
    "tags": ("tag", "category", "categorie", "label", "topic", "keyword", "taxonomy"),
    "hidden": ("hidden", "hide", "sr-only", "screen-reader", "visually-hidden", "invisible", "collapse"),
    "product": ("product", "price", "description", "desc", "spec", "rating", "summary", "feature", "offer"),
    "listing": ("list", "item", "card", "grid", "result", "tile", "feed", "listing", "collection", "archive"),
    "forum": ("thread", "message", "forum", "question", "answer", "postbody", "usercontent", "bbcode"),
    "form": ("search", "form", "input", "filter", "button", "btn", "select", "checkbox"),
    "docs": ("doc", "documentation", "api", "reference", "toc", "section", "chapter", "manual", "guide"),
    "intro": ("intro", "lead", "lede", "abstract", "standfirst", "excerpt", "teaser-text", "dek"),
}  # fmt: skip
_GROUP_NAMES = tuple(KEYWORD_GROUPS)
_EXACT: dict[str, int] = {}
for _bit, _words in enumerate(KEYWORD_GROUPS.values()):
    for _word in _words:
        _EXACT[_word] = _EXACT.get(_word, 0) | (1 << _bit)
_COMPOUND_PART = 4  # shortest known word recognised as the head or tail of a compound token

#: Semantic tags whose presence on the block or an ancestor is a feature (h1–h6 count as one).
SEMANTIC_TAGS = (
    "article", "main", "nav", "header", "footer", "aside", "form", "li", "table", "blockquote", "figure",
    "section", "a", "button", "dl", "pre", "heading", "p", "span", "td", "label", "select",
)  # fmt: skip
_SEMANTIC_BIT = {tag: 1 << bit for bit, tag in enumerate(SEMANTIC_TAGS)}
for _level in range(1, 7):
    _SEMANTIC_BIT[f"h{_level}"] = _SEMANTIC_BIT["heading"]

#: Block element tags given their own indicator (others: ``tag_other``).
BLOCK_TAGS = (
    "p", "div", TEXT_RUN_TAG, "h1", "h2", "h3", "h4", "h5", "h6", "li", "ul", "ol", "table", "td", "tr", "pre",
    "blockquote", "dl", "dd", "dt", "figure", "figcaption", "span", "a", "section", "article", "noscript",
    "img", "form", "header", "footer", "address", "center", "font", "b", "strong", "time", "label",
)  # fmt: skip
_BLOCK_TAG_INDEX = {tag: index for index, tag in enumerate(BLOCK_TAGS)}
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_FORM_TAGS = frozenset({"input", "button", "select", "textarea", "option", "form"})
_CELL_TAGS = frozenset({"td", "th"})
_ATTRIBUTES = frozenset(("class", "id", "role", "itemprop", "itemtype", "aria-label", "data-testid"))

# -- text statistics --------------------------------------------------------------------------------------

# Character classes, counted over the code points of all blocks at once (one table lookup and one bincount per
# page). They are the classes of the UTF-8 bytes the first model was trained on: ASCII classes exactly,
# non-ASCII letters by the lead byte their UTF-8 form would have (C3-DF: U+00C0-U+07FF, two-byte scripts
# such as Latin, Greek, Cyrillic, Arabic, Hebrew; E3-ED: U+3000-U+DFFF, kana, CJK ideographs, Hangul, and
# lone surrogates), and the wide punctuation marks of CJK text with their ASCII counterparts.
_UPPER, _LOWER, _DIGIT, _SPACE, _SENTENCE, _COMMA, _SEPARATOR, _BRACKET, _TWO_BYTE, _CJK = range(1, 11)
_N_CLASSES = 11  # class 0: anything else
_CODE_CLASS = np.zeros(0x10000, dtype=np.int32)  # code points above U+FFFF are class 0 (clipped to U+FFFF)
_CODE_CLASS[0xC0:0x800] = _TWO_BYTE
_CODE_CLASS[0x3000:0xE000] = _CJK
for _class, _members in (
    (_UPPER, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    (_LOWER, "abcdefghijklmnopqrstuvwxyz"),
    (_DIGIT, "0123456789"),
    (_SPACE, " "),
    # The full stop and the ideographic comma are counted as punctuation only (not as CJK letters).
    (_SENTENCE, ".!?;。！？…；"),
    (_COMMA, ",:，、："),
    (_SEPARATOR, "|/>\\-_=+*#@~•·»«›‹–—©→｜"),
    (_BRACKET, "()[]{}"),
):
    _CODE_CLASS[[ord(char) for char in _members]] = _class
_WORD = re.compile(r"\w+")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_TOKEN_SPLIT = re.compile(r"[^a-z0-9]+")
_DIGIT_RUN = re.compile(r"\d+")
_SENTENCE_END_CHARS = frozenset(".!?。！？…;；:")

_TEXT_STAT_NAMES = (
    "letter_share", "upper_share", "digit_share", "space_share", "sentence_punct_share", "comma_share",
    "separator_share", "bracket_share", "cjk_share", "log_words", "mean_word_length",
    "ends_with_sentence_punct", "starts_upper", "sentences_log",
)  # fmt: skip


def _class_counts(texts: list[str]) -> np.ndarray:
    """``(len(texts), _N_CLASSES)`` counts of each character class in each text."""
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    codes = np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), dtype="<u4")
    classes = _CODE_CLASS[np.minimum(codes, 0xFFFF)]
    classes += np.repeat(np.arange(len(texts), dtype=np.int32) * _N_CLASSES, lengths)
    return np.bincount(classes, minlength=len(texts) * _N_CLASSES).reshape(len(texts), _N_CLASSES)


def _text_stats(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Character statistics of every block's text (shares of character classes, word and sentence counts).

    Returns:
        ``(stats, length, spaces)``: ``(n, len(_TEXT_STAT_NAMES))`` statistics (zeros for an empty text), each
        text's length in Latin-equivalent characters (a CJK character counts three) and its spaces.
    """
    counts = _class_counts(texts).astype(np.float64)
    n = counts.sum(axis=1)
    upper, lower, digits, spaces, sentence, comma, separators, brackets, two_byte, cjk = counts[:, 1:].T
    letters = upper + lower + two_byte + cjk
    words = np.where(cjk * 2 < letters, spaces + 1, np.maximum(1, cjk // 2))
    some = np.maximum(n, 1)  # empty texts: every share is 0
    stats = np.stack(
        [
            letters / some,
            upper / np.maximum(letters, 1),
            digits / some,
            spaces / some,
            sentence / some,
            comma / some,
            separators / some,
            brackets / some,
            cjk / np.maximum(letters, 1),
            # math.log1p, as the model's training features (numpy's may differ in the last bit)
            [math.log1p(value) for value in words.tolist()],
            (n - spaces) / words,  # mean word length (in CJK text: about 2)
            [float(text[-1] in _SENTENCE_END_CHARS) if text else 0.0 for text in texts],
            [float(text[0].isupper() or text[0].isdigit()) if text else 0.0 for text in texts],
            [math.log1p(value) for value in sentence.tolist()],
        ],
        axis=1,
    )
    empty = n == 0
    stats[empty] = 0.0
    return stats, np.where(empty, 0.0, n + 2 * cjk), spaces


def class_tokens(value: str) -> list[str]:
    """Lower-case tokens of a class/id value: split at camel case, non-alphanumerics and digit runs."""
    value = _CAMEL.sub(" ", value).lower()
    return [token for token in _TOKEN_SPLIT.split(_DIGIT_RUN.sub(" ", value)) if token]


@lru_cache(maxsize=65536)
def _keyword_bits(value: str) -> int:
    bits = 0
    for token in class_tokens(value):
        stem = token[:-1] if len(token) > 3 and token.endswith("s") else token
        found = _EXACT.get(token, 0) | _EXACT.get(stem, 0)
        if not found and len(token) > _COMPOUND_PART:
            # A compound ("commentlist", "sidebarleft", "postcontent"): a known head or tail.
            for cut in range(_COMPOUND_PART, len(token) - 1):
                found |= _EXACT.get(token[:cut], 0) | _EXACT.get(token[-cut:], 0)
        bits |= found
    return bits


def _element_bits(element) -> int:
    bits = 0
    for name, value in element.items():  # one call for all attributes (most elements have one or two)
        if value and name in _ATTRIBUTES:
            bits |= _keyword_bits(value)
    return bits


# -- feature layout ---------------------------------------------------------------------------------------

#: Neighbour offsets whose block statistics are copied as features.
NEIGHBOUR_OFFSETS = (-3, -2, -1, 1, 2, 3)
#: Ancestor levels (1 = parent) whose container statistics are features.
CONTAINER_LEVELS = (1, 2, 3, 4, 5, 6)
#: Ancestor levels over which the second stage averages first-stage probabilities.
CONTEXT_LEVELS = (1, 2, 3, 4, 5, 6, 8)

_SUBTREE_NAMES = (
    "n_links",
    "link_share",
    "n_images",
    "n_list_items",
    "n_cells",
    "n_form_controls",
    "n_breaks",
)
_NEIGHBOUR_NAMES = ("log_length", "link_share", "sentence_punct_share", "is_heading", "tree_distance")
_CONTAINER_NAMES = ("text_share", "dense_share", "block_share", "link_share", "log_children")

FEATURE_NAMES: tuple[str, ...] = (
    *(f"tag_{tag}" for tag in BLOCK_TAGS),
    "tag_other",
    "log_length",
    "chars_page_share",
    "chars_rank",
    "log_length_vs_page",
    "chars_vs_max",
    *_TEXT_STAT_NAMES,
    *_SUBTREE_NAMES,
    "markup_per_char",
    "log_markup_tags",
    "empty_text",
    "depth",
    "depth_vs_page",
    "position",
    "position_chars",
    "duplicate_text_count",
    "signature_count_log",
    "signature_text_share",
    "signature_dense_share",
    "title_overlap",
    "after_first_h1",
    "blocks_from_first_h1",
    "dense",
    "dense_before",
    "blocks_to_dense",
    *(f"kw_{group}" for group in _GROUP_NAMES),
    *(f"kw_self_{group}" for group in _GROUP_NAMES),
    *(f"anc_{tag}" for tag in SEMANTIC_TAGS),
    *(f"c{level}_{name}" for level in CONTAINER_LEVELS for name in _CONTAINER_NAMES),
    "best_container_inside",
    "best_container_distance",
    *(f"n{offset:+d}_{name}" for offset in NEIGHBOUR_OFFSETS for name in _NEIGHBOUR_NAMES),
    "page_log_blocks",
    "page_log_length",
    "page_link_share",
    "page_dense_share",
    "page_n_articles",
    "page_n_h1",
    "page_heading_share",
    "page_max_share",
)
_INDEX = {name: index for index, name in enumerate(FEATURE_NAMES)}
# The item ids as attribute values (each with getparent()): a third faster than selecting the elements.
_ITEM_IDS = etree.XPath(f"//@{ITEM_ID_ATTR}")
_SUBTREE_TAGS = ("a", "img", "li", "td", "th", "input", "button", "select", "textarea", "br")


@dataclass(slots=True)
class PageFeatures:
    """The features of one page's blocks and the structure the second stage aggregates over.

    Attributes:
        values: ``(n_blocks, len(FEATURE_NAMES))`` float32 first-stage features.
        chars: ``(n_blocks,)`` characters of visible text per block.
        containers: ``(n_blocks, len(CONTEXT_LEVELS))`` page-local ids of the block's ancestor at each level
            (blocks sharing an id share that container; ``-1`` above the root).
        signatures: ``(n_blocks,)`` page-local ids of the block's structural signature (tag and class
            words of the block and its parent): repeated items share one.
    """

    values: np.ndarray
    chars: np.ndarray
    containers: np.ndarray
    signatures: np.ndarray

    @property
    def n_blocks(self) -> int:
        return int(self.values.shape[0])


@lru_cache(maxsize=16384)
def _class_signature(classes: str) -> str:
    return ".".join(sorted(set(class_tokens(classes))))


def _signature(element) -> str:
    parent = element.getparent()
    if parent is None:
        return _signature_of(element.tag, element.get("class") or "", None, "")
    return _signature_of(element.tag, element.get("class") or "", parent.tag, parent.get("class") or "")


@lru_cache(maxsize=16384)
def _signature_of(tag: str, classes: str, parent_tag: str | None, parent_classes: str) -> str:
    own = f"{tag}.{_class_signature(classes)}"
    if parent_tag is None:
        return own
    return f"{own}/{parent_tag}.{_class_signature(parent_classes)}"


def _title_tokens(root) -> set[str]:
    title = next(root.iter("title"), None)
    if title is None or not title.text:
        return set()
    return {token.casefold() for token in _WORD.findall(title.text)}


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
    elements: dict[str, object] = {}
    for item_id in _ITEM_IDS(root):  # attribute values in document order; each knows its element
        elements.setdefault(str(item_id), item_id.getparent())
    texts = [block.text for block in blocks]
    stats, length, spaces = _text_stats(texts)  # length: Latin-equivalent (CJK says as much in a third)
    chars = np.fromiter(map(len, texts), dtype=np.float64, count=n)
    total_chars = float(chars.sum()) or 1.0

    # One pass over the blocks: element, ancestor chain (as container ids, nearest first), subtree counts.
    # An ancestor met before ends the walk up: the rest of the chain is that ancestor's, already known.
    block_elements: list = []
    chains: list[list[int]] = []
    container_ids: dict[object, int] = {}
    container_nodes: list = []
    above: list[list[int]] = []  # per container: its own ancestors' ids, nearest first
    tags: list[str] = []
    subtree = np.zeros((n, len(_SUBTREE_NAMES)), dtype=np.float64)
    visible = (chars - spaces).tolist()
    for index, block in enumerate(blocks):
        element = elements.get(str(block.item_id))
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
            above.append([])
            chain.append(slot)
        for distance, slot in enumerate(chain):
            if above[slot] or distance == len(chain) - 1:
                break  # from here on the chain is made of known containers
            above[slot] = chain[distance + 1 :]
        chains.append(chain)
        in_link = element.tag == "a" or any(container_nodes[slot].tag == "a" for slot in chain[:3])
        subtree[index] = _subtree_counts(element, visible[index], in_link)
    # Link share over non-space characters (block text joins inline runs with or without a space).
    link_chars = subtree[:, 1].copy()
    subtree[:, 1] = link_chars / np.maximum(chars - spaces, 1.0)
    link_share = subtree[:, 1]
    sentence_share = stats[:, _TEXT_STAT_NAMES.index("sentence_punct_share")]
    is_heading = np.array([tag in _HEADINGS for tag in tags], dtype=np.float64)
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
    tag_columns = np.array([_BLOCK_TAG_INDEX.get(tag, len(BLOCK_TAGS)) for tag in tags])
    values[np.arange(n), tag_columns] = 1.0
    log_chars = np.log1p(length)
    column[_INDEX["log_length"]] = log_chars
    column[_INDEX["chars_page_share"]] = chars / total_chars
    column[_INDEX["chars_rank"]] = np.argsort(np.argsort(chars, kind="stable"), kind="stable") / max(n - 1, 1)
    column[_INDEX["log_length_vs_page"]] = log_chars - log_chars.mean()
    column[_INDEX["chars_vs_max"]] = chars / (chars.max() or 1.0)
    start = _INDEX[_TEXT_STAT_NAMES[0]]
    values[:, start : start + len(_TEXT_STAT_NAMES)] = stats
    start = _INDEX[_SUBTREE_NAMES[0]]
    values[:, start : start + len(_SUBTREE_NAMES)] = subtree
    markup_tags = np.array([block.simplified_html.count("<") for block in blocks], dtype=np.float64)
    markup = np.array([len(block.simplified_html) for block in blocks], dtype=np.float64)
    column[_INDEX["markup_per_char"]] = markup / (chars + 10.0)
    column[_INDEX["log_markup_tags"]] = np.log1p(markup_tags)
    column[_INDEX["empty_text"]] = chars == 0
    column[_INDEX["depth"]] = depths
    column[_INDEX["depth_vs_page"]] = depths - np.median(depths)
    column[_INDEX["position"]] = np.arange(n) / max(n - 1, 1)
    column[_INDEX["position_chars"]] = np.concatenate(([0.0], np.cumsum(chars)[:-1])) / total_chars

    text_counts: dict[str, int] = {}
    for text in texts:
        text_counts[text] = text_counts.get(text, 0) + 1
    column[_INDEX["duplicate_text_count"]] = [text_counts[text] if text else 0 for text in texts]
    signature_ids: dict[str, int] = {}
    signatures = np.array(
        [
            signature_ids.setdefault(_signature(element) if element is not None else "?", len(signature_ids))
            for element in block_elements
        ],
        dtype=np.int32,
    )
    column[_INDEX["signature_count_log"]] = np.log(np.bincount(signatures)[signatures])
    column[_INDEX["signature_text_share"]] = np.bincount(signatures, weights=chars)[signatures] / total_chars
    column[_INDEX["signature_dense_share"]] = (
        np.bincount(signatures, weights=dense_chars)[signatures] / total_dense
    )
    title = _title_tokens(root)
    if title:
        overlap = []
        for text in texts:
            words = set(map(str.casefold, _WORD.findall(text[:300]))) if text else None
            if words:
                shared = len(words & title)
                overlap.append(shared / max(len(words) + len(title) - shared, 1))  # Jaccard
            else:
                overlap.append(0.0)
        column[_INDEX["title_overlap"]] = overlap
    first_h1 = next((index for index, tag in enumerate(tags) if tag == "h1"), -1)
    if first_h1 >= 0:
        column[_INDEX["after_first_h1"]] = np.sign(np.arange(n) - first_h1)
        column[_INDEX["blocks_from_first_h1"]] = (np.arange(n) - first_h1) / n
    column[_INDEX["dense"]] = dense
    # Where the running text is: the share of it before the block, and how far the nearest dense block is.
    column[_INDEX["dense_before"]] = (np.cumsum(dense_chars) - dense_chars) / total_dense
    dense_at = np.flatnonzero(dense)
    if dense_at.size:
        slots = np.searchsorted(dense_at, np.arange(n))
        left = dense_at[np.clip(slots - 1, 0, dense_at.size - 1)]
        right = dense_at[np.clip(slots, 0, dense_at.size - 1)]
        nearest = np.minimum(np.abs(np.arange(n) - left), np.abs(right - np.arange(n)))
        column[_INDEX["blocks_to_dense"]] = np.log1p(nearest)
    else:
        column[_INDEX["blocks_to_dense"]] = -1.0

    # Class/id/role vocabulary and semantic tags of the block and its ancestors, nearest first, as
    # 1 / (1 + distance) of the nearest match.
    n_groups, n_semantic = len(_GROUP_NAMES), len(SEMANTIC_TAGS)
    # Path matrix, nearest first: the block's own element, then its ancestors (-1 past the root).
    width = int(depths.max()) + 1
    path = np.full((n, width), -1, dtype=np.int64)
    path[pair_block, 1 + pair_distance] = pair_container
    node_bits = np.array([_element_bits(node) for node in container_nodes] + [0], dtype=np.int64)
    node_semantic = np.array([_SEMANTIC_BIT.get(node.tag, 0) for node in container_nodes] + [0], np.int64)
    path_bits = node_bits[path]
    path_semantic = node_semantic[path]
    path_bits[:, 0] = [_element_bits(element) if element is not None else 0 for element in block_elements]
    path_semantic[:, 0] = [_SEMANTIC_BIT.get(tag, 0) for tag in tags]
    nearness = 1.0 / (1.0 + np.arange(width))
    _nearest_match(path_bits, n_groups, nearness, values, _INDEX[f"kw_{_GROUP_NAMES[0]}"])
    _nearest_match(path_semantic, n_semantic, nearness, values, _INDEX[f"anc_{SEMANTIC_TAGS[0]}"])
    start = _INDEX[f"kw_self_{_GROUP_NAMES[0]}"]
    values[:, start : start + n_groups] = (path_bits[:, :1] >> np.arange(n_groups)) & 1

    # Containers at fixed levels: padded matrix of ancestor ids (-1 above the root).
    max_level = max(max(CONTAINER_LEVELS), max(CONTEXT_LEVELS))
    ancestors = np.full((n, max_level), -1, dtype=np.int64)
    near = pair_distance < max_level
    ancestors[pair_block[near], pair_distance[near]] = pair_container[near]
    child_counts = np.array([len(node) for node in container_nodes], dtype=np.float64)
    page_link = float(link_chars.sum()) / total_chars
    for level in CONTAINER_LEVELS:
        base = _INDEX[f"c{level}_{_CONTAINER_NAMES[0]}"]
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
        column[_INDEX["best_container_inside"]] = distance > 0
        column[_INDEX["best_container_distance"]] = distance

    # Neighbours: a few statistics of the blocks around, and the tree distance to them (edges through the
    # lowest common ancestor, from root-first paths padded so that no padding matches).
    own = np.stack([log_chars, link_share, sentence_share, is_heading], axis=1)
    width = int(depths.max()) if n else 0
    root_first = np.full((n, max(width, 1)), -2, dtype=np.int64)
    root_first[pair_block, chain_lengths[pair_block] - 1 - pair_distance] = pair_container
    root_first_other = np.where(root_first == -2, -3, root_first)
    for offset in NEIGHBOUR_OFFSETS:
        base = _INDEX[f"n{offset:+d}_{_NEIGHBOUR_NAMES[0]}"]
        block = np.full((n, 5), -1.0)
        if abs(offset) < n:
            this = slice(max(0, -offset), n - max(0, offset))
            other = slice(max(0, offset), n - max(0, -offset))
            block[this, :4] = own[other]
            same = root_first[this] == root_first_other[other]
            common = np.where(same.all(axis=1), same.shape[1], same.argmin(axis=1))
            block[this, 4] = depths[this] + depths[other] - 2 * common + 2
        values[:, base : base + 5] = block

    column[_INDEX["page_log_blocks"]] = math.log1p(n)
    column[_INDEX["page_log_length"]] = math.log1p(float(length.sum()))
    column[_INDEX["page_link_share"]] = page_link
    column[_INDEX["page_dense_share"]] = float(dense_chars.sum()) / total_chars
    column[_INDEX["page_n_articles"]] = math.log1p(sum(1 for _ in root.iter("article")))
    column[_INDEX["page_n_h1"]] = sum(tag == "h1" for tag in tags)
    column[_INDEX["page_heading_share"]] = float(is_heading.mean())
    column[_INDEX["page_max_share"]] = float(chars.max()) / total_chars
    return PageFeatures(values, chars.astype(np.float32), containers, signatures)


def _nearest_match(bits: np.ndarray, n_bits: int, nearness: np.ndarray, out: np.ndarray, start: int) -> None:
    """For each bit, ``nearness`` of the first path position that has it (0 where none does)."""
    n, width = bits.shape
    unpacked = np.unpackbits(
        bits.astype("<u4").view(np.uint8).reshape(n, width, 4), axis=2, bitorder="little"
    )[:, :, :n_bits]
    first = unpacked.argmax(axis=1)
    out[:, start : start + n_bits] = np.where(unpacked.any(axis=1), nearness[first], 0.0)


# -- second stage -----------------------------------------------------------------------------------------

CONTEXT_OFFSETS = (-3, -2, -1, 1, 2, 3)
CONTEXT_FEATURE_NAMES: tuple[str, ...] = (
    "p",
    *(f"p{offset:+d}" for offset in CONTEXT_OFFSETS),
    "p_window5_weighted",
    *(f"p_container{level}" for level in CONTEXT_LEVELS),
    *(f"main_share_container{level}" for level in CONTEXT_LEVELS),
    "p_signature",
    "p_max_before",
    "p_max_after",
    "between_confident",
    "blocks_to_confident",
    "page_p_mean",
    "page_main_share",
    "page_p_max",
)


def _window_sum(values: np.ndarray, radius: int) -> np.ndarray:
    """Sum of ``values[i - radius : i + radius + 1]`` for every ``i`` (clipped at the ends)."""
    cumulative = np.concatenate(([0.0], np.cumsum(values)))
    n = values.shape[0]
    low = np.clip(np.arange(n) - radius, 0, n)
    high = np.clip(np.arange(n) + radius + 1, 0, n)
    return cumulative[high] - cumulative[low]


def context_features(features: PageFeatures, probabilities: np.ndarray) -> np.ndarray:
    """Second-stage features: first-stage probabilities around each block.

    Args:
        features: The page's :class:`PageFeatures`.
        probabilities: ``(n_blocks,)`` first-stage probabilities of "main".

    Returns:
        ``(n_blocks, len(CONTEXT_FEATURE_NAMES))`` float32.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    n = p.shape[0]
    out = np.zeros((n, len(CONTEXT_FEATURE_NAMES)), dtype=np.float32)
    if n == 0:
        return out
    chars = features.chars.astype(np.float64)
    weights = chars + 1.0
    column = 0
    out[:, column] = p
    column += 1
    padded = np.concatenate((np.full(3, -1.0), p, np.full(3, -1.0)))
    for offset in CONTEXT_OFFSETS:
        out[:, column] = padded[3 + offset : 3 + offset + n]
        column += 1
    out[:, column] = _window_sum(p * weights, 5) / _window_sum(weights, 5)
    column += 1
    expected_main = p * chars
    total_main = float(expected_main.sum()) or 1.0
    for level in range(len(CONTEXT_LEVELS)):
        ids = features.containers[:, level]
        valid = ids >= 0
        if valid.any():
            size = int(ids.max()) + 1
            sums = np.bincount(ids[valid], weights=(p * weights)[valid], minlength=size)
            norms = np.bincount(ids[valid], weights=weights[valid], minlength=size)
            mains = np.bincount(ids[valid], weights=expected_main[valid], minlength=size)
            out[valid, column] = sums[ids[valid]] / norms[ids[valid]]
            out[valid, column + len(CONTEXT_LEVELS)] = mains[ids[valid]] / total_main
        out[~valid, column] = float((p * weights).sum() / weights.sum())
        out[~valid, column + len(CONTEXT_LEVELS)] = 1.0
        column += 1
    column += len(CONTEXT_LEVELS)
    signature_sums = np.bincount(features.signatures, weights=p * weights)
    signature_norms = np.bincount(features.signatures, weights=weights)
    out[:, column] = signature_sums[features.signatures] / signature_norms[features.signatures]
    column += 1
    before = np.concatenate(([0.0], np.maximum.accumulate(p)[:-1]))
    after = np.concatenate((np.maximum.accumulate(p[::-1])[::-1][1:], [0.0]))
    out[:, column] = before
    out[:, column + 1] = after
    column += 2
    confident = np.flatnonzero(p >= 0.5)
    if confident.size:
        indexes = np.arange(n)
        out[:, column] = ((indexes >= confident[0]) & (indexes <= confident[-1])).astype(np.float32)
        slots = np.searchsorted(confident, indexes)
        left = confident[np.clip(slots - 1, 0, confident.size - 1)]
        right = confident[np.clip(slots, 0, confident.size - 1)]
        out[:, column + 1] = np.minimum(np.abs(indexes - left), np.abs(right - indexes)) / n
    else:
        out[:, column + 1] = 1.0
    column += 2
    out[:, column] = p.mean()
    out[:, column + 1] = total_main / (float(chars.sum()) or 1.0)
    out[:, column + 2] = p.max()
    return out
