"""A datatrove reader step for WARC files, on this project's WARC reader (:mod:`dripper.io.warc`).

datatrove's own ``WarcReader`` reads with warcio and ends the whole task on a corrupt gzip member
(``zlib.error``) or on a record cut off at the end of a file (``EOFError``). :class:`DripperWarcReader`
reads the same files with FastWARC and keeps going: a corrupt member is counted and reading resumes at the
next one, a record cut off by the end of its file is counted as ``truncated``, and every other record that is not an HTML 200
response is counted with its reason. Each page becomes a :class:`~datatrove.data.Document` whose ``text`` is
the decoded HTML (charset from the HTTP header, ``<meta>`` or sniffing: :func:`dripper.decode.decode_html`),
with ``url``, ``date``, the WARC location and the payload digest in ``metadata``; what
:class:`~dripper.datatrove.extractor.DripperExtractor` and datatrove's ``Trafilatura`` both read.

Stats (datatrove's per-step ``stat_update``): ``records`` (WARC records read), ``documents`` (pages
forwarded, counted by datatrove's reader base), ``dropped:{reason}`` per skipped record (``not_response``, ``non_200``, ``non_html``,
``too_large``, ``truncated``, ``bad_record``, ``empty_payload``) and per unreadable region
(``bad_gzip_member``, ``unreadable_rest``: one count per region, as the data plane counts them), and
``kept_truncated`` for truncated pages forwarded.

**Truncated records.** As datatrove's ``WarcReader`` (what FineWeb read with), records whose payload the
crawler cut short (``WARC-Truncated``: Common Crawl stops at 1 MiB) are forwarded, flagged with
``metadata["truncated"] = True`` and counted as ``kept_truncated``; ``keep_truncated=False`` drops them
(``dropped:truncated``). The data plane's simplify stage drops them by default (its ``keep_truncated``
setting): a page cut at 1 MiB usually lost its end, and the platform's own corpora prefer none to half.
For every task
``records + regions == documents + Σ dropped`` holds (:func:`reader_accounting` checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from datatrove.data import Document, DocumentsPipeline
from datatrove.io import DataFileLike, DataFolderLike
from datatrove.pipeline.readers.base import BaseDiskReader

from dripper.io.warc import DEFAULT_MAX_PAYLOAD_BYTES, STREAM_REASONS, WarcReadStats, iter_warc_pages

__all__ = ["DripperWarcReader", "reader_accounting"]


class DripperWarcReader(BaseDiskReader):
    """Read the HTML pages of WARC files (``.warc``, ``.warc.gz``) as documents, surviving broken records.

    Args:
        data_folder: Where the WARC files are (a path, ``s3://…``, or a datatrove ``DataFolder``).
        paths_file: A file listing the WARC paths (relative to ``data_folder``), one per line, as Common
            Crawl's ``warc.paths`` (uncompress it first); without it every ``*.warc*`` file found is read.
        glob_pattern: Which files to read (default ``*.warc*``; relative to ``data_folder``).
        max_payload_bytes: Larger payloads are dropped unread as ``too_large``.
        keep_truncated: Forward pages whose payload is truncated (Common Crawl cuts bodies at 1 MiB), as
            datatrove's ``WarcReader`` does (the default); they carry ``metadata["truncated"] = True`` and
            are counted as ``kept_truncated``. ``False``: drop them as ``dropped:truncated``.

    ``limit``, ``skip``, ``file_progress``, ``doc_progress``, ``default_metadata``, ``recursive``,
    ``shuffle_files`` and ``adapter`` are datatrove's reader options.
    """

    name = "🕷 Dripper WARC"
    _requires_dependencies = ["fastwarc"]

    def __init__(
        self,
        data_folder: DataFolderLike,
        paths_file: DataFileLike | None = None,
        *,
        glob_pattern: str | None = "**/*.warc*",
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        keep_truncated: bool = True,
        limit: int = -1,
        skip: int = 0,
        file_progress: bool = False,
        doc_progress: bool = False,
        default_metadata: dict | None = None,
        recursive: bool = True,
        shuffle_files: bool = False,
        adapter: Callable | None = None,
    ) -> None:
        if max_payload_bytes <= 0:
            raise ValueError(f"max_payload_bytes must be positive, got {max_payload_bytes}")
        super().__init__(
            data_folder,
            paths_file,
            limit,
            skip,
            file_progress,
            doc_progress,
            adapter,
            "text",
            "id",
            default_metadata,
            recursive,
            glob_pattern,
            shuffle_files,
        )
        self.max_payload_bytes = max_payload_bytes
        self.keep_truncated = keep_truncated

    def read_file(self, filepath: str) -> DocumentsPipeline:
        from dripper.decode import decode_html

        read = WarcReadStats()
        # The stream stays seekable (no transparent decompression): on a corrupt gzip member the reader
        # seeks to the next one instead of giving up on the file.
        with self.data_folder.open(filepath, "rb", compression=None) as stream:
            pages = iter_warc_pages(
                stream,
                warc_name=filepath,
                stats=read,
                max_payload_bytes=self.max_payload_bytes,
                keep_truncated=self.keep_truncated,
            )
            counted = WarcReadStats()
            for index, page in enumerate(pages):
                self._count_new(read, counted)
                with self.track_time():
                    if not page.payload:
                        self.stat_update("dropped:empty_payload")
                        continue
                    decoded = decode_html(page.payload, page.http_charset)
                    metadata = {
                        "url": page.url,
                        "date": page.fetch_date,
                        "warc_file": page.warc_file,
                        "warc_offset": page.offset,
                        "payload_digest": page.payload_digest,
                        "content_type": page.content_type,
                        "http_charset": page.http_charset,
                        "encoding": decoded.encoding,
                        "payload_bytes": len(page.payload),
                    }
                    if page.truncated:
                        metadata["truncated"] = True
                        self.stat_update("kept_truncated")
                    if self.default_metadata:
                        metadata = self.default_metadata | metadata
                    document = Document(text=decoded.text, id=page.doc_id, metadata=metadata)
                    if self.adapter is not self._default_adapter:
                        document = self.get_document_from_dict(
                            {"text": document.text, "id": document.id, "metadata": metadata}, filepath, index
                        )
                        if document is None:
                            self.stat_update("dropped:adapter")
                            continue
                yield document  # datatrove's reader base counts it under ``documents``
            self._count_new(read, counted)
        read.check()

    def _count_new(self, read: WarcReadStats, counted: WarcReadStats) -> None:
        """Report what the WARC reader counted since the last call (records and skips as they happen, so a
        task cut short by ``limit`` still balances what it read)."""
        new_records = read.records - counted.records
        if new_records:
            self.stat_update("records", value=new_records)
        for reason, n in read.skipped.items():
            new = n - counted.skipped[reason]
            if new:
                self.stat_update(f"dropped:{reason}", value=new)
        counted.records = read.records
        counted.skipped = read.skipped.copy()


def reader_accounting(stats: dict[str, Any]) -> dict[str, int]:
    """``{"records", "regions", "documents", "dropped"}`` from a :class:`DripperWarcReader`'s stats (its
    ``stats.to_dict()`` or the step's entry in a datatrove stats file); ``records + regions`` equals
    ``documents + dropped`` for a task that read its files to the end."""

    if isinstance(stats.get("stats"), dict):
        stats = stats["stats"]

    def total(name: str) -> int:
        value = stats.get(name, 0)
        return int(value.get("total", 0) if isinstance(value, dict) else value)

    dropped = {key: total(key) for key in stats if key.startswith("dropped:")}
    return {
        "records": total("records"),
        "regions": sum(total(f"dropped:{reason}") for reason in STREAM_REASONS),
        "documents": total("documents"),
        "dropped": sum(dropped.values()),
    }
