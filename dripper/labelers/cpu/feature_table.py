"""The CPU labeler's first-stage feature table: its columns, in order, and :class:`PageFeatures`.

:mod:`~dripper.labelers.cpu.features` fills the table and :mod:`~dripper.labelers.cpu.context` reads it
for the second stage; both import it from here. The column order is part of the shipped model: a model
file names the columns it was trained on, and a new column goes at the end of a group, never between.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dripper.labelers.cpu.structure import STRUCTURE_FEATURE_NAMES
from dripper.labelers.cpu.text_stats import TEXT_STAT_NAMES
from dripper.labelers.cpu.vocabulary import BLOCK_TAGS, GROUP_NAMES, SEMANTIC_TAGS

__all__ = [
    "CONTAINER_LEVELS",
    "CONTAINER_NAMES",
    "FEATURE_INDEX",
    "FEATURE_NAMES",
    "NEIGHBOUR_NAMES",
    "NEIGHBOUR_OFFSETS",
    "SUBTREE_NAMES",
    "PageFeatures",
]

#: Neighbour offsets whose block statistics are copied as features.
NEIGHBOUR_OFFSETS = (-3, -2, -1, 1, 2, 3)
#: Ancestor levels (1 = parent) whose container statistics are features.
CONTAINER_LEVELS = (1, 2, 3, 4, 5, 6)

#: Counts over a block's subtree (links, images, list items, cells, form controls, line breaks).
SUBTREE_NAMES = (
    "n_links",
    "link_share",
    "n_images",
    "n_list_items",
    "n_cells",
    "n_form_controls",
    "n_breaks",
)
#: Statistics copied from each neighbour in :data:`NEIGHBOUR_OFFSETS`.
NEIGHBOUR_NAMES = ("log_length", "link_share", "sentence_punct_share", "is_heading", "tree_distance")
#: Statistics of the container at each level in :data:`CONTAINER_LEVELS`.
CONTAINER_NAMES = ("text_share", "dense_share", "block_share", "link_share", "log_children")

FEATURE_NAMES: tuple[str, ...] = (
    *(f"tag_{tag}" for tag in BLOCK_TAGS),
    "tag_other",
    "log_length",
    "chars_page_share",
    "chars_rank",
    "log_length_vs_page",
    "chars_vs_max",
    *TEXT_STAT_NAMES,
    *SUBTREE_NAMES,
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
    *(f"kw_{group}" for group in GROUP_NAMES),
    *(f"kw_self_{group}" for group in GROUP_NAMES),
    *(f"anc_{tag}" for tag in SEMANTIC_TAGS),
    *(f"c{level}_{name}" for level in CONTAINER_LEVELS for name in CONTAINER_NAMES),
    "best_container_inside",
    "best_container_distance",
    *(f"n{offset:+d}_{name}" for offset in NEIGHBOUR_OFFSETS for name in NEIGHBOUR_NAMES),
    "page_log_blocks",
    "page_log_length",
    "page_link_share",
    "page_dense_share",
    "page_n_articles",
    "page_n_h1",
    "page_heading_share",
    "page_max_share",
    *STRUCTURE_FEATURE_NAMES,
)
#: ``{feature name: its column in PageFeatures.values}``.
FEATURE_INDEX = {name: index for index, name in enumerate(FEATURE_NAMES)}


@dataclass(slots=True)
class PageFeatures:
    """The features of one page's blocks and the structure the second stage aggregates over.

    Attributes:
        values: ``(n_blocks, len(FEATURE_NAMES))`` float32 first-stage features.
        chars: ``(n_blocks,)`` characters of visible text per block.
        containers: ``(n_blocks, len(CONTEXT_LEVELS))`` page-local ids of the block's ancestor at each level
            of :data:`~dripper.labelers.cpu.context.CONTEXT_LEVELS` (blocks sharing an id share that
            container; ``-1`` above the root).
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

    def column(self, name: str) -> np.ndarray:
        """The first-stage feature ``name`` (one of :data:`FEATURE_NAMES`) of every block."""
        return self.values[:, FEATURE_INDEX[name]]
