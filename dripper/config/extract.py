"""The extract stage's config: pages per labeler call, labeler processes, the fallback."""

from __future__ import annotations

from typing import Literal

from dripper.config.settings import StageConfig, setting

#: The extractor for pages the labeler cannot label.
DEFAULT_FALLBACK = "trafilatura"


class ExtractStageConfig(StageConfig):
    """``{root}/simplified/`` → ``{root}/extractors/{name}/extracted/``.

    Attributes:
        batch_size: Pages per labeler call (and per parquet row group).
        workers: Processes, each with its own labeler (``0``: in the calling process).
        fallback: Extractor for pages the labeler cannot label (``none``: leave them empty).
        fallback_on_empty: Also fall back when no block is labelled main content.
    """

    stage = "extract"
    form_prefix = "extract_"
    form_section = "Extraction"

    batch_size: int = setting(64, "Pages per labeler call", title="Pages per labeler call", ge=1)
    workers: int = setting(
        1,
        "Dask LocalCluster processes of the extract task when no scheduler is given, each with its own "
        "labeler (one per GPU for an LM labeler; 0: in the task's process)",
        title="Extract workers",
        env="DRIPPER_EXTRACT_WORKERS",
        ge=0,
        le=256,
    )
    fallback: Literal["trafilatura", "empty", "none"] = setting(
        DEFAULT_FALLBACK,
        "Extractor for pages the labeler cannot label (none: leave them empty)",
        title="Fallback",
        prefixed=False,
    )
    fallback_on_empty: bool = setting(
        False,
        "Also use the fallback when no block is labelled main content",
        title="Fall back on empty output",
        prefixed=False,
    )
