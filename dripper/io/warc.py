"""Stream HTML pages out of WARC files (``.warc``, ``.warc.gz``) with FastWARC.

Only ``response`` records with HTTP status 200 and an HTML content type (``text/html``,
``application/xhtml+xml``) become :class:`WarcPage` records. Every other record is counted in a
:class:`WarcReadStats` with a reason:

==================  ===========================================================================
``not_response``    warcinfo, request, metadata, revisit, … records
``bad_record``      a response without a target URI, a Content-Length or parseable HTTP headers
``non_200``         any HTTP status other than 200 (redirects, 404s, server errors)
``non_html``        any other content type (images, PDFs, plain text, …)
``too_large``       payload over ``max_payload_bytes`` (skipped without being read into memory)
``truncated``       ``WARC-Truncated`` set, or the payload ends before its declared length
``bad_gzip_member`` a region of the file that could not be decompressed or parsed (one count per
                    region, whatever the number of records lost in it); reading resumes at the next
                    gzip member (next ``WARC/1.`` line for uncompressed files) when the stream is seekable
``unreadable_rest`` after a ``bad_gzip_member`` on a stream that cannot seek: the rest is not read
==================  ===========================================================================

For every file: ``records == pages + (skips of the per-record reasons)``; the two stream-level reasons
(``bad_gzip_member``, ``unreadable_rest``) count regions, not records.

FastWARC was measured against warcio on the bundled sample (``bench/warc_read.py``) and is the reader.
"""

from __future__ import annotations

import io
import logging
import os
import re
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dripper.types import Page

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "HTML_CONTENT_TYPES",
    "RECORD_REASONS",
    "STREAM_REASONS",
    "WarcPage",
    "WarcReadStats",
    "iter_warc_pages",
]

#: WARC payloads larger than this are dropped unread as ``too_large`` (10 MiB).
DEFAULT_MAX_PAYLOAD_BYTES = 10 * 1024 * 1024

log = logging.getLogger(__name__)

HTML_CONTENT_TYPES = frozenset({"text/html", "application/xhtml+xml"})
RECORD_REASONS = ("not_response", "bad_record", "non_200", "non_html", "too_large", "truncated")
STREAM_REASONS = ("bad_gzip_member", "unreadable_rest")

_GZIP_MAGIC = b"\x1f\x8b\x08"
_WARC_MAGIC = b"WARC/1."
_RESYNC_CHUNK = 1 << 20
_CHARSET = re.compile(r"""charset\s*=\s*["']?\s*([^\s;"',]+)""", re.IGNORECASE)


@dataclass(slots=True)
class WarcPage:
    """One HTML response read from a WARC file.

    Attributes:
        url: ``WARC-Target-URI``.
        warc_file: The WARC file's name as given to the reader (a path, URL or Common Crawl path).
        offset: Byte offset of the record in the file (of its gzip member for ``.warc.gz``), as Common
            Crawl's index gives it: enough to fetch the record again with one range request.
        fetch_date: ``WARC-Date`` (ISO 8601, as written in the file).
        http_status: HTTP status code (always 200 here).
        content_type: HTTP media type without parameters (``text/html``).
        http_charset: The ``charset`` label of the HTTP ``Content-Type`` header as sent, or ``None``;
            :func:`dripper.decode.decode_html` normalises it.
        payload: The HTTP body (``Content-Encoding`` gzip/deflate undone where the body still has it).
        record_id: ``WARC-Record-ID`` (``<urn:uuid:…>``).
        payload_digest: ``WARC-Payload-Digest`` (``sha1:…``), or ``None``.
        truncated: Whether the payload is incomplete (only with ``keep_truncated=True``).
    """

    url: str
    warc_file: str
    offset: int
    fetch_date: str | None
    http_status: int
    content_type: str
    http_charset: str | None
    payload: bytes
    record_id: str | None
    payload_digest: str | None
    truncated: bool = False

    @property
    def doc_id(self) -> str:
        """A stable id: the record id, else ``warc_file@offset``."""
        return self.record_id or f"{self.warc_file}@{self.offset}"

    def to_page(self) -> Page:
        """This record as a core :class:`~dripper.types.Page` (bytes in, decoded by the core)."""
        from dripper.types import Page

        return Page(
            doc_id=self.doc_id,
            html=self.payload,
            url=self.url,
            http_charset=self.http_charset,
            metadata={
                "warc_file": self.warc_file,
                "warc_offset": self.offset,
                "fetch_date": self.fetch_date,
                "payload_digest": self.payload_digest,
            },
        )


