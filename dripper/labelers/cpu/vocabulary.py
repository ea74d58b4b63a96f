"""The structural vocabulary of the CPU labeler's features: class/id/role words and tags that say what a
region of a page is (content, comment, footer, nav, sidebar, related…), matched in any language's pages.
"""

from __future__ import annotations

import re
from functools import lru_cache

from dripper.simplify.tags import TEXT_RUN_TAG

__all__ = [
    "BLOCK_TAGS",
    "GROUP_NAMES",
    "KEYWORD_GROUPS",
    "SEMANTIC_TAGS",
    "class_signature",
    "class_tokens",
    "element_bits",
    "element_profiles",
]

# -- words -------------------------------------------------------------------------------------------

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
GROUP_NAMES = tuple(KEYWORD_GROUPS)
_EXACT: dict[str, int] = {}
for _bit, _words in enumerate(KEYWORD_GROUPS.values()):
    for _word in _words:
        _EXACT[_word] = _EXACT.get(_word, 0) | (1 << _bit)
GROUP_BIT = {name: 1 << bit for bit, name in enumerate(GROUP_NAMES)}
# The groups Readability's class weight penalises (its "negative" pattern).
NEGATIVE_BITS = sum(
    GROUP_BIT[name] for name in ("comment", "footer", "nav", "sidebar", "related", "share", "ad")
)
_COMPOUND_PART = 4  # shortest known word recognised as the head or tail of a compound token

#: Semantic tags whose presence on the block or an ancestor is a feature (h1–h6 count as one).
SEMANTIC_TAGS = (
    "article", "main", "nav", "header", "footer", "aside", "form", "li", "table", "blockquote", "figure",
    "section", "a", "button", "dl", "pre", "heading", "p", "span", "td", "label", "select",
)  # fmt: skip
SEMANTIC_BIT = {tag: 1 << bit for bit, tag in enumerate(SEMANTIC_TAGS)}
for _level in range(1, 7):
    SEMANTIC_BIT[f"h{_level}"] = SEMANTIC_BIT["heading"]

#: Block element tags given their own indicator (others: ``tag_other``).
BLOCK_TAGS = (
    "p", "div", TEXT_RUN_TAG, "h1", "h2", "h3", "h4", "h5", "h6", "li", "ul", "ol", "table", "td", "tr", "pre",
    "blockquote", "dl", "dd", "dt", "figure", "figcaption", "span", "a", "section", "article", "noscript",
    "img", "form", "header", "footer", "address", "center", "font", "b", "strong", "time", "label",
)  # fmt: skip
BLOCK_TAG_INDEX = {tag: index for index, tag in enumerate(BLOCK_TAGS)}
HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_ATTRIBUTES = frozenset(("class", "id", "role", "itemprop", "itemtype", "aria-label", "data-testid"))
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_TOKEN_SPLIT = re.compile(r"[^a-z0-9]+")
_DIGIT_RUN = re.compile(r"\d+")
# Taxonomy terms in class names (``tag-home-gym-review``, ``category-product-reviews``: publishing systems
# such as WordPress list a post's tags and categories in its classes): the page's topic words, not what the
# element is. Without this an article's container reads as a review/comment box when it is tagged so.
_TAXONOMY_TERM = re.compile(r"(?:tag|tags|category|categories|post_tag|topic|topics)[-_]\S+")


def class_tokens(value: str) -> list[str]:
    """Lower-case tokens of a class/id value: split at camel case, non-alphanumerics and digit runs."""
    value = _CAMEL.sub(" ", value).lower()
    return [token for token in _TOKEN_SPLIT.split(_DIGIT_RUN.sub(" ", value)) if token]


@lru_cache(maxsize=65536)
def _keyword_bits(value: str) -> int:
    bits = 0
    if "-" in value or "_" in value:
        value = " ".join(name for name in value.split() if not _TAXONOMY_TERM.fullmatch(name.lower()))
    for token in class_tokens(value):
        stem = token[:-1] if len(token) > 3 and token.endswith("s") else token
        found = _EXACT.get(token, 0) | _EXACT.get(stem, 0)
        if not found and len(token) > _COMPOUND_PART:
            # A compound ("commentlist", "sidebarleft", "postcontent"): a known head or tail.
            for cut in range(_COMPOUND_PART, len(token) - 1):
                found |= _EXACT.get(token[:cut], 0) | _EXACT.get(token[-cut:], 0)
        bits |= found
    return bits


def element_bits(element) -> int:
    bits = 0
    for name, value in element.items():  # one call for all attributes (most elements have one or two)
        if value and name in _ATTRIBUTES:
            bits |= _keyword_bits(value)
    return bits


@lru_cache(maxsize=16384)
def class_signature(classes: str) -> str:
    """The class words of a class attribute, sorted and deduplicated, joined by dots."""
    return ".".join(sorted(set(class_tokens(classes))))


@lru_cache(maxsize=16384)
def _template_of(tag: str, classes: str) -> str:
    return f"{tag}.{class_signature(classes)}"


_BODY_PROPS = frozenset({"articlebody", "text", "reviewbody"})


def element_profiles(elements, templates: dict[str, int]) -> tuple[list[int], list[int], list[bool]]:
    """Per element (``None`` allowed), in one pass over its attributes: its class-word group bits (as
    :func:`element_bits`), its template id in ``templates`` (tag and class words; new ones are added; -1
    for ``None``) and whether it is marked up as an article's body (schema.org ``itemprop`` articleBody,
    text or reviewBody)."""
    bits_of, template_ids, body = [], [], []
    for element in elements:
        if element is None:
            bits_of.append(0)
            template_ids.append(-1)
            body.append(False)
            continue
        bits, classes, prop = 0, "", None
        for name, value in element.items():
            if value and name in _ATTRIBUTES:
                bits |= _keyword_bits(value)
                if name == "class":
                    classes = value
                elif name == "itemprop":
                    prop = value
        bits_of.append(bits)
        template_ids.append(templates.setdefault(_template_of(element.tag, classes), len(templates)))
        body.append(prop is not None and prop.strip().lower() in _BODY_PROPS)
    return bits_of, template_ids, body
