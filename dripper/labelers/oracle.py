"""The ``oracle`` labeler: labels blocks by aligning a page's ground-truth text to them.

It is the ceiling of segmentation plus reconstruction, and the source of training labels for learned
labelers, so it decides each block on evidence rather than on aggregate overlap. The alignment:

1. Both sides become *alignment tokens*: NFKC, case-folded words (split at camel-case and letter/digit
   seams, because block text glues adjacent inline elements: ``"DealerSun"``), one token per CJK character,
   punctuation dropped. Markdown links, images, HTML tags and list numbers are stripped from the ground truth.
2. **Anchoring.** Each block's token ``k``-grams are looked up in the ground truth; the longest chain of hits
   increasing in both block and ground-truth position (an LIS) is the block's alignment. Isolated stray hits
   far off the chain's diagonal are dropped. ``matched`` = block tokens covered by the chain.
3. **Monotone selection.** Blocks are in document order and the ground truth in reading order, so the main
   blocks are chosen as the chain of blocks with non-overlapping, increasing ground-truth spans that
   maximises ``Σ matched − λ·tokens`` (a weighted LIS). Text repeated in navigation, teasers and share
   widgets competes for the same span and loses to the copy that lies with the rest of the article; ties go
   to the more compact chain.
4. **Recovery.** Blocks left out are re-aligned against the ground truth not yet covered and added when they
   still gain (content the page shows out of reading order: bylines, captions, sidebars kept by the GT).
5. **Short blocks** (fewer than ``k`` tokens: headings, list items, cells) are main when their exact tokens
   sit in the uncovered ground truth between their chosen neighbours' spans, as a whole ground-truth line
   or filling most of that gap (a weighted LIS of their exact occurrences).

``λ`` is the coverage a block needs to be worth its tokens. Including a block with ``matched/tokens > F/2``
raises a page's token F1 ``F``, so ``λ`` is iterated towards ``F/2`` (Dinkelbach), starting at 0.45 and never
above it. It drops only where the article sits in blocks that also hold boilerplate, and then only for
blocks aligned to a large share of the ground truth: small half-matching blocks never become main.

Labels are per block and deterministic. Text the page repeats (carousels, quoted posts, "related" teasers)
is main in one copy only; the other copies keep their high coverage in :attr:`OracleAlignment.coverage`
(``Labels.confidence``), which is how a trainer can tell "duplicate of main" from "boilerplate".
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from dripper.labelers.base import BlockLabeler, LabelRequest, Labels, register_labeler

__all__ = ["OracleAlignment", "OracleLabeler", "OracleOptions", "align_blocks", "alignment_tokens"]

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3100-\u312f"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
# Seams inside a word run where block text may have glued two words together; applied to both sides alike.
_SEAM = re.compile(r"(?<=[^\W\d_])(?=\d)|(?<=\d)(?=[^\W\d_])|(?<=[a-zà-ÿ])(?=[A-ZÀ-Þ])")
_MD_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_MD_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_MD_AUTOLINK = re.compile(r"<(?:https?|mailto):[^>]*>")
_HTML_TAG = re.compile(r"</?[a-zA-Z][^>]*>")
_LIST_NUMBER = re.compile(r"^[ \t>]*\d{1,9}[.)][ \t]+", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class OracleOptions:
    """Knobs of the alignment (defaults tuned on the dev pages).

    Attributes:
        anchor_size: Tokens per anchor ``k``-gram; blocks with fewer tokens are "short" (step 5).
        max_anchor_occurrences: Anchors found more often than this in the ground truth are ignored.
        diagonal_jump: A chain hit this many tokens off its neighbour's diagonal starts a new segment;
            segments much lighter than the chain are dropped as stray hits.
        overlap_tolerance: Ground-truth tokens two consecutive chosen blocks may share.
        max_block_hits: Anchors of a long block are limited to ``max_block_hits / tokens`` occurrences.
        max_candidates: Places in the ground truth considered per block (besides its longest chain).
        max_short_occurrences: Occurrences considered per short block inside its gap.
        initial_coverage: ``λ`` of the first selection round.
        min_coverage: Lower bound of ``λ`` (no block is main below this coverage).
        rounds: Maximum Dinkelbach rounds.
        large_block_share: Only a block aligned to at least this share of the ground truth may be main with
            a coverage below ``initial_coverage``.
        short_gap_fill: A short block not matching a whole ground-truth line is main when its gap's short
            blocks together cover at least this share of the gap.
    """

    anchor_size: int = 4
    max_anchor_occurrences: int = 24
    diagonal_jump: int = 24
    overlap_tolerance: int = 2
    max_block_hits: int = 50_000
    max_candidates: int = 4
    max_short_occurrences: int = 64
    initial_coverage: float = 0.45
    min_coverage: float = 0.15
    rounds: int = 4
    large_block_share: float = 0.1
    short_gap_fill: float = 0.5

    def __post_init__(self) -> None:
        if self.anchor_size < 1:
            raise ValueError(f"anchor_size must be at least 1, got {self.anchor_size}")
        if not 0.0 < self.min_coverage <= self.initial_coverage < 1.0:
            raise ValueError("need 0 < min_coverage <= initial_coverage < 1")


def alignment_tokens(text: str) -> list[str]:
    """Case-folded word tokens of ``text`` (one per CJK character, punctuation dropped)."""
    return _TOKEN.findall(_SEAM.sub(" ", unicodedata.normalize("NFKC", text)).casefold())


def _ground_truth_lines(ground_truth: str) -> list[list[str]]:
    """The ground truth's lines as token lists, Markdown links, images, tags and list numbers removed."""
    text = _MD_IMAGE.sub(" ", ground_truth)
    text = _MD_LINK.sub(r"\1", text)
    text = _MD_AUTOLINK.sub(" ", text)
    text = _HTML_TAG.sub(" ", text)
    text = _LIST_NUMBER.sub("", text)
    return [tokens for line in text.splitlines() if (tokens := alignment_tokens(line))]


