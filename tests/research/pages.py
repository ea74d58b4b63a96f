"""Tiny pages for the research studies' tests."""

from __future__ import annotations

import numpy as np

from dripper.labelers.cpu.features import FEATURE_NAMES, PageFeatures


def page_features(chars: list[int], link_share: float = 0.25) -> PageFeatures:
    """Features of a page whose blocks have ``chars`` characters; every block reads ``page_link_share``."""
    n = len(chars)
    values = np.zeros((n, len(FEATURE_NAMES)), np.float32)
    values[:, FEATURE_NAMES.index("page_link_share")] = link_share
    return PageFeatures(
        values, np.array(chars, np.float32), np.zeros((n, 1), np.int32), np.zeros(n, np.int32)
    )
