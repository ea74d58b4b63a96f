"""Training pages for the ``cpu_seq`` labeler: the ``cpu`` labeler's training pages plus each block's
hashed tokens, and the trees' out-of-fold logits the network is stacked on.

The tokens are kept as raw 32-bit hashes (``block_tokens(page, 2**32)``) so that one built set serves any
``buckets`` (``hash % buckets`` is taken when training).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dripper.labelers.cpu.training_set import (
    PageExample,
    TrainingSet,
    example_with_page,
    file_records,
    file_sha256,
)
from dripper.labelers.cpu_seq.network import LOGIT_CLIP
from dripper.labelers.cpu_seq.tokens import BlockTokens, block_tokens

__all__ = ["RAW_BUCKETS", "SequenceSet", "build_sequence_set", "logit", "stage_logits"]

#: Token ids as stored in a built set: the whole 32-bit hash.
RAW_BUCKETS = 1 << 32


@dataclass
class SequenceSet:
    """The training pages, their tokens (raw hashes) and the files they came from.

    Attributes:
        training: The ``cpu`` labeler's :class:`TrainingSet` of the same pages.
        tokens: Per page of ``training.pages``, its :class:`BlockTokens`.
    """

    training: TrainingSet
    tokens: list[BlockTokens]

    @property
    def pages(self) -> list[PageExample]:
        return self.training.pages


def logit(probability: np.ndarray, clip: float = LOGIT_CLIP) -> np.ndarray:
    """Log-odds of probabilities, clipped to ``[-clip, clip]`` (a tree probability of 1.0 included)."""
    p = np.clip(np.asarray(probability, np.float64), 1e-12, 1 - 1e-12)
    return np.clip(np.log(p) - np.log1p(-p), -clip, clip).astype(np.float32)


def stage_logits(stage1: Sequence[np.ndarray], stage2: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per page, ``(n_blocks, 2)`` tree logits from the two stages' probabilities (a cross-validation's out
    of fold ones): what the network reads beside the block features."""
    return [np.stack([logit(a), logit(b)], axis=1) for a, b in zip(stage1, stage2, strict=True)]


def _examples(records: list[dict]) -> list[tuple[PageExample, BlockTokens] | str]:
    out: list = []
    for record in records:
        example, simplified = example_with_page(record)
        out.append(example if isinstance(example, str) else (example, block_tokens(simplified, RAW_BUCKETS)))
    return out


def build_sequence_set(
    paths: Sequence[str | Path],
    workers: int = 1,
    exclude_ids: Iterable[str] = (),
    limit: int | None = None,
    progress: bool = False,
) -> SequenceSet:
    """Like :func:`dripper.labelers.cpu.training_set.build_training_set`, with every block's tokens.

    Args:
        paths: Dev-format JSONL(.gz) files.
        workers: Processes (1: this process).
        exclude_ids: Record ids not to use.
        limit: At most this many records per file.
        progress: A line per file on stderr.
    """
    excluded = set(exclude_ids)
    training = TrainingSet(pages=[], skipped=Counter())
    tokens: list[BlockTokens] = []
    for path in map(Path, paths):
        records = file_records(path, excluded, limit, training.skipped)
        batches = [records[i : i + 16] for i in range(0, len(records), 16)]
        if workers > 1:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                results = [item for batch in pool.map(_examples, batches) for item in batch]
        else:
            results = [item for batch in batches for item in _examples(batch)]
        used = 0
        for result in results:
            if isinstance(result, str):
                training.skipped[result] += 1
                continue
            training.pages.append(result[0])
            tokens.append(result[1])
            used += 1
        training.files.append(
            {"path": str(path), "sha256": file_sha256(path), "records": len(records), "used": used}
        )
        if progress:
            print(f"{path}: {len(records)} records, {used} used", file=sys.stderr, flush=True)
    return SequenceSet(training, tokens)