@dataclass
class WarcReadStats:
    """Counters for one or more WARC files; pass one instance to several reads to add them up."""

    files: int = 0
    records: int = 0
    pages: int = 0
    payload_bytes: int = 0
    seconds: float = 0.0
    record_types: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    @property
    def records_skipped(self) -> int:
        """Records skipped for a per-record reason (stream-level regions excluded)."""
        return sum(n for reason, n in self.skipped.items() if reason not in STREAM_REASONS)

    def check(self) -> None:
        """Raise ``ValueError`` unless every record is either a page or skipped with a reason."""
        if self.records != self.pages + self.records_skipped:
            raise ValueError(
                f"WARC accounting does not balance: {self.records} records != {self.pages} pages + "
                f"{self.records_skipped} skipped ({dict(self.skipped)})"
            )

    def merge(self, other: WarcReadStats) -> WarcReadStats:
        """Add ``other``'s counts into this one and return it."""
        self.files += other.files
        self.records += other.records
        self.pages += other.pages
        self.payload_bytes += other.payload_bytes
        self.seconds += other.seconds
        self.record_types.update(other.record_types)
        self.skipped.update(other.skipped)
        return self

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "records": self.records,
            "pages": self.pages,
            "payload_bytes": self.payload_bytes,
            "seconds": round(self.seconds, 6),
            "record_types": dict(sorted(self.record_types.items())),
            "skipped": dict(sorted(self.skipped.items())),
        }


def _require_fastwarc() -> Any:
    try:
        from fastwarc import warc
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "FastWARC is needed to read WARC files; install the data-plane extra: "
            "pip install 'dripper-platform[dataplane]' (or: pip install fastwarc)"
        ) from exc
    return warc


def _undo_content_encoding(payload: bytes, content_encoding: str | None) -> bytes:
    # Common Crawl stores bodies already decoded (and renames the header); other crawlers may not.
    # FastWARC's own auto_decode aborts the whole file on a body that is not what its header says.
    if not content_encoding or not payload:
        return payload
    encoding = content_encoding.strip().lower()
    try:
        if encoding in ("gzip", "x-gzip") and payload.startswith(b"\x1f\x8b"):
            return zlib.decompress(payload, 16 + zlib.MAX_WBITS)
        if encoding == "deflate":
            try:
                return zlib.decompress(payload)
            except zlib.error:
                return zlib.decompress(payload, -zlib.MAX_WBITS)
    except zlib.error:
        return payload
    return payload


def _find_next(stream: IO[bytes], start: int, magic: bytes) -> int | None:
    """Offset of the next ``magic`` at or after ``start``, or ``None`` at end of file."""
    stream.seek(start)
    position = start
    carry = b""
    while True:
        chunk = stream.read(_RESYNC_CHUNK)
        if not chunk:
            return None
        data = carry + chunk
        found = data.find(magic)
        if found >= 0:
            return position - len(carry) + found
        carry = data[-(len(magic) - 1) :]
        position += len(chunk)


