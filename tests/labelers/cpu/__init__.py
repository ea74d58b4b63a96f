"""Tests of the CPU labeler; :func:`fake_page` makes training pages without simplifying any HTML,
:func:`toy_data` a small learnable block matrix."""

from __future__ import annotations

import numpy as np

from dripper.labelers.cpu.features import PageFeatures
from dripper.labelers.cpu.training_set import PageExample


def fake_page(doc_id: str, source: str, site: str, n_blocks: int) -> PageExample:
    """A page of ``n_blocks`` one-feature blocks, none of them main."""
    features = PageFeatures(
        np.zeros((n_blocks, 1), np.float32),
        np.ones(n_blocks, np.float32),
        np.zeros((n_blocks, 1), np.int32),
        np.zeros(n_blocks, np.int32),
    )
    return PageExample(doc_id, source, None, site, features, np.zeros(n_blocks, bool))


def toy_data(n: int = 600, width: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, labels (a non-linear rule of three columns) and unit weights."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, width)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0.8).astype(bool)
    return x, y, np.ones(n)
