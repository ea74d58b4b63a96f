"""A page between the WARC file and the labeler: the simplify stage's row of it, and the record read again.

The simplify stage writes one row per HTML page (:func:`page_row`). In the ``slim`` layout (the default)
the row keeps what the extract stage cannot cheaply recompute and nothing twice: where the record is
(``warc_file``, ``warc_offset``, ``warc_span_bytes``), its metadata, the page's status, block count, prompt
estimate and the model input (``simplified_html``). The extract stage reads the record again by byte range
(:func:`reread_records`: one range read per run of consecutive rows, as Common Crawl's index is meant to
be used) and simplifies it again (:func:`dripper.pipeline.prepare_page`, ~10 ms of CPU a page), which gives
back the decoded page (the fallback's input), the mapping view (the reconstruction's) and the block texts.
The ``full`` layout (every shard written before the slim one) stores the page, the mapping view and the
blocks instead, and needs no WARC file at extract time; both are read by :func:`simplified_items`.

Each shard's parquet metadata records its layout and the options the pages were prepared with
(``dripper.layout``, ``dripper.prepare``), so the extract stage prepares a re-read record exactly as the
simplify stage did; a shard without them is a ``full`` one.
"""

from __future__ import annotations

import io
import json
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import Any

from dripper.io.storage import filesystem_for

__all__ = [
    "FULL_LAYOUT",
    "LAYOUTS",
    "SLIM_LAYOUT",
    "item_from_prepared",
    "page_row",
    "layout_and_options",
    "reread_records",
    "shard_metadata",
    "simplified_items",
]

log = logging.getLogger(__name__)

SLIM_LAYOUT = "slim"
FULL_LAYOUT = "full"
LAYOUTS = (SLIM_LAYOUT, FULL_LAYOUT)
_LAYOUT_KEY = b"dripper.layout"
_PREPARE_KEY = b"dripper.prepare"
#: The columns an extracted row carries from its page (the record's place and metadata).
CARRIED = ("warc_file", "warc_offset", "fetch_date", "content_type", "payload_digest", "encoding")


def page_row(warc_page: Any, extract_options: Any, prompt_version: str, layout: str) -> tuple[dict, Any]:
    """The simplify stage's row of one WARC page and the :class:`~dripper.pipeline.PreparedPage` it was made
    from (``warc_span_bytes`` is left to the caller: it is known once the next page's offset is)."""
    from dripper.pipeline import prepare_page
    from dripper.prompt import CHARS_PER_TOKEN, build_prompt

    prepared = prepare_page(warc_page.to_page(), extract_options)
    simplified = prepared.simplified
    row: dict[str, Any] = {
        "doc_id": warc_page.doc_id,
        "url": warc_page.url,
        "warc_file": warc_page.warc_file,
        "warc_offset": warc_page.offset,
        "warc_span_bytes": None,
        "fetch_date": warc_page.fetch_date,
        "content_type": warc_page.content_type,
        "payload_digest": warc_page.payload_digest,
        "payload_bytes": len(warc_page.payload),
        "truncated": warc_page.truncated,
        "http_charset": warc_page.http_charset,
        "encoding": prepared.stats.get("encoding"),
        "status": prepared.problem.split(":", 1)[0] if prepared.problem else "ok",
        "reason": prepared.problem,
        "simplified_html": None,
        "n_blocks": 0,
        "prompt_chars": 0,
        "prompt_tokens_estimate": 0,
        "simplify_seconds": prepared.stats.get("simplify_seconds", 0.0),
    }
    if layout == FULL_LAYOUT:
        row.update(html=prepared.text, mapping_html=None, blocks=None)
    if simplified is not None:
        prompt_chars = len(build_prompt(simplified.simplified_html, prompt_version))
        row.update(
            simplified_html=simplified.simplified_html,
            n_blocks=simplified.n_blocks,
            prompt_chars=prompt_chars,
            prompt_tokens_estimate=math.ceil(prompt_chars / CHARS_PER_TOKEN),
        )
        if layout == FULL_LAYOUT:
            row.update(
                mapping_html=simplified.mapping_markup(),
                blocks=[
                    {"item_id": b.item_id, "tag": b.tag, "simplified_html": b.simplified_html, "text": b.text}
                    for b in simplified.blocks
                ],
            )
    return row, prepared


