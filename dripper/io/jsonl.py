"""Reading JSONL(.gz) record files, keeping everything before damage.

One reader for every JSONL input of the project (page files for ``dripper extract``, the labelled sets of
``eval``, the CPU labeler's training files). A gzip file is decompressed in a stream of our own rather
than through :mod:`gzip`, so a truncated or corrupt file still yields every complete record before the
damage (``gzip.open`` loses the last read buffer, up to thousands of records, when it raises), and then
reports where it stopped instead of raising from the middle of a batch::

    reader = JsonlReader("pages.jsonl.gz")
    for line_number, record in reader:   # record: a dict, or a JsonlError for a line that is not JSON
        ...
    if reader.damage:                    # e.g. "truncated: the file ends inside a gzip stream"
        ...
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["JsonlError", "JsonlReader", "iter_json_records"]

_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class JsonlError:
    """A line that is not a JSON object (its record gets an error, the file goes on)."""

    message: str


class JsonlReader:
    """Iterate ``(line number, record)`` over a JSONL file, plain or gzip (detected by its magic bytes).

    After iteration, :attr:`records` counts the complete records read and :attr:`damage` says why reading
    stopped early (``None`` when the file was read to its end). A partial last line of a damaged file is
    not a record and is not yielded.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.records = 0
        self.damage: str | None = None

    def __iter__(self) -> Iterator[tuple[int, dict | JsonlError]]:
        number = 0
        for line in self._lines():
            number += 1
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                self.records += 1
                yield number, JsonlError(f"bad JSON: {error}")
                continue
            self.records += 1
            yield (
                number,
                record if isinstance(record, dict) else JsonlError("a JSON value that is not an object"),
            )

    def _lines(self) -> Iterator[bytes]:
        pending = b""
        complete = True
        for chunk, whole in self._chunks():
            complete = whole
            pending += chunk
            *lines, pending = pending.split(b"\n")
            yield from lines
        if pending.strip():
            if complete:
                yield pending  # a last line without a newline
            else:
                self.damage = (self.damage or "truncated") + "; its last line is incomplete and was not read"

    def _chunks(self) -> Iterator[tuple[bytes, bool]]:
        """Decompressed chunks and whether the data is whole so far (``False`` once damage is found)."""
        with self.path.open("rb") as handle:
            head = handle.read(2)
            handle.seek(0)
            if head != _GZIP_MAGIC:
                while chunk := handle.read(_CHUNK):
                    yield chunk, True
                return
            decompressor, fed = zlib.decompressobj(wbits=31), False
            while data := handle.read(_CHUNK):
                while data:
                    fed = True
                    try:
                        out = decompressor.decompress(data)
                    except zlib.error as error:
                        self.damage = f"corrupt gzip data ({error})"
                        yield b"", False
                        return
                    yield out, True
                    data = b""
                    if decompressor.eof:  # a multi-member file: the next member starts after this one
                        data = decompressor.unused_data
                        decompressor, fed = zlib.decompressobj(wbits=31), False
                        if data and data[:2] != _GZIP_MAGIC:
                            self.damage = "trailing bytes after the last gzip member"
                            yield b"", False
                            return
            if fed and not decompressor.eof:
                self.damage = "truncated: the file ends inside a gzip stream"
                yield decompressor.flush(), False


def iter_json_records(path: str | Path) -> Iterator[dict]:
    """The JSON objects of a JSONL(.gz) file; raises ``ValueError`` at the first damage (a bad line, a
    truncated or corrupt file), naming the file and the line, after yielding every record before it."""
    reader = JsonlReader(path)
    for number, record in reader:
        if isinstance(record, JsonlError):
            raise ValueError(f"{path}: line {number}: {record.message}")
        yield record
    if reader.damage:
        raise ValueError(f"{path}: {reader.damage} after {reader.records} records")
