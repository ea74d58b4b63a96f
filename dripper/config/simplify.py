"""The simplify stage's config: which WARC files, how they are sharded, what is too large, how many workers."""

from __future__ import annotations

from pydantic import model_validator

from dripper.config.settings import StageConfig, setting
from dripper.io.warc import DEFAULT_MAX_PAYLOAD_BYTES

#: Decoded pages larger than this get status ``too_large`` (20 MB).
DEFAULT_MAX_PAGE_BYTES = 20_000_000


class SimplifyStageConfig(StageConfig):
    """WARC files → ``{root}/simplified/``.

    Attributes:
        warc_count: Take this many WARC files of the inputs (a prefix of their seeded order).
        warc_fraction: Or this share of them.
        seed: The order's seed: the same seed picks the same files, a larger count keeps a smaller one's.
        warcs_per_shard: WARC files per shard (one task each).
        max_payload_bytes: Larger WARC payloads are dropped unread as ``too_large``.
        max_page_bytes: Larger decoded pages get status ``too_large``.
        keep_truncated: Keep records marked truncated as pages (counted as ``kept_truncated``).
        workers: Dask ``LocalCluster`` processes (``0``: in the calling process; empty: one per core).
    """

    stage = "simplify"
    form_prefix = "simplify_"
    form_section = "WARC selection"

    warc_count: int | None = setting(
        None,
        "Take this many WARC files (about 1 GB and 30-50k pages each); empty: use the fraction, both empty: "
        "every file",
        title="Number of WARC files",
        prefixed=False,
        env="DRIPPER_WARC_COUNT",
        ge=1,
    )
    warc_fraction: float | None = setting(
        None,
        "Or take this share of the WARC files (leave the number empty)",
        title="Fraction of WARC files",
        prefixed=False,
        gt=0,
        le=1,
    )
    seed: int = setting(
        0,
        "Selection seed: the same seed picks the same files; a larger count keeps the smaller selection as "
        "its prefix",
        title="Seed",
        prefixed=False,
        ge=0,
    )
    warcs_per_shard: int = setting(
        1,
        "WARC files per shard (one task each)",
        title="WARC files per shard",
        prefixed=False,
        ge=1,
    )
    max_payload_bytes: int = setting(
        DEFAULT_MAX_PAYLOAD_BYTES,
        "WARC payloads larger than this are dropped unread as too_large",
        title="Largest WARC payload (bytes)",
        ge=1,
    )
    max_page_bytes: int = setting(
        DEFAULT_MAX_PAGE_BYTES,
        "Decoded pages larger than this get status too_large",
        title="Largest page (bytes)",
        ge=1,
    )
    keep_truncated: bool = setting(
        False,
        "Keep WARC records marked truncated (Common Crawl cuts payloads at 1 MiB) as pages, counted apart as "
        "kept_truncated; off: they are dropped as truncated",
        title="Keep truncated records",
    )
    workers: int | None = setting(
        None,
        "Dask LocalCluster worker processes when no scheduler is given (0: in the task's process; empty: one "
        "per core)",
        title="Simplify workers",
        env="DRIPPER_DASK_WORKERS",
        ge=0,
        le=256,
    )

    @model_validator(mode="after")
    def _one_selection(self) -> SimplifyStageConfig:
        if self.warc_count is not None and self.warc_fraction is not None:
            raise ValueError("give warc_count or warc_fraction, not both")
        return self
