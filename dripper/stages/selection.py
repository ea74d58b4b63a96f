"""Which crawls and WARC files a build takes: the known-crawls state of the snapshot refresh, and a
selection of a crawl's WARC files planned into simplify shards and batches of shards (one simplify task
each) with the name of its folder.

The operators of ``cc_snapshot_refresh`` and ``corpus_build``'s ``select_warcs`` keep the state and plans
in files; what they hold is computed here. Only the standard library is imported at module load.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dripper.config.simplify import SimplifyStageConfig

__all__ = [
    "WHOLE_CRAWL_GUARD",
    "WholeCrawlNotAsked",
    "new_crawls",
    "plan_selection",
    "record_known_crawls",
    "selection_key",
]

#: A selection that names no count or fraction takes every file only of a listing this small: a whole
#: crawl (about 100,000 files) must be asked for (``warc_fraction`` 1).
WHOLE_CRAWL_GUARD = 1000


class WholeCrawlNotAsked(ValueError):
    """A large listing and neither a count nor a fraction: the whole crawl must be asked for."""


def new_crawls(listed: Sequence[str], known: dict[str, Any], max_new: int) -> tuple[list[str], list[str]]:
    """The ``listed`` crawls not ``known``, and those of them to publish: the first ``max_new``."""
    new = [crawl_id for crawl_id in listed if crawl_id not in known]
    return new, new[: max(0, int(max_new))]


def record_known_crawls(
    state: dict[str, Any],
    listed: Sequence[str],
    published: Sequence[str],
    run_id: str,
    manifest_path: Callable[[str], str],
    now: str,
) -> tuple[dict[str, Any], int]:
    """The known-crawls state with ``listed`` crawls added (``published`` ones with the run and the
    manifest that published them); returns it and the number of crawls added."""
    crawls = dict((state or {}).get("crawls") or {})
    added = 0
    for crawl_id in listed or []:
        if crawl_id not in crawls:
            crawls[crawl_id] = {"first_seen": now}
            added += 1
    for crawl_id in published or []:
        crawls.setdefault(crawl_id, {"first_seen": now}).update(
            published_by=run_id, manifest=manifest_path(crawl_id)
        )
    return {"crawls": crawls, "updated_at": now}, added


def selection_key(
    count: int | None, fraction: float | None, seed: int | str, warcs_per_shard: int = 1
) -> str:
    """``n4-seed0``, ``f0.01-seed7``, ``all-seed0`` (``-w2`` with 2 WARC files per shard)."""
    from dripper.config.extractor import slug

    if count is not None:
        key = f"n{int(count)}"
    elif fraction is not None:
        key = f"f{float(fraction):g}"
    else:
        key = "all"
    key += f"-seed{slug(str(seed))}"
    if int(warcs_per_shard) != 1:
        key += f"-w{int(warcs_per_shard)}"
    return key


def plan_selection(
    crawl_id: str,
    base: str,
    entries: Sequence[str],
    config: SimplifyStageConfig,
    *,
    warcs_per_task: int = 2,
) -> dict[str, Any]:
    """Pick WARC files of a crawl's listing (``entries``, relative to ``base``) deterministically and plan
    the simplify shards and batches of shards, as ``config`` (its ``warc_count`` or ``warc_fraction``,
    ``seed`` and ``warcs_per_shard``) says.

    Returns ``{"key", "plan", "batches"}``: the selection's folder name (:func:`selection_key`), the plan
    (``_selection.json`` but for ``planned_at``) and the batches (``batch``, ``first_shard``, ``shards``).

    Raises:
        ValueError: ``warcs_per_task`` below 1, or an empty selection.
        WholeCrawlNotAsked: neither a count nor a fraction, for a listing over :data:`WHOLE_CRAWL_GUARD` files.
    """
    from dripper.io.snapshots import select_warc_paths, warc_urls
    from dripper.stages.simplify import plan_simplify_shards

    count, fraction, seed = config.warc_count, config.warc_fraction, config.seed
    warcs_per_shard, warcs_per_task = config.warcs_per_shard, int(warcs_per_task)
    if warcs_per_task < 1:
        raise ValueError(f"warcs_per_task must be at least 1, got {warcs_per_task}")
    if count is None and fraction is None and len(entries) > WHOLE_CRAWL_GUARD:
        raise WholeCrawlNotAsked(
            f"{crawl_id} lists {len(entries):,} WARC files and neither warc_count nor warc_fraction is "
            "set: give the number of files (or DRIPPER_WARC_COUNT for new-crawl builds), or "
            "warc_fraction 1 for the whole crawl"
        )
    chosen = select_warc_paths(list(entries), count=count, fraction=fraction, seed=seed)
    if not chosen:
        raise ValueError(f"{crawl_id}: the selection is empty (the crawl lists {len(entries)} WARC files)")
    files = warc_urls(base, chosen)
    shards = plan_simplify_shards(files, warcs_per_shard)
    shards_per_task = max(1, math.ceil(warcs_per_task / warcs_per_shard))
    batches = [
        {"batch": b, "first_shard": first, "shards": min(shards_per_task, len(shards) - first)}
        for b, first in enumerate(range(0, len(shards), shards_per_task))
    ]
    plan = {
        "crawl_id": crawl_id,
        "crawl_base": base,
        "count": count,
        "fraction": fraction,
        "seed": seed,
        "warcs_per_shard": warcs_per_shard,
        "warc_files": files,
        "shards": shards,
    }
    return {"key": selection_key(count, fraction, seed, warcs_per_shard), "plan": plan, "batches": batches}