@dataclass(slots=True)
class OracleAlignment:
    """The alignment of one page.

    Attributes:
        main: One boolean per block.
        coverage: Per block, the share of its tokens aligned to the ground truth by the final selection
            (main blocks) or by its own best alignment (other blocks).
        ground_truth_recall: Share of ground-truth tokens covered by the main blocks.
        token_f1: Token-level F1 of the main blocks against the ground truth.
        coverage_threshold: The final ``λ``.
    """

    main: list[bool]
    coverage: list[float]
    ground_truth_recall: float
    token_f1: float
    coverage_threshold: float


@dataclass(slots=True)
class _Chain:
    """One block's alignment: matched block tokens, the ground-truth ranges they cover, and the span."""

    matched: int
    positions: list[tuple[int, int]]
    start: int
    end: int


class _Aligner:
    def __init__(self, ground_truth: str, block_texts: Sequence[str], options: OracleOptions) -> None:
        self.options = options
        k = options.anchor_size
        vocabulary: dict[str, int] = {}
        self.gt: list[int] = []
        self.line_start: set[int] = set()
        self.line_end: set[int] = set()
        for line in _ground_truth_lines(ground_truth):
            self.line_start.add(len(self.gt))
            self.gt.extend(vocabulary.setdefault(token, len(vocabulary)) for token in line)
            self.line_end.add(len(self.gt))
        self.blocks = [
            [vocabulary.setdefault(token, len(vocabulary)) for token in alignment_tokens(text)]
            for text in block_texts
        ]
        self.anchors: dict[tuple[int, ...], list[int]] = {}
        self._positions: dict[int, list[int]] | None = None
        for j in range(len(self.gt) - k + 1):
            self.anchors.setdefault(tuple(self.gt[j : j + k]), []).append(j)

    def positions(self, token: int) -> list[int]:
        """Ground-truth positions of ``token``, ascending."""
        if self._positions is None:
            self._positions = {}
            for j, gt_token in enumerate(self.gt):
                self._positions.setdefault(gt_token, []).append(j)
        return self._positions.get(token, [])

    def hits(self, index: int) -> list[tuple[int, int]]:
        """Anchor hits ``(block position, ground-truth position)``, ground-truth positions descending per block
        position so that an LIS over them takes at most one hit per block position."""
        k, tokens = self.options.anchor_size, self.blocks[index]
        # Long blocks against long, repetitive ground truths: keep the number of hits near linear.
        most = min(
            self.options.max_anchor_occurrences, max(2, self.options.max_block_hits // max(len(tokens), 1))
        )
        hits: list[tuple[int, int]] = []
        for i in range(len(tokens) - k + 1):
            found = self.anchors.get(tuple(tokens[i : i + k]))
            if found and len(found) <= most:
                hits.extend((i, j) for j in reversed(found))
        return hits

    def candidates(self, hits: list[tuple[int, int]]) -> list[_Chain]:
        """Alignments of one block: its longest monotone chain of hits, and when that chain strings together
        several places of the ground truth (text the ground truth repeats), one chain per place."""
        if not hits:
            return []
        whole = self.chain(hits)
        by_diagonal = sorted(hits, key=lambda hit: hit[1] - hit[0])
        clusters: list[list[tuple[int, int]]] = [[by_diagonal[0]]]
        for previous, hit in zip(by_diagonal, by_diagonal[1:], strict=False):
            if (hit[1] - hit[0]) - (previous[1] - previous[0]) > self.options.diagonal_jump:
                clusters.append([])
            clusters[-1].append(hit)
        if len(clusters) == 1:
            return [whole]
        clusters.sort(key=len, reverse=True)
        floor = max(2, len(clusters[0]) // 5)
        found = [whole]
        for cluster in clusters[: self.options.max_candidates]:
            if len(cluster) < floor:
                break
            cluster.sort(key=lambda hit: (hit[0], -hit[1]))
            chain = self.chain(cluster)
            if (chain.start, chain.end) != (whole.start, whole.end):
                found.append(chain)
        return found

    def chain(self, hits: list[tuple[int, int]]) -> _Chain:
        """The longest chain of ``hits`` increasing in both positions, stray hits off its diagonal dropped."""
        k = self.options.anchor_size
        tails: list[int] = []
        tail_hit: list[int] = []
        previous = [-1] * len(hits)
        for h, (_, j) in enumerate(hits):
            slot = bisect_left(tails, j)
            previous[h] = tail_hit[slot - 1] if slot else -1
            if slot == len(tails):
                tails.append(j)
                tail_hit.append(h)
            else:
                tails[slot] = j
                tail_hit[slot] = h
        path: list[tuple[int, int]] = []
        h = tail_hit[-1]
        while h >= 0:
            path.append(hits[h])
            h = previous[h]
        path.reverse()
        path = self._drop_stray_hits(path)
        matched, block_end = 0, 0
        spans: list[list[int]] = []
        for i, j in path:  # both coordinates increase along the path
            matched += i + k - max(i, block_end)
            block_end = i + k
            if spans and j <= spans[-1][1]:
                spans[-1][1] = j + k
            else:
                spans.append([j, j + k])
        return _Chain(matched, [(start, end) for start, end in spans], path[0][1], path[-1][1] + k)

    def _drop_stray_hits(self, path: list[tuple[int, int]]) -> list[tuple[int, int]]:
        segments: list[list[tuple[int, int]]] = [[path[0]]]
        for previous, hit in zip(path, path[1:], strict=False):
            if abs((hit[1] - hit[0]) - (previous[1] - previous[0])) > self.options.diagonal_jump:
                segments.append([])
            segments[-1].append(hit)
        if len(segments) == 1:
            return path
        heaviest = max(len(segment) for segment in segments)
        kept = [
            hit
            for segment in segments
            if len(segment) >= 3 or len(segment) * 4 >= heaviest
            for hit in segment
        ]
        return kept or max(segments, key=len)


def _select_chain(
    candidates: list[tuple[int, float, _Chain]], tolerance: int, size: int
) -> list[tuple[int, _Chain]]:
    """The best chain of ``(block index, gain, alignment)`` candidates (in block order) with increasing spans.

    A Fenwick tree over span ends gives the best chain ending before each span's start. Candidates of one
    block are all scored before any is stored, so a chain holds at most one alignment per block. Values carry
    ``+ε·index`` so that the telescoped ``−ε·(last − first)`` prefers compact chains among equal gains.
    """
    epsilon = 1e-4
    tree: list[tuple[float, int]] = [(float("-inf"), -1)] * (size + 2)
    best_value = [0.0] * len(candidates)
    parent = [-1] * len(candidates)
    group_start = 0
    for c, (index, gain, chain) in enumerate(candidates):
        best, best_parent = 0.0, -1
        position = min(chain.start + tolerance, size) + 1
        while position > 0:
            value, owner = tree[position]
            if owner >= 0 and value - epsilon * index > best:
                best, best_parent = value - epsilon * index, owner
            position -= position & -position
        best_value[c], parent[c] = gain + best, best_parent
        if c + 1 < len(candidates) and candidates[c + 1][0] == index:
            continue
        for stored_c in range(group_start, c + 1):
            position = min(candidates[stored_c][2].end, size) + 1
            stored = best_value[stored_c] + epsilon * index
            while position <= size + 1:
                if stored > tree[position][0]:
                    tree[position] = (stored, stored_c)
                position += position & -position
        group_start = c + 1
    if not candidates:
        return []
    c = max(range(len(candidates)), key=best_value.__getitem__)
    chosen = []
    while c >= 0:
        chosen.append((candidates[c][0], candidates[c][2]))
        c = parent[c]
    return chosen[::-1]


def align_blocks(
    ground_truth: str, block_texts: Sequence[str], options: OracleOptions | None = None
) -> OracleAlignment:
    """Label blocks main where their text is the ground truth's, in reading order.

    Args:
        ground_truth: The page's main content, plain text or Markdown.
        block_texts: The blocks' full texts, in document order.
        options: Alignment knobs.

    Returns:
        The :class:`OracleAlignment` (all blocks ``False`` when the ground truth has no tokens).
    """
    options = options or OracleOptions()
    aligner = _Aligner(ground_truth, block_texts, options)
    n_gt = len(aligner.gt)
    hits = [aligner.hits(index) for index in range(len(block_texts))]
    candidates = [aligner.candidates(block_hits) for block_hits in hits]
    best: tuple[float, list[bool], list[float], int, float] | None = None
    threshold = options.initial_coverage
    tried: set[float] = set()
    for _ in range(options.rounds):
        main, coverage, matched = _select(aligner, hits, candidates, threshold)
        predicted = sum(len(aligner.blocks[i]) for i, flag in enumerate(main) if flag)
        f1 = 2 * matched / (predicted + n_gt) if predicted + n_gt else 0.0
        if best is None or f1 > best[0]:
            best = (f1, main, coverage, matched, threshold)
        tried.add(round(threshold, 3))
        threshold = max(options.min_coverage, min(options.initial_coverage, f1 / 2))
        if round(threshold, 3) in tried:
            break
    f1, main, coverage, matched, threshold = best
    for index, block_candidates in enumerate(candidates):
        if not main[index] and block_candidates:
            coverage[index] = max(chain.matched for chain in block_candidates) / len(aligner.blocks[index])
    return OracleAlignment(main, coverage, matched / n_gt if n_gt else 0.0, f1, threshold)


def _select(
    aligner: _Aligner,
    hits: list[list[tuple[int, int]]],
    candidates: list[list[_Chain]],
    threshold: float,
) -> tuple[list[bool], list[float], int]:
    """One selection round at coverage threshold ``threshold``: steps 3 to 5 of the module docstring."""
    options, blocks = aligner.options, aligner.blocks
    n_gt = len(aligner.gt)
    main = [False] * len(blocks)
    coverage = [0.0] * len(blocks)
    spans: dict[int, tuple[int, int]] = {}
    covered = bytearray(n_gt)
    matched_total = 0

    def accept(index: int, chain: _Chain) -> None:
        nonlocal matched_total
        main[index] = True
        coverage[index] = chain.matched / len(blocks[index])
        spans[index] = (chain.start, chain.end)
        matched_total += chain.matched
        for start, end in chain.positions:
            covered[start:end] = b"\x01" * (end - start)

    # Below the initial coverage only blocks holding a large share of the ground truth are worth their
    # noise (the article inside a container with boilerplate); small half-matching blocks stay out.
    large = options.large_block_share * n_gt

    def gain(index: int, matched: int) -> float:
        needed = threshold if matched >= large else max(threshold, options.initial_coverage)
        return matched - needed * len(blocks[index])

    scored = [
        (index, block_gain, chain)
        for index, block_candidates in enumerate(candidates)
        for chain in block_candidates
        if (block_gain := gain(index, chain.matched)) > 0
    ]
    for index, chain in _select_chain(scored, options.overlap_tolerance, n_gt):
        accept(index, chain)

    # Recovery: out-of-order content, re-aligned on what is still uncovered, best gain first.
    leftovers = sorted(
        (gain(index, max(chain.matched for chain in block_candidates)), index)
        for index, block_candidates in enumerate(candidates)
        if block_candidates and not main[index]
    )
    k = options.anchor_size
    for best_gain, index in reversed(leftovers):
        if best_gain <= 0:
            break
        free = [(i, j) for i, j in hits[index] if not any(covered[j : j + k])]
        if free:
            chain = aligner.chain(free)
            if gain(index, chain.matched) > 0:
                accept(index, chain)

    matched_total += _select_short_blocks(aligner, main, coverage, spans, covered)
    return main, coverage, matched_total


def _select_short_blocks(
    aligner: _Aligner,
    main: list[bool],
    coverage: list[float],
    spans: dict[int, tuple[int, int]],
    covered: bytearray,
) -> int:
    """Step 5: blocks too short to anchor, matched exactly inside the gap between their chosen neighbours."""
    k, gt, blocks = aligner.options.anchor_size, aligner.gt, aligner.blocks
    chosen = sorted(spans)
    matched_total = 0
    # Group the short blocks by the gap (previous chosen, next chosen) they fall into.
    gaps: dict[int, list[int]] = {}
    for index, tokens in enumerate(blocks):
        if 0 < len(tokens) < k and not main[index]:
            gaps.setdefault(bisect_left(chosen, index), []).append(index)
    for slot, members in gaps.items():
        low = spans[chosen[slot - 1]][1] if slot > 0 else 0
        high = spans[chosen[slot]][0] if slot < len(chosen) else len(gt)
        if low >= high:
            continue
        free = covered.count(0, low, high)
        if not free:
            continue
        found = _align_short_blocks(aligner, members, low, high, covered)
        filled = sum(len(blocks[index]) for index, _, _ in found)
        fills_gap = filled >= aligner.options.short_gap_fill * free
        for index, j, anchored in found:
            if anchored or fills_gap:
                width = len(blocks[index])
                main[index] = True
                coverage[index] = 1.0
                matched_total += width
                for position in range(j, j + width):
                    covered[position] = 1
    return matched_total


def _align_short_blocks(
    aligner: _Aligner, members: list[int], low: int, high: int, covered: bytearray
) -> list[tuple[int, int, bool]]:
    """Exact occurrences of short blocks in ``gt[low:high]``, one per block, in order, as many tokens as possible.

    Returns ``(block index, position, anchored)`` where ``anchored`` says the occurrence starts or ends a
    ground-truth line (a heading, a list item, a label: strong evidence for a short text).
    """
    gt, blocks = aligner.gt, aligner.blocks
    scored: list[tuple[int, float, _Chain]] = []
    anchored_at: dict[tuple[int, int], bool] = {}
    for index in members:
        tokens = blocks[index]
        width = len(tokens)
        occurrences = aligner.positions(tokens[0])
        found = []
        for j in occurrences[bisect_left(occurrences, low) :]:
            if j > high - width or len(found) == aligner.options.max_short_occurrences:
                break
            if gt[j : j + width] == tokens and not any(covered[j : j + width]):
                found.append(j)
        for j in reversed(found):
            anchored = j in aligner.line_start or j + width in aligner.line_end
            anchored_at[index, j] = anchored
            chain = _Chain(width, [], j - low, j - low + width)
            scored.append((index, width + 0.5 * anchored, chain))
    chosen = _select_chain(scored, 0, high - low)
    return [(index, chain.start + low, anchored_at[index, chain.start + low]) for index, chain in chosen]


@register_labeler("oracle")
class OracleLabeler(BlockLabeler):
    """Labels blocks by aligning ``Page.ground_truth`` to them (see the module docstring).

    ``Labels.confidence`` holds each block's coverage (share of its tokens aligned to the ground truth).
    A page without ground truth gets ``Labels.failed("no ground truth")``.
    """

    name = "oracle"

    def __init__(self, options: OracleOptions | None = None, **option_fields) -> None:
        super().__init__()
        self.options = options or OracleOptions(**option_fields)

    def label_batch(self, requests: Sequence[LabelRequest]) -> list[Labels]:
        results = []
        for request in requests:
            ground_truth = request.page.ground_truth
            if ground_truth is None:
                results.append(Labels.failed("no ground truth"))
                continue
            texts = [block.text for block in request.simplified.blocks]
            if not any(texts) and any(
                _HTML_TAG.sub("", block.simplified_html).strip() for block in request.simplified.blocks
            ):
                results.append(
                    Labels.failed("blocks carry no text: simplify with SimplifyOptions(block_text=True)")
                )
                continue
            try:
                alignment = align_blocks(ground_truth, texts, self.options)
            except Exception as error:  # noqa: BLE001 - one odd page must not fail the batch
                results.append(Labels.failed(f"oracle alignment failed: {type(error).__name__}: {error}"))
                continue
            results.append(Labels(main=alignment.main, confidence=alignment.coverage))
        return results
