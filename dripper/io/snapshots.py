"""Common Crawl snapshots: list crawls, read a crawl's WARC listing, pick WARC files deterministically.

A *base* is where a crawl's files live, laid out as on Common Crawl (``crawl-data/{crawl_id}/warc.paths.gz``,
``crawl-data/{crawl_id}/segments/…/warc/*.warc.gz``):

- ``s3://commoncrawl/`` (anonymous; also spelt ``"s3"``),
- ``https://data.commoncrawl.org/`` (also spelt ``"https"``),
- a local folder or any other fsspec URL with the same layout (the bundled ``data/sample``).

Selection is by rank: every path gets a rank from ``sha256(seed, path)`` and the lowest ranks are taken.
The same paths and seed give the same selection on any machine, and a larger ``count`` keeps the smaller
selection as its prefix (shard numbers assigned in selection order stay valid when a run grows).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any

from dripper.io.storage import join_path, open_url

__all__ = [
    "COLLINFO_URL",
    "COMMONCRAWL_HTTPS",
    "COMMONCRAWL_S3",
    "CrawlInfo",
    "list_crawls",
    "parse_collinfo",
    "read_warc_paths",
    "resolve_base",
    "select_snapshot_warcs",
    "select_warc_paths",
    "warc_urls",
]

COMMONCRAWL_S3 = "s3://commoncrawl/"
COMMONCRAWL_HTTPS = "https://data.commoncrawl.org/"
COLLINFO_URL = "https://index.commoncrawl.org/collinfo.json"
_BASE_ALIASES = {"s3": COMMONCRAWL_S3, "https": COMMONCRAWL_HTTPS, "http": COMMONCRAWL_HTTPS}
_CRAWL_ID = re.compile(r"^CC-MAIN-(\d{4})-(\d{1,2})$")


@dataclass(frozen=True, slots=True)
class CrawlInfo:
    """One entry of ``collinfo.json``."""

    id: str
    name: str = ""
    extra: tuple[tuple[str, Any], ...] = ()

    @property
    def sort_key(self) -> tuple[int, int, int, str]:
        """Newest first when sorted ascending: ``CC-MAIN-YYYY-WW`` by (year, week); other ids after them."""
        match = _CRAWL_ID.match(self.id)
        if match:
            return (0, -int(match.group(1)), -int(match.group(2)), self.id)
        return (1, 0, 0, self.id)


def parse_collinfo(data: str | bytes | list[dict[str, Any]]) -> list[CrawlInfo]:
    """Parse Common Crawl's ``collinfo.json`` (a JSON list of ``{"id": "CC-MAIN-2025-13", "name": …}``).

    Returns the crawls newest first (``CC-MAIN-YYYY-WW`` ids by year and week, then any other ids in
    name order). Raises ``ValueError`` on anything that is not a list of objects with an ``id``.
    """
    entries = json.loads(data) if isinstance(data, str | bytes) else data
    if not isinstance(entries, list):
        raise ValueError(f"collinfo.json must be a JSON list of crawls, got {type(entries).__name__}")
    crawls = []
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not entry["id"]:
            raise ValueError(f"collinfo.json entry {position} has no string 'id': {entry!r:.200}")
        extra = tuple(sorted((k, v) for k, v in entry.items() if k not in ("id", "name") and _hashable(v)))
        crawls.append(CrawlInfo(id=entry["id"], name=str(entry.get("name") or ""), extra=extra))
    return sorted(crawls, key=lambda crawl: crawl.sort_key)


def _hashable(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


def list_crawls(
    collinfo: str = COLLINFO_URL, storage_options: dict[str, Any] | None = None
) -> list[CrawlInfo]:
    """Read a ``collinfo.json`` (URL or path, e.g. ``data/sample/collinfo.json``) and parse it."""
    with open_url(collinfo, "rb", storage_options) as f:
        return parse_collinfo(f.read())


def resolve_base(base: str | os.PathLike[str]) -> str:
    """``"s3"``/``"https"`` → Common Crawl's bucket/mirror; anything else as given (``~`` expanded)."""
    text = os.fspath(base)
    text = _BASE_ALIASES.get(text.lower(), text)
    if "://" not in text:
        text = os.path.expanduser(text)
    return text


def read_warc_paths(
    base: str | os.PathLike[str], crawl_id: str, storage_options: dict[str, Any] | None = None
) -> list[str]:
    """The WARC paths of a crawl, relative to the base, in listing order (``crawl-data/{id}/warc.paths.gz``)."""
    listing = join_path(resolve_base(base), "crawl-data", crawl_id, "warc.paths.gz")
    try:
        with open_url(listing, "rb", storage_options) as raw, gzip.open(raw, "rt", encoding="utf-8") as text:
            return [line.strip() for line in text if line.strip()]
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"{listing} not found: is {crawl_id!r} a crawl id under {base} (see list_crawls)?"
        ) from exc


def _rank(seed: int | str, path: str) -> bytes:
    return hashlib.sha256(f"{seed}\x00{path}".encode()).digest()


def select_warc_paths(
    paths: list[str],
    *,
    count: int | None = None,
    fraction: float | None = None,
    seed: int | str = 0,
) -> list[str]:
    """Pick WARC paths deterministically.

    Args:
        paths: The crawl's WARC paths (duplicates are ignored).
        count: How many to take (capped at ``len(paths)``).
        fraction: Or which share to take, ``0 < fraction <= 1``: ``ceil(fraction * len(paths))`` paths.
        seed: Changes the selection; the same seed gives the same selection.

    Returns:
        The selected paths in rank order; the selection for ``count=n`` is the first ``n`` of the
        selection for any larger count. With neither ``count`` nor ``fraction``, all paths in rank order.
    """
    if count is not None and fraction is not None:
        raise ValueError("give count or fraction, not both")
    unique = list(dict.fromkeys(paths))
    if count is not None:
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        take = min(count, len(unique))
    elif fraction is not None:
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        take = min(len(unique), math.ceil(fraction * len(unique)))
    else:
        take = len(unique)
    return sorted(unique, key=lambda path: _rank(seed, path))[:take]


def warc_urls(base: str | os.PathLike[str], paths: list[str]) -> list[str]:
    """Full URLs (or local paths) of WARC paths under a base."""
    root = resolve_base(base)
    return [join_path(root, path) for path in paths]


def select_snapshot_warcs(
    crawl_id: str,
    base: str | os.PathLike[str] = COMMONCRAWL_S3,
    *,
    count: int | None = None,
    fraction: float | None = None,
    seed: int | str = 0,
    storage_options: dict[str, Any] | None = None,
) -> list[str]:
    """Read a crawl's listing under ``base`` and return the full URLs of the selected WARC files."""
    paths = read_warc_paths(base, crawl_id, storage_options)
    return warc_urls(base, select_warc_paths(paths, count=count, fraction=fraction, seed=seed))