def item_from_prepared(row: dict[str, Any], prepared: Any) -> tuple[Any, Any, str | None, dict[str, Any]]:
    """``(page, simplified, problem, row)`` for :meth:`~dripper.pipeline.Extractor.extract_simplified`: the
    page holds the decoded text (what the fallback reads) and the carried metadata."""
    from dripper.types import Page

    page = Page(
        doc_id=row["doc_id"],
        html=prepared.text,
        url=row["url"],
        http_charset=row["http_charset"],
        metadata={name: row[name] for name in CARRIED},
    )
    return page, prepared.simplified, prepared.problem, row


# -- the shard's own description ---------------------------------------------------------------------------


def shard_metadata(layout: str, extract_options: Any) -> dict[bytes, bytes]:
    """The parquet key-value metadata of a simplified shard: its layout and how its pages were prepared."""
    prepare = {"max_page_bytes": extract_options.max_page_bytes, "simplify": asdict(extract_options.simplify)}
    return {_LAYOUT_KEY: layout.encode(), _PREPARE_KEY: json.dumps(prepare, sort_keys=True).encode()}


def layout_and_options(metadata: dict[bytes, bytes] | None) -> tuple[str, Any]:
    """The layout of a shard and the :class:`~dripper.pipeline.ExtractOptions` its pages were prepared with
    (from :func:`shard_metadata`; a shard without it is a ``full`` one, prepared with the defaults)."""
    from dripper.pipeline import ExtractOptions
    from dripper.simplify import SimplifyOptions

    metadata = metadata or {}
    layout = metadata.get(_LAYOUT_KEY, FULL_LAYOUT.encode()).decode()
    if layout not in LAYOUTS:
        raise ValueError(
            f"simplified shard of layout {layout!r}: this version reads {', '.join(LAYOUTS)}; "
            "simplify again with this version (dripper run simplify --force) or extract with the one that wrote it"
        )
    prepare = json.loads(metadata.get(_PREPARE_KEY, b"{}"))
    options = ExtractOptions()
    if prepare:
        options = ExtractOptions(
            max_page_bytes=prepare["max_page_bytes"], simplify=SimplifyOptions(**prepare["simplify"])
        )
    return layout, options


# -- reading records again -----------------------------------------------------------------------------------


def _runs(rows: Sequence[dict[str, Any]]) -> Iterator[list[int]]:
    """Positions of consecutive rows of one WARC file whose spans follow each other (one range read each)."""
    run: list[int] = []
    for position, row in enumerate(rows):
        if run:
            last = rows[run[-1]]
            span = last["warc_span_bytes"]
            if (
                row["warc_file"] != last["warc_file"]
                or span is None
                or last["warc_offset"] + span != row["warc_offset"]
            ):
                yield run
                run = []
        run.append(position)
    if run:
        yield run


def reread_records(
    rows: Sequence[dict[str, Any]], storage_options: dict[str, Any] | None = None
) -> list[Any]:
    """The WARC record of each simplified row (a :class:`~dripper.io.warc.WarcPage`), read again by byte
    range, or why it could not be (a string: the record at that offset is not the row's page).

    Rows of one file that follow each other (a shard's rows do) are fetched with one range read.

    Raises:
        FileNotFoundError: a WARC file is no longer where the simplify stage read it (the slim layout
            needs it at extract time).
    """
    from dripper.io.warc import iter_warc_pages

    found: list[Any] = [None] * len(rows)
    for run in _runs(rows):
        first, last = rows[run[0]], rows[run[-1]]
        start = first["warc_offset"]
        end = None if last["warc_span_bytes"] is None else last["warc_offset"] + last["warc_span_bytes"]
        fs, path = filesystem_for(first["warc_file"], storage_options)
        try:
            data = fs.cat_file(path, start=start, end=end)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{first['warc_file']}: the WARC file this simplified shard was made from is gone; the slim "
                "layout reads each record again at extract time: restore the file, or simplify again"
            ) from None
        for position in run:
            row = rows[position]
            begin = row["warc_offset"] - start
            span = row["warc_span_bytes"]
            piece = io.BytesIO(data[begin : None if span is None else begin + span])
            # The row exists, so the record passed the reader's checks once: take it whatever its size.
            pages = iter_warc_pages(
                piece, warc_name=row["warc_file"], max_payload_bytes=1 << 62, keep_truncated=True
            )
            page = next(pages, None)
            if page is None or page.offset != 0:
                found[position] = f"no HTML record at offset {row['warc_offset']}"
                continue
            page.offset = row["warc_offset"]
            if page.doc_id != row["doc_id"] and page.record_id is not None:
                found[position] = f"the record at offset {row['warc_offset']} is {page.record_id}"
                continue
            found[position] = page
    return found


