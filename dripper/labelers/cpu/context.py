"""Second-stage features of the CPU labeler: the first stage's probabilities around each block.

Collective smoothing: a block in a container whose other blocks are main is likely main, a block past the
end of the main run is likely not, whatever it looks like by itself.
"""

from __future__ import annotations

import numpy as np

from dripper.labelers.cpu.feature_table import PageFeatures

__all__ = ["CONTEXT_FEATURE_NAMES", "CONTEXT_LEVELS", "context_features"]

#: Ancestor levels over which the second stage averages first-stage probabilities.
CONTEXT_LEVELS = (1, 2, 3, 4, 5, 6, 8)
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
    "main_before",
    "main_after",
    "main_before_outside_comments",
    "page_comment_main_share",
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
    column += 3
    # The main run's extent: the share of the expected main text before and after the block (a block past
    # the run's end has everything before it, however much it looks like text itself).
    before_main = np.cumsum(expected_main) - expected_main
    out[:, column] = before_main / total_main
    out[:, column + 1] = (total_main - before_main - expected_main) / total_main
    column += 2
    # Reader comments: an article's come after main text outside any comment-classed region, a forum
    # thread's posts are (nearly) all the main text there is.
    in_comments = features.column("kw_comment") > 0
    outside = np.where(in_comments, 0.0, expected_main)
    out[:, column] = (np.cumsum(outside) - outside) / total_main
    out[:, column + 1] = float(expected_main[in_comments].sum()) / total_main
    return out
