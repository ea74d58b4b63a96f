"""DripperWarcReader: every record of the bundled WARCs is a document or a counted drop, where datatrove's own
WarcReader ends the task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dripper.datatrove import DripperWarcReader, reader_accounting
from dripper.decode import decode_html
from dripper.io.warc import iter_warc_pages

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
MANIFEST = json.loads((SAMPLE / "manifest.json").read_text())
FILES = list(MANIFEST["files"])


def total(value) -> int:
    return value["total"] if isinstance(value, dict) else value


def read(name: str, **options) -> tuple[list, dict]:
    reader = DripperWarcReader(str(SAMPLE), glob_pattern=name, **options)
    documents = list(reader.run())
    return documents, reader.stats.to_dict()["stats"]


@pytest.mark.parametrize("name", FILES, ids=lambda n: n.rsplit("/", 1)[-1])
def test_every_record_is_a_document_or_a_counted_drop(name):
    # the manifest counts as the data plane reads (truncated records dropped)
    documents, stats = read(name, keep_truncated=False)
    expected = dict(MANIFEST["files"][name]["expected"])
    pages = expected.pop("page")
    assert len(documents) == pages
    dropped = {k.removeprefix("dropped:"): total(v) for k, v in stats.items() if k.startswith("dropped:")}
    assert dropped == expected
    counts = reader_accounting(stats)
    assert counts["records"] + counts["regions"] == counts["documents"] + counts["dropped"]
    assert counts["documents"] == pages


def test_documents_hold_the_decoded_page_and_where_it_came_from():
    name = FILES[0]
    documents, _ = read(name)
    pages = list(iter_warc_pages(str(SAMPLE / name), warc_name=name))
    assert [d.id for d in documents] == [p.doc_id for p in pages]
    for document, page in zip(documents, pages, strict=True):
        assert document.text == decode_html(page.payload, page.http_charset).text
        assert document.metadata["url"] == page.url
        assert document.metadata["warc_offset"] == page.offset
        assert document.metadata["date"] == page.fetch_date
        assert document.metadata["payload_digest"] == page.payload_digest
        assert document.metadata["file_path"].endswith(name) or "file_path" not in document.metadata


def test_truncated_records_are_forwarded_flagged_and_counted_as_datatroves_reader_does():
    """By default, as datatrove's WarcReader; ``keep_truncated=False`` drops them, counted."""
    name = next(n for n in FILES if MANIFEST["files"][n]["expected"].get("truncated"))
    truncated = MANIFEST["files"][name]["expected"]["truncated"]
    kept_docs, stats = read(name)
    dropped_docs, dropped_stats = read(name, keep_truncated=False)
    assert len(kept_docs) == len(dropped_docs) + truncated
    assert total(stats["kept_truncated"]) == truncated
    assert "dropped:truncated" not in stats
    assert total(dropped_stats["dropped:truncated"]) == truncated and "kept_truncated" not in dropped_stats
    assert sum(bool(d.metadata.get("truncated")) for d in kept_docs) == truncated


def test_datatroves_own_reader_ends_the_task_where_ours_goes_on():
    """The issue's observation, kept true: datatrove's WarcReader raises on the corrupt gzip member and on
    the record cut off at the end of a file (where ours counts ``bad_gzip_member`` and ``truncated``)."""
    pytest.importorskip("warcio")
    pytest.importorskip("cchardet")
    pytest.importorskip("magic")
    from datatrove.pipeline.readers import WarcReader

    broken = [n for n in FILES if {"bad_gzip_member", "truncated"} & set(MANIFEST["files"][n]["expected"])]
    assert len(broken) == 2
    for name in broken:
        with pytest.raises(Exception) as raised:  # noqa: PT011 - zlib.error, EOFError: whatever warcio gives
            list(WarcReader(str(SAMPLE), glob_pattern=name).run())
        assert type(raised.value).__name__ in ("error", "EOFError", "ArchiveLoadFailed")
        documents, _ = read(name)
        assert documents