def simplified_items(
    path: str,
    batch_size: int,
    storage_options: dict[str, Any] | None = None,
    *,
    input_storage_options: dict[str, Any] | None = None,
    stats: Any = None,
    wanted: Any = None,
) -> Iterator[list[tuple[Any, Any, str | None, dict[str, Any]]]]:
    """Batches of ``(page, simplified, problem, row)`` from a simplified shard of either layout, ready for
    :meth:`~dripper.pipeline.Extractor.extract_simplified` (``row`` holds the shard's columns).

    Args:
        path: The shard (local path or URL).
        batch_size: Rows per batch.
        storage_options: fsspec options of the shard.
        input_storage_options: fsspec options of the WARC files (slim layout; default: ``storage_options``).
        stats: A :class:`~dripper.stages.shards.ShardStats` counting the records read again
            (``reread:records``), those not found (``reread:failed``: the row becomes ``invalid_input``, no
            output) and those whose simplification differs from the stored one (``reread:changed``: the new
            one is labelled, as it matches the mapping view it is reconstructed from).
        wanted: ``wanted(position) -> bool`` over the shard's rows: the others come as ``(None, None, None,
            row)`` (not read again: a cascade's second step needs only its routed pages).
    """
    import pyarrow.parquet as pq

    from dripper.pipeline import PreparedPage, prepare_page
    from dripper.types import Block, SimplifiedPage

    input_storage_options = input_storage_options if input_storage_options is not None else storage_options
    fs, fs_path = filesystem_for(path, storage_options)
    position = 0
    with fs.open(fs_path, "rb") as f:
        shard = pq.ParquetFile(f)
        layout, options = layout_and_options(shard.schema_arrow.metadata)
        for batch in shard.iter_batches(batch_size=batch_size):
            rows = batch.to_pylist()
            keep = [wanted is None or wanted(position + k) for k in range(len(rows))]
            position += len(rows)
            if layout == FULL_LAYOUT:
                items = []
                for row, kept in zip(rows, keep, strict=True):
                    simplified = None
                    if kept and row["simplified_html"] is not None:
                        simplified = SimplifiedPage(
                            doc_id=row["doc_id"],
                            simplified_html=row["simplified_html"],
                            blocks=[Block(**block) for block in row["blocks"] or []],
                            url=row["url"],
                            mapping_html=row["mapping_html"],
                        )
                    prepared = PreparedPage(row["html"] or "", simplified, row["reason"])
                    items.append(item_from_prepared(row, prepared) if kept else (None, None, None, row))
                yield items
                continue
            chosen = [row for row, kept in zip(rows, keep, strict=True) if kept]
            records = iter(reread_records(chosen, input_storage_options))
            items = []
            for row, kept in zip(rows, keep, strict=True):
                if not kept:
                    items.append((None, None, None, row))
                    continue
                record = next(records)
                if stats is not None:
                    stats.count("reread:records")
                if isinstance(record, str):
                    log.warning("%s: %s not read again: %s", path, row["doc_id"], record)
                    if stats is not None:
                        stats.count("reread:failed")
                    problem = f"invalid_input: record not read again: {record}"
                    items.append(item_from_prepared(row, PreparedPage("", None, problem)))
                    continue
                prepared = prepare_page(record.to_page(), options)
                simplified_html = prepared.simplified.simplified_html if prepared.simplified else None
                if prepared.problem != row["reason"] or simplified_html != row["simplified_html"]:
                    log.warning(
                        "%s: %s simplifies differently than at the simplify stage", path, row["doc_id"]
                    )
                    if stats is not None:
                        stats.count("reread:changed")
                items.append(item_from_prepared(row, prepared))
            yield items
