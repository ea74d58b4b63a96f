"""Hashed tokens of each block: what the sequence labeler's embedding table is indexed by.

Two bags per block, both hashed into one table of ``buckets`` rows (:func:`block_tokens`):

- *text*: lower-cased word unigrams of the block's first and last words, word bigrams of its first words,
  and character trigrams of its first characters (these carry scripts without spaces, CJK, and words the
  unigrams split oddly);
- *markup*: the tag of the block and of its two nearest ancestors, with their class/id words (split on
  ``-``, ``_``, digits and case changes), each prefixed with its level, so ``0:div`` and ``1:div`` differ.

Hashing is ``zlib.crc32`` (stable across processes, unlike ``hash``); a per-call cache keeps a page's
repeated tokens from being hashed twice. Caps on the words and characters read keep the cost per block
bounded whatever its length.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

import numpy as np

from dripper.simplify.tags import ITEM_ID_ATTR
from dripper.types import SimplifiedPage

__all__ = ["BlockTokens", "block_tokens"]

_WORD = re.compile(r"\w+")
_CLASS_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])")
#: Words read from the start and end of a block, bigrams from its start, characters for trigrams.
HEAD_WORDS, TAIL_WORDS, BIGRAM_WORDS, TRIGRAM_CHARS = 24, 8, 12, 24
#: Ancestors whose tag and class/id words are markup tokens (0 is the block's own element).
MARKUP_LEVELS = 3


@dataclass(frozen=True)
class BlockTokens:
    """Hashed token ids of a page's blocks in CSR form (``ids[offsets[i]:offsets[i + 1]]`` is block ``i``).

    Attributes:
        text_ids, text_offsets: The text bag of every block (``offsets`` has ``n_blocks + 1`` entries).
        markup_ids, markup_offsets: The markup bag of every block.
    """

    text_ids: np.ndarray
    text_offsets: np.ndarray
    markup_ids: np.ndarray
    markup_offsets: np.ndarray

    @property
    def n_blocks(self) -> int:
        return int(self.text_offsets.shape[0] - 1)


def _class_words(element) -> list[str]:
    value = f"{element.get('class') or ''} {element.get('id') or ''}"
    return [word.lower() for word in _CLASS_WORD.findall(value)][:8]


def _text_tokens(text: str) -> list[str]:
    words = _WORD.findall(text.lower())
    head = words[:HEAD_WORDS]
    tail = words[-TAIL_WORDS:] if len(words) > HEAD_WORDS else []
    tokens = ["w:" + word for word in head]
    tokens += ["e:" + word for word in tail]
    tokens += [f"b:{a} {b}" for a, b in zip(head[:BIGRAM_WORDS], head[1:BIGRAM_WORDS], strict=False)]
    chars = text[:TRIGRAM_CHARS].lower()
    tokens += ["c:" + chars[i : i + 3] for i in range(max(len(chars) - 2, 0))]
    if not tokens:
        tokens.append("w:<empty>")
    return tokens


def _markup_tokens(element, tag: str) -> list[str]:
    if element is None:
        return [f"0:{tag or '?'}"]
    tokens: list[str] = []
    node = element
    for level in range(MARKUP_LEVELS):
        if node is None or not isinstance(node.tag, str):
            tokens.append(f"{level}:<root>")
            break
        tokens.append(f"{level}:{node.tag}")
        tokens += [f"{level}.{word}" for word in _class_words(node)]
        node = node.getparent()
    return tokens


def _elements(page: SimplifiedPage) -> list:
    root = page.mapping_root()
    if page.block_elements is not None and page.mapping_tree is root:
        return list(page.block_elements)
    found: dict[str, object] = {}
    for element in root.iter():
        item_id = element.get(ITEM_ID_ATTR) if isinstance(element.tag, str) else None
        if item_id is not None:
            found.setdefault(str(item_id), element)
    return [found.get(str(block.item_id)) for block in page.blocks]


def _hash_bags(bags: list[list[str]], buckets: int, cache: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    ids: list[int] = []
    offsets = [0]
    for bag in bags:
        for token in bag:
            bucket = cache.get(token)
            if bucket is None:
                bucket = cache[token] = zlib.crc32(token.encode("utf-8", "surrogatepass")) % buckets
            ids.append(bucket)
        offsets.append(len(ids))
    return np.asarray(ids, dtype=np.int64), np.asarray(offsets, dtype=np.int64)


def block_tokens(page: SimplifiedPage, buckets: int) -> BlockTokens:
    """The hashed text and markup bags of every block of ``page`` (every block has at least one token).

    Args:
        page: A simplified page (blocks with text; its mapping view at hand for the markup).
        buckets: Rows of the embedding table the ids index.
    """
    if buckets < 1:
        raise ValueError(f"buckets {buckets}: need at least 1")
    elements = _elements(page) if page.blocks else []
    cache: dict[str, int] = {}
    text_ids, text_offsets = _hash_bags([_text_tokens(block.text) for block in page.blocks], buckets, cache)
    markup_bags = [
        _markup_tokens(element, block.tag) for block, element in zip(page.blocks, elements, strict=True)
    ]
    markup_ids, markup_offsets = _hash_bags(markup_bags, buckets, cache)
    return BlockTokens(text_ids, text_offsets, markup_ids, markup_offsets)
