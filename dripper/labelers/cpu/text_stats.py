"""Character statistics of block texts for the CPU labeler: shares of character classes, words, sentences.

No word lists: every statistic is a count of character classes, so that the same features mean the same in
any language (CJK text counts its characters, others their spaces).
"""

from __future__ import annotations

import math
import re

import numpy as np

__all__ = ["TEXT_STAT_NAMES", "WORD", "class_counts", "text_stats"]

# -- character classes --------------------------------------------------------------------------------------

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
WORD = re.compile(r"\w+")
_SENTENCE_END_CHARS = frozenset(".!?。！？…;；:")

TEXT_STAT_NAMES = (
    "letter_share", "upper_share", "digit_share", "space_share", "sentence_punct_share", "comma_share",
    "separator_share", "bracket_share", "cjk_share", "log_words", "mean_word_length",
    "ends_with_sentence_punct", "starts_upper", "sentences_log",
)  # fmt: skip


def class_counts(texts: list[str]) -> np.ndarray:
    """``(len(texts), _N_CLASSES)`` counts of each character class in each text."""
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    codes = np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), dtype="<u4")
    classes = _CODE_CLASS[np.minimum(codes, 0xFFFF)]
    classes += np.repeat(np.arange(len(texts), dtype=np.int32) * _N_CLASSES, lengths)
    return np.bincount(classes, minlength=len(texts) * _N_CLASSES).reshape(len(texts), _N_CLASSES)


def text_stats(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Character statistics of every block's text (shares of character classes, word and sentence counts).

    Returns:
        ``(stats, length, spaces)``: ``(n, len(TEXT_STAT_NAMES))`` statistics (zeros for an empty text), each
        text's length in Latin-equivalent characters (a CJK character counts three) and its spaces.
    """
    counts = class_counts(texts).astype(np.float64)
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
