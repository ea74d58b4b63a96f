"""Readers for evaluation data: this project's dev format and WebMainBench's own JSONL schema.

Both yield :class:`BenchPage` records. The schema is detected per file from its first record, so a run can
mix ``dev.jsonl.gz`` with a WebMainBench download.

* Dev format (the development sets' README (not distributed)): ``id``, ``url``, ``html``, ``ground_truth_text`` (null for
  snippet pages), ``ground_truth_format``, ``with_snippets``/``without_snippets``, ``language``, ``source``,
  and for ``dev_hard`` ``page_type``.
* WebMainBench (docs/upstream.md#webmainbench-data): ``track_id``, ``url``, ``html``,
  ``convert_main_content``, ``groundtruth_content`` (calibrated, 545 subset only), ``meta`` with
  ``language``, ``style``, ``level``, ``table``, ``code``, ``equation``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEV_SCHEMA = "dev"
WEBMAINBENCH_SCHEMA = "webmainbench"

# Injected by WebMainBench's browser annotation plugin (issue WMB#68); WebMainBench HEAD strips them before
# extraction because they move trafilatura's text_edit from 0.69 to 0.78.
_ANNOTATION_TAGS = re.compile(r"</?(?:marked-tail|marked-text|marked-inline)\b[^>]*>", re.IGNORECASE)
_ANNOTATION_ATTRS = re.compile(r"\s+data-anno-uid(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s>]+))?", re.IGNORECASE)

# Group keys that are record attributes; any other key is looked up in ``meta``.
_RECORD_GROUP_KEYS = ("source", "page_type", "language", "format", "schema")
NONE_GROUP = "(none)"


@dataclass(slots=True)
class BenchPage:
    """One evaluation page.

    Attributes:
        id: Page id, unique within its file.
        url: The page's URL, or ``None``.
        html: The raw HTML (annotation artefacts already removed for WebMainBench records).
        ground_truth: The reference main content (text or Markdown), or ``None`` for snippet-only pages.
        format: How the ground truth is written: ``text``, ``markdown`` or ``snippets`` (first word of the
            dev format's ``ground_truth_format``).
        with_snippets: Strings that must appear in a correct extraction.
        without_snippets: Strings that must not appear.
        source: Collection the page comes from (``webmainbench`` for WebMainBench records).
        page_type: Page type when known (dev_hard's ``page_type``, WebMainBench's ``meta.style``).
        language: ISO 639-1 code when known.
        schema: Which reader produced the record (``dev`` or ``webmainbench``).
        meta: Everything else: WebMainBench's ``meta`` (``level``, ``style``, ``table``, ...) or the dev
            format's extra fields (``title``, ``ground_truth_format``, ...), minus the HTML.
    """

    id: str
    url: str | None
    html: str
    ground_truth: str | None
    format: str
    with_snippets: tuple[str, ...] = ()
    without_snippets: tuple[str, ...] = ()
    source: str | None = None
    page_type: str | None = None
    language: str | None = None
    schema: str = DEV_SCHEMA
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def has_full_text(self) -> bool:
        return self.ground_truth is not None

    @property
    def has_snippets(self) -> bool:
        return bool(self.with_snippets or self.without_snippets)

    def group_value(self, key: str) -> str:
        """The page's value for a report grouping key (``source``, ``page_type``, ``level``, ``style``, ...).

        Record attributes are used first, then ``meta``; list values (WebMainBench's ``table``/``code``/
        ``equation``) are joined with ``+``; missing or empty values become ``"(none)"``.
        """
        value = getattr(self, key) if key in _RECORD_GROUP_KEYS else self.meta.get(key)
        if isinstance(value, list | tuple):
            value = "+".join(str(v) for v in value)
        if value is None or value == "":
            return NONE_GROUP
        return str(value)


def strip_annotation_artifacts(html: str) -> str:
    """Remove WebMainBench's ``<marked-*>`` tags and ``data-anno-uid`` attributes, as WebMainBench HEAD does."""
    return _ANNOTATION_ATTRS.sub("", _ANNOTATION_TAGS.sub("", html))


def _iter_json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` of a JSONL(.gz) file (:class:`dripper.io.jsonl.JsonlReader`: gzip by its
    magic bytes); a line that is no JSON object, or a damaged file, raises naming the file and line."""
    from dripper.io.jsonl import JsonlError, JsonlReader

    reader = JsonlReader(path)
    for line_no, record in reader:
        if isinstance(record, JsonlError):
            problem = "not valid JSON" if record.message.startswith("bad JSON") else record.message
            raise ValueError(f"{path}:{line_no}: {problem} ({record.message}); expected one object per line")
        yield line_no, record
    if reader.damage:
        raise ValueError(f"{path}: {reader.damage} after {reader.records} records")


def detect_schema(record: dict[str, Any]) -> str:
    """Tell which schema a record follows from its keys.

    Raises:
        ValueError: When the record matches neither schema; the message lists the keys found.
    """
    if "ground_truth_text" in record or "ground_truth_format" in record:
        return DEV_SCHEMA
    if "track_id" in record or "convert_main_content" in record or "groundtruth_content" in record:
        return WEBMAINBENCH_SCHEMA
    raise ValueError(
        f"unknown record schema with keys {sorted(record)}; expected the dev format (ground_truth_text, "
        "ground_truth_format) or WebMainBench (track_id, convert_main_content, groundtruth_content)"
    )


def _as_snippets(value: Any) -> tuple[str, ...]:
    if not value:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


_DEV_CORE_KEYS = {
    "id",
    "url",
    "html",
    "ground_truth_text",
    "with_snippets",
    "without_snippets",
    "source",
    "page_type",
    "language",
}


def page_from_dev_record(record: dict[str, Any], where: str = "record") -> BenchPage:
    """Build a :class:`BenchPage` from one dev-format record (``dev.jsonl.gz``, ``dev_hard.jsonl.gz``)."""
    if "html" not in record or "id" not in record:
        raise ValueError(f"{where}: dev-format record lacks 'id' or 'html' (keys: {sorted(record)})")
    fmt_full = str(record.get("ground_truth_format") or "")
    # "markdown(html2text of expected.html)" → "markdown"; "text+snippets" → "text".
    fmt = re.split(r"[^a-z]", fmt_full, maxsplit=1)[0] or (
        "text" if record.get("ground_truth_text") else "snippets"
    )
    return BenchPage(
        id=str(record["id"]),
        url=record.get("url"),
        html=record["html"] or "",
        ground_truth=record.get("ground_truth_text"),
        format=fmt,
        with_snippets=_as_snippets(record.get("with_snippets")),
        without_snippets=_as_snippets(record.get("without_snippets")),
        source=record.get("source"),
        page_type=record.get("page_type"),
        language=record.get("language"),
        schema=DEV_SCHEMA,
        meta={k: v for k, v in record.items() if k not in _DEV_CORE_KEYS},
    )


def page_from_webmainbench_record(
    record: dict[str, Any], where: str = "record", clean_annotations: bool = True
) -> BenchPage:
    """Build a :class:`BenchPage` from one WebMainBench record.

    The ground truth is ``groundtruth_content`` when present and non-null, else ``convert_main_content``.
    This deliberately avoids the toolkit's key-order pitfall (docs/upstream.md#webmainbench-data), where
    a later ``groundtruth_content: null`` overwrites a valid ``convert_main_content`` and leaves the page
    without GT.

    Args:
        record: The parsed JSON object.
        where: Location for error messages (``file:line``).
        clean_annotations: Strip ``<marked-*>`` tags and ``data-anno-uid`` attributes from the HTML.
    """
    if "html" not in record:
        raise ValueError(f"{where}: WebMainBench record lacks 'html' (keys: {sorted(record)})")
    ground_truth = record.get("groundtruth_content")
    if ground_truth is None:
        ground_truth = record.get("convert_main_content")
    meta = dict(record.get("meta") or {})
    html = record["html"] or ""
    if clean_annotations:
        html = strip_annotation_artifacts(html)
    page_id = record.get("track_id") or record.get("id")
    if page_id is None:
        raise ValueError(f"{where}: WebMainBench record lacks 'track_id'")
    return BenchPage(
        id=str(page_id),
        url=record.get("url"),
        html=html,
        ground_truth=ground_truth,
        format="markdown" if ground_truth is not None else "none",
        source=WEBMAINBENCH_SCHEMA,
        page_type=meta.get("style"),
        language=meta.get("language"),
        schema=WEBMAINBENCH_SCHEMA,
        meta=meta,
    )


def read_pages(
    path: str | Path, limit: int | None = None, clean_annotations: bool = True
) -> Iterator[BenchPage]:
    """Yield the pages of one JSONL file (plain or gzip), detecting its schema from the first record.

    Args:
        path: A ``.jsonl`` or ``.jsonl.gz`` file in the dev format or WebMainBench's schema.
        limit: Stop after this many pages.
        clean_annotations: For WebMainBench files, strip the annotation plugin's artefacts from the HTML.

    Raises:
        FileNotFoundError: When ``path`` does not exist.
        ValueError: On invalid JSON or an unknown schema, naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such data file")
    schema: str | None = None
    for count, (line_no, record) in enumerate(_iter_json_lines(path)):
        if limit is not None and count >= limit:
            return
        where = f"{path}:{line_no}"
        if schema is None:
            try:
                schema = detect_schema(record)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
        if schema == DEV_SCHEMA:
            yield page_from_dev_record(record, where)
        else:
            yield page_from_webmainbench_record(record, where, clean_annotations)


def read_many(paths: list[str | Path], limit: int | None = None) -> Iterator[BenchPage]:
    """Yield the pages of several files in order; ``limit`` applies per file."""
    for path in paths:
        yield from read_pages(path, limit=limit)