class _CountingReader:
    """Gives a forward-only stream the ``tell()`` that FastWARC needs (it panics without one)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._position = 0

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._position += len(data)
        return data

    def tell(self) -> int:
        return self._position

    def seekable(self) -> bool:
        return False

    def seek(self, offset: int, whence: int = 0) -> int:
        raise io.UnsupportedOperation("seek")

    def close(self) -> None:  # the caller owns the underlying stream
        pass


def _is_library_panic(exc: BaseException) -> bool:
    # FastWARC is written in Rust; a panic on malformed input surfaces as pyo3's PanicException, which
    # derives from BaseException. Treat it like a decompression error instead of killing the worker.
    return type(exc).__name__ == "PanicException"


def _seekable(stream: IO[bytes]) -> bool:
    try:
        if not stream.seekable():
            return False
        stream.tell()
    except (AttributeError, OSError, ValueError):
        return False
    return True


class _Reader:
    def __init__(
        self,
        warc_name: str,
        stats: WarcReadStats,
        max_payload_bytes: int,
        keep_truncated: bool,
    ) -> None:
        self.warc_name = warc_name
        self.stats = stats
        self.max_payload_bytes = max_payload_bytes
        self.keep_truncated = keep_truncated
        self.response_type = _require_fastwarc().WarcRecordType.response

    def classify(self, record: Any) -> WarcPage | str:
        """A page, or the reason the record is skipped. Reading the payload may raise ``OSError``."""
        record_type = record.record_type
        self.stats.record_types[str(record_type)] += 1
        if record_type != self.response_type:
            return "not_response"
        headers = record.headers
        url = headers.get("WARC-Target-URI")
        http = record.http_headers
        if not url or not headers.get("Content-Length") or http is None or http.status_code is None:
            return "bad_record"
        if http.status_code != 200:
            return "non_200"
        content_type = (record.http_content_type or "").strip().lower()
        if not content_type:
            identified = headers.get("WARC-Identified-Payload-Type") or ""
            content_type = identified.split(";", 1)[0].strip().lower()
        if content_type not in HTML_CONTENT_TYPES:
            return "non_html"
        length = record.content_length
        if length > self.max_payload_bytes:
            return "too_large"
        truncated = bool(headers.get("WARC-Truncated"))
        if truncated and not self.keep_truncated:
            return "truncated"
        payload = record.reader.read()
        if len(payload) < length:
            truncated = True
            if not self.keep_truncated:
                return "truncated"
        payload = _undo_content_encoding(payload, http.get("Content-Encoding"))
        charset_match = _CHARSET.search(http.get("Content-Type") or "")
        return WarcPage(
            url=url,
            warc_file=self.warc_name,
            offset=record.stream_pos,
            fetch_date=headers.get("WARC-Date"),
            http_status=200,
            content_type=content_type,
            http_charset=charset_match.group(1) if charset_match else None,
            payload=payload,
            record_id=headers.get("WARC-Record-ID"),
            payload_digest=headers.get("WARC-Payload-Digest"),
            truncated=truncated,
        )

    def iterate(self, stream: IO[bytes]) -> Iterator[WarcPage]:
        warc = _require_fastwarc()
        seekable = _seekable(stream)
        start = stream.tell() if seekable else 0
        if not seekable:
            stream = _CountingReader(stream)
        magic = _GZIP_MAGIC
        if seekable:
            head = stream.read(2)
            stream.seek(start)
            magic = _GZIP_MAGIC if head == _GZIP_MAGIC[:2] else _WARC_MAGIC
        resume_at = start
        last_record_at = None
        in_bad_region = False
        while True:
            try:
                # parse_http: status and content type come from FastWARC's native parser; bodies are
                # decoded by us (see _undo_content_encoding).
                for record in warc.ArchiveIterator(stream, parse_http=True, auto_decode="none"):
                    last_record_at = record.stream_pos
                    outcome = self.classify(record)
                    in_bad_region = False
                    self.stats.records += 1
                    if isinstance(outcome, str):
                        self.stats.skip(outcome)
                        continue
                    self.stats.pages += 1
                    self.stats.payload_bytes += len(outcome.payload)
                    yield outcome
                return
            except BaseException as exc:
                if not isinstance(exc, OSError) and not _is_library_panic(exc):
                    raise
                if not in_bad_region:
                    self.stats.skip("bad_gzip_member")
                    in_bad_region = True
                if not seekable:
                    self.stats.skip("unreadable_rest")
                    log.warning("%s: %s; stream cannot seek, rest of file not read", self.warc_name, exc)
                    return
                search_from = max(resume_at, last_record_at if last_record_at is not None else start) + 1
                log.warning("%s: %s; resuming after offset %d", self.warc_name, exc, search_from - 1)
                next_at = _find_next(stream, search_from, magic)
                if next_at is None:
                    return
                stream.seek(next_at)
                resume_at = next_at
                last_record_at = None


def iter_warc_pages(
    source: str | os.PathLike[str] | IO[bytes],
    *,
    warc_name: str | None = None,
    stats: WarcReadStats | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    keep_truncated: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> Iterator[WarcPage]:
    """Yield the HTML 200 responses of one WARC file, in file order.

    Args:
        source: A binary file object (local, fsspec/S3/HTTP stream, ``BytesIO``), or a path/URL opened
            with :func:`dripper.io.storage.open_url`. File objects are not closed.
        warc_name: Name recorded in :attr:`WarcPage.warc_file`; defaults to the path, or the file
            object's ``path``/``name``.
        stats: Counters to add to (pass the same object for several files); a new one if ``None``.
        max_payload_bytes: Larger payloads are skipped as ``too_large``.
        keep_truncated: Yield truncated payloads (marked ``truncated=True``) instead of skipping them.
        storage_options: fsspec options when ``source`` is a path or URL.

    The stream is read once, front to back; on a corrupt gzip member it seeks forward to the next member
    (see the module docstring). Decompression errors never escape: they are counted.
    """
    if max_payload_bytes <= 0:
        raise ValueError(f"max_payload_bytes must be positive, got {max_payload_bytes}")
    stats = stats if stats is not None else WarcReadStats()
    if isinstance(source, str | os.PathLike):
        name = warc_name or os.fspath(source)
        return _iter_path(source, name, stats, max_payload_bytes, keep_truncated, storage_options)
    name = warc_name or str(getattr(source, "path", None) or getattr(source, "name", None) or "<stream>")
    return _iter_stream(source, name, stats, max_payload_bytes, keep_truncated)


def _iter_path(
    path: str | os.PathLike[str],
    name: str,
    stats: WarcReadStats,
    max_payload_bytes: int,
    keep_truncated: bool,
    storage_options: dict[str, Any] | None,
) -> Iterator[WarcPage]:
    from dripper.io.storage import open_url

    with open_url(path, "rb", storage_options) as stream:
        yield from _iter_stream(stream, name, stats, max_payload_bytes, keep_truncated)


def _iter_stream(
    stream: IO[bytes], name: str, stats: WarcReadStats, max_payload_bytes: int, keep_truncated: bool
) -> Iterator[WarcPage]:
    pages = _Reader(name, stats, max_payload_bytes, keep_truncated).iterate(stream)
    stats.files += 1
    while True:
        # Time the reading only, not what the consumer does between pages.
        started = time.perf_counter()
        try:
            page = next(pages)
        except StopIteration:
            return
        finally:
            stats.seconds += time.perf_counter() - started
        yield page
