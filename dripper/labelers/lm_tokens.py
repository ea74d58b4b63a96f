"""The answer regex at token level: token bytes, the allowed-token automaton, label confidences.

:class:`AnswerAutomaton` says which token ids the answer regex allows next, with vLLM's structured-output
semantics (xgrammar's): a token is allowed when its bytes keep the answer a prefix of some match, so
partial label tokens and optional whitespace are choices too; :func:`label_margins` turns per-token
candidate log-probabilities into one main-vs-other margin per label, for any engine that exposes them.

Nothing here imports torch or vLLM.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from dripper.prompt import AnswerFormat


def _byte_decoder() -> dict[str, int]:
    # GPT-2 byte-level BPE writes each byte as a printable character; this inverts that table.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return {chr(code): byte for byte, code in zip(printable, codes, strict=True)}


def token_bytes_table(tokenizer: Any, vocab_size: int | None = None) -> tuple[bytes | None, ...]:
    """The bytes each token id stands for (``None`` for special tokens and ids the tokenizer lacks).

    Handles byte-level BPE (GPT-2/Qwen/Llama-3 style) and SentencePiece (``▁`` and ``<0xNN>`` pieces).
    Computed once per tokenizer object and size (a second of work for a 150k vocabulary), then shared.
    """
    return _token_bytes_table(tokenizer, vocab_size or len(tokenizer))


@lru_cache(maxsize=8)
def _token_bytes_table(tokenizer: Any, size: int) -> tuple[bytes | None, ...]:
    table: list[bytes | None] = [None] * size
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder_state = getattr(getattr(backend, "decoder", None), "__getstate__", None)
    byte_level = decoder_state is not None and b"ByteLevel" in decoder_state()
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    added = {
        token_id: token.content for token_id, token in getattr(tokenizer, "added_tokens_decoder", {}).items()
    }
    decoder = _byte_decoder()
    for token, token_id in tokenizer.get_vocab().items():
        if token_id >= size or token_id in special:
            continue
        if token_id in added:
            table[token_id] = None  # added tokens are matched as whole words, never as text by a regex
            continue
        if byte_level:
            try:
                table[token_id] = bytes(decoder[ch] for ch in token)
            except KeyError:
                table[token_id] = token.encode("utf-8")
        elif len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            table[token_id] = bytes([int(token[3:5], 16)])
        else:
            table[token_id] = token.replace("▁", " ").encode("utf-8")
    return tuple(table)


_LABEL_BYTES = {
    "compact": re.compile(rb"(\d+)\s*(main|other)"),
    "json": re.compile(rb'"(\d+)"\s*:\s*"(main|other)"'),
}


def label_margins(
    fmt: AnswerFormat,
    chosen: Sequence[bytes],
    candidates: Sequence[dict[bytes, float]],
    n_blocks: int,
) -> list[float] | None:
    """Per-label margin log p(main) − log p(other) at the token that decided each label.

    Args:
        fmt: The answer format.
        chosen: The bytes of each generated token.
        candidates: For each generated token, log-probabilities of candidate tokens by their bytes (the
            top-k of a masked distribution; the chosen token included).
        n_blocks: Labels expected.

    A candidate counts for ``main`` (``other``) when its bytes, placed where the chosen token starts, put
    ``m`` (``o``) at the label's first byte. When one side is missing from the candidates, the margin is
    the bound given by the lowest listed log-probability. ``None`` when the labels cannot be located.
    """
    text = b"".join(chosen)
    starts = []
    position = 0
    for piece in chosen:
        starts.append(position)
        position += len(piece)
    label_positions = [match.start(2) for match in _LABEL_BYTES[fmt.name].finditer(text)]
    if len(label_positions) != n_blocks:
        return None
    margins: list[float] = []
    step = 0
    for label_at in label_positions:
        while step + 1 < len(starts) and starts[step + 1] <= label_at:
            step += 1
        offset = label_at - starts[step]
        best = {ord("m"): float("-inf"), ord("o"): float("-inf")}
        floor = float("inf")
        for token, logprob in candidates[step].items():
            floor = min(floor, logprob)
            if len(token) > offset and token[offset] in best:
                best[token[offset]] = max(best[token[offset]], logprob)
        main, other = best[ord("m")], best[ord("o")]
        if main == float("-inf") and other == float("-inf"):
            return None
        margins.append(
            (main if main > float("-inf") else floor) - (other if other > float("-inf") else floor)
        )
    return margins


# -- the answer regex at token level -------------------------------------------------------------------

# xgrammar's ``\s`` (what vLLM's structured outputs use): ASCII whitespace and U+00A0.
_WHITESPACE_CHARS = "\t\n\v\f\r \u00a0"
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}


class _Nfa:
    """A Thompson NFA over bytes: ``eps[node]`` are ε-edges, ``edges[node]`` are (byte set, target)."""

    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[frozenset[int], int]]] = []

    def node(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def chars(self, chars: str) -> tuple[int, int]:
        """A fragment matching any one of ``chars`` (each as its UTF-8 byte sequence)."""
        start, end = self.node(), self.node()
        single = frozenset(ord(ch) for ch in chars if ord(ch) < 0x80)
        if single:
            self.edges[start].append((single, end))
        for ch in chars:
            encoded = ch.encode("utf-8")
            if len(encoded) == 1:
                continue
            current = start
            for byte in encoded[:-1]:
                following = self.node()
                self.edges[current].append((frozenset([byte]), following))
                current = following
            self.edges[current].append((frozenset([encoded[-1]]), end))
        return start, end


class _RegexParser:
    """The regex subset the answer formats use: literals, escapes, ``\\s``/``\\d``, ``( | )``, ``* + ?``."""

    def __init__(self, pattern: str, nfa: _Nfa) -> None:
        self.pattern, self.nfa, self.at = pattern, nfa, 0

    def parse(self) -> tuple[int, int]:
        fragment = self._alternation()
        if self.at != len(self.pattern):
            raise ValueError(f"regex: unexpected {self.pattern[self.at]!r} at {self.at}")
        return fragment

    def _alternation(self) -> tuple[int, int]:
        branches = [self._concatenation()]
        while self.at < len(self.pattern) and self.pattern[self.at] == "|":
            self.at += 1
            branches.append(self._concatenation())
        if len(branches) == 1:
            return branches[0]
        start, end = self.nfa.node(), self.nfa.node()
        for branch_start, branch_end in branches:
            self.nfa.eps[start].append(branch_start)
            self.nfa.eps[branch_end].append(end)
        return start, end

    def _concatenation(self) -> tuple[int, int]:
        start = end = self.nfa.node()
        while self.at < len(self.pattern) and self.pattern[self.at] not in "|)":
            piece_start, piece_end = self._repetition()
            self.nfa.eps[end].append(piece_start)
            end = piece_end
        return start, end

    def _repetition(self) -> tuple[int, int]:
        start, end = self._atom()
        while self.at < len(self.pattern) and self.pattern[self.at] in "*+?":
            operator = self.pattern[self.at]
            self.at += 1
            outer_start, outer_end = self.nfa.node(), self.nfa.node()
            self.nfa.eps[outer_start].append(start)
            self.nfa.eps[end].append(outer_end)
            if operator in "*?":
                self.nfa.eps[outer_start].append(outer_end)
            if operator in "*+":
                self.nfa.eps[end].append(start)
            start, end = outer_start, outer_end
        return start, end

    def _atom(self) -> tuple[int, int]:
        ch = self.pattern[self.at]
        self.at += 1
        if ch == "(":
            if self.pattern.startswith("?:", self.at):
                self.at += 2
            fragment = self._alternation()
            if self.at >= len(self.pattern) or self.pattern[self.at] != ")":
                raise ValueError(f"regex: unclosed group at {self.at}")
            self.at += 1
            return fragment
        if ch == "\\":
            escaped = self.pattern[self.at]
            self.at += 1
            if escaped == "s":
                return self.nfa.chars(_WHITESPACE_CHARS)
            if escaped == "d":
                return self.nfa.chars("0123456789")
            if escaped.isalnum() and escaped not in _ESCAPES:
                raise ValueError(f"regex: unsupported escape \\{escaped}")
            return self.nfa.chars(_ESCAPES.get(escaped, escaped))
        if ch in "[]{}.^$*+?)|":
            raise ValueError(f"regex: unsupported syntax {ch!r} at {self.at - 1}")
        return self.nfa.chars(ch)


class TokenVocabulary:
    """A tokenizer's tokens as bytes, sorted, for walking the answer automaton token by token.

    Args:
        token_bytes: ``token_bytes_table(tokenizer, vocab_size)``.
        stop_ids: Ids that end the answer (EOS); allowed where the regex may end.
    """

    def __init__(self, token_bytes: Sequence[bytes | None], stop_ids: Sequence[int]) -> None:
        grouped: dict[bytes, list[int]] = {}
        for token_id, data in enumerate(token_bytes):
            if data:
                grouped.setdefault(data, []).append(token_id)
        self.keys = sorted(grouped)
        self.ids = [grouped[key] for key in self.keys]
        self.token_bytes = list(token_bytes)
        self.stop_ids = list(stop_ids)
        self.size = len(token_bytes)


class AnswerAutomaton:
    """An answer regex as a byte DFA, and which tokens it allows next: vLLM's structured-output semantics.

    A token is allowed when its bytes, appended to the answer so far, keep it a prefix of some string the
    regex matches (partial label tokens, optional whitespace and U+00A0 included); stop tokens are allowed
    where the regex may end. This equals xgrammar's token masks for these regexes (a test compares them).
    States are small ints; they can be saved and restored freely (that is the rollback).
    """

    def __init__(self, regex: str, vocabulary: TokenVocabulary) -> None:
        self.vocabulary = vocabulary
        self._nfa = _Nfa()
        start, self._final = _RegexParser(regex, self._nfa).parse()
        self._ids: dict[frozenset[int], int] = {}
        self._sets: list[frozenset[int]] = []
        self._moves: list[dict[int, int] | None] = []
        self._allowed: dict[int, tuple[int, ...]] = {}
        self._closures: dict[int, frozenset[int]] = {}
        self.start = self._intern(self._closure([start]))

    def _closure(self, nodes: Sequence[int]) -> frozenset[int]:
        if len(nodes) == 1:
            return self._node_closure(nodes[0])
        return frozenset().union(*(self._node_closure(node) for node in nodes))

    def _node_closure(self, node: int) -> frozenset[int]:
        # The nodes reachable by ε-edges that matter for a state: those with byte edges, and the final one.
        closure = self._closures.get(node)
        if closure is None:
            seen = {node}
            stack = [node]
            while stack:
                for target in self._nfa.eps[stack.pop()]:
                    if target not in seen:
                        seen.add(target)
                        stack.append(target)
            closure = frozenset(n for n in seen if self._nfa.edges[n] or n == self._final)
            self._closures[node] = closure
        return closure

    def _intern(self, nodes: frozenset[int]) -> int:
        state = self._ids.get(nodes)
        if state is None:
            state = self._ids[nodes] = len(self._sets)
            self._sets.append(nodes)
            self._moves.append(None)
        return state

    def moves(self, state: int) -> dict[int, int]:
        """``{byte: next state}`` for the bytes that keep the answer alive from ``state``."""
        moves = self._moves[state]
        if moves is None:
            targets: dict[int, list[int]] = {}
            for node in self._sets[state]:
                for byte_set, target in self._nfa.edges[node]:
                    for byte in byte_set:
                        targets.setdefault(byte, []).append(target)
            moves = {byte: self._intern(self._closure(nodes)) for byte, nodes in sorted(targets.items())}
            self._moves[state] = moves
        return moves

    def accepting(self, state: int) -> bool:
        return self._final in self._sets[state]

    def finished(self, state: int) -> bool:
        """The answer is complete and nothing may follow (only a stop token is allowed)."""
        return self.accepting(state) and not self.moves(state)

    def advance(self, state: int, token_id: int) -> int | None:
        """The state after ``token_id``, or ``None`` if the regex does not allow it there."""
        data = self.vocabulary.token_bytes[token_id] if token_id < self.vocabulary.size else None
        if not data:
            return None
        for byte in data:
            state = self.moves(state).get(byte)
            if state is None:
                return None
        return state

    def allowed(self, state: int) -> tuple[int, ...]:
        """Sorted token ids allowed next (stop ids included where the answer may end)."""
        cached = self._allowed.get(state)
        if cached is None:
            found: list[int] = []
            keys, ids = self.vocabulary.keys, self.vocabulary.ids
            stack = [(state, b"", 0, len(keys))]
            while stack:
                current, prefix, low, high = stack.pop()
                if low < high and keys[low] == prefix:
                    found.extend(ids[low])
                for byte, following in self.moves(current).items():
                    extended = prefix + bytes([byte])
                    sub_low = bisect_left(keys, extended, low, high)
                    if sub_low < high and keys[sub_low].startswith(extended):
                        sub_high = _prefix_end(keys, extended, sub_low, high)
                        stack.append((following, extended, sub_low, sub_high))
            if self.accepting(state):
                found.extend(self.vocabulary.stop_ids)
            cached = self._allowed[state] = tuple(sorted(found))
        return cached


def _prefix_end(keys: list[bytes], prefix: bytes, low: int, high: int) -> int:
    """First index in ``keys[low:high]`` (sorted, from one starting with ``prefix``) past that prefix."""
    if prefix[-1] < 0xFF:
        return bisect_left(keys, prefix[:-1] + bytes([prefix[-1] + 1]), low, high)
    while low < high and keys[low].startswith(prefix):
        low += 1
    return low
