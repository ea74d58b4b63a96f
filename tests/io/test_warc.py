import gzip
import io
import json
from collections import Counter
from pathlib import Path

import pytest

from dripper.decode import decode_html
from dripper.io.storage import open_url
from dripper.io.warc import RECORD_REASONS, WarcPage, WarcReadStats, iter_warc_pages

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
MANIFEST = json.loads((SAMPLE / "manifest.json").read_text())
FILES = list(MANIFEST["files"])


def file_with(kind: str) -> str:
    return next(r["warc_file"] for r in MANIFEST["records"] if r.get("kind") == kind)


def expected_pages(name: str) -> list[str]:
    return [r["url"] for r in MANIFEST["records"] if r["warc_file"] == name and r["expect"] == "page"]


def read(name: str, **kwargs) -> tuple[list[WarcPage], WarcReadStats]:
    stats = WarcReadStats()
    pages = list(iter_warc_pages(str(SAMPLE / name), warc_name=name, stats=stats, **kwargs))
    return pages, stats


def observed(stats: WarcReadStats) -> dict[str, int]:
    counts = dict(stats.skipped)
    counts["page"] = stats.pages
    return dict(sorted(counts.items()))


@pytest.mark.parametrize("name", FILES, ids=lambda n: n.rsplit("/", 1)[-1])
def test_counts_per_reason_match_what_make_sample_wrote(name):
    pages, stats = read(name)
    assert observed(stats) == MANIFEST["files"][name]["expected"]
    assert [p.url for p in pages] == expected_pages(name)
    stats.check()
    assert stats.files == 1
    assert stats.record_types["response"] == sum(
        1 for r in MANIFEST["records"] if r["warc_file"] == name and r["type"] == "response"
    ) - sum(1 for r in MANIFEST["records"] if r["warc_file"] == name and r.get("kind") == "corrupt_member")


def test_totals_over_the_snapshot():
    stats = WarcReadStats()
    n_pages = sum(1 for name in FILES for _ in iter_warc_pages(str(SAMPLE / name), stats=stats))
    assert n_pages == stats.pages == MANIFEST["totals"]["expected"]["page"]
    assert set(RECORD_REASONS) <= set(stats.skipped)  # the sample exercises every per-record reason
    assert stats.skipped["bad_gzip_member"] == 1
    assert stats.files == len(FILES)
    stats.check()


def test_corrupt_member_in_the_middle_keeps_pages_before_and_after():
    name = file_with("corrupt_member")
    records = [r for r in MANIFEST["records"] if r["warc_file"] == name]
    corrupt_at = next(i for i, r in enumerate(records) if r.get("kind") == "corrupt_member")
    before = [r["url"] for r in records[:corrupt_at] if r["expect"] == "page"]
    after = [r["url"] for r in records[corrupt_at + 1 :] if r["expect"] == "page"]
    assert before and after
    pages, stats = read(name)
    urls = [p.url for p in pages]
    assert urls == before + after
    assert records[corrupt_at]["url"] not in urls
    assert stats.skipped["bad_gzip_member"] == 1


def test_record_cut_at_end_of_file_keeps_everything_before_it():
    name = file_with("cut_at_end_of_file")
    cut = next(r for r in MANIFEST["records"] if r.get("kind") == "cut_at_end_of_file")
    pages, stats = read(name)
    assert cut["url"] not in {p.url for p in pages}
    assert [p.url for p in pages] == expected_pages(name)
    assert stats.skipped["truncated"] == 2  # the cut record and the WARC-Truncated one

    kept, kept_stats = read(name, keep_truncated=True)
    truncated = {p.url: p for p in kept if p.truncated}
    assert cut["url"] in truncated
    assert "truncated" not in kept_stats.skipped
    assert len(truncated[cut["url"]].payload) > 0


def test_too_large_is_configurable():
    name = file_with("too_large")
    _, default_stats = read(name)
    assert default_stats.skipped["too_large"] == 1
    pages, stats = read(name, max_payload_bytes=20_000)
    assert stats.skipped["too_large"] > 1
    assert all(len(p.payload) <= 20_000 for p in pages)
    stats.check()
    with pytest.raises(ValueError, match="max_payload_bytes"):
        iter_warc_pages(str(SAMPLE / name), max_payload_bytes=0)


def test_page_fields_and_offsets_point_at_the_record():
    name = FILES[0]
    pages, _ = read(name)
    page = pages[5]
    assert page.warc_file == name
    assert page.http_status == 200
    assert page.content_type in ("text/html", "application/xhtml+xml")
    assert page.record_id.startswith("<urn:uuid:")
    assert page.payload_digest.startswith("sha1:")
    assert page.fetch_date.startswith("2025-03-14T")
    # Common Crawl style: offset = start of the record's gzip member, readable on its own.
    with open(SAMPLE / name, "rb") as f:
        f.seek(page.offset)
        member = gzip.GzipFile(fileobj=f).read(4096)
    assert member.startswith(b"WARC/1.0\r\n")
    assert f"WARC-Target-URI: {page.url}\r\n".encode() in member


def test_to_page_carries_bytes_charset_and_provenance():
    page = read(FILES[0])[0][0]
    core_page = page.to_page()
    assert core_page.doc_id == page.record_id
    assert core_page.html == page.payload
    assert core_page.url == page.url
    assert core_page.http_charset == page.http_charset
    assert core_page.metadata["warc_offset"] == page.offset


def test_payloads_decode_back_to_the_ground_truth_pages():
    with gzip.open(SAMPLE / "pages.jsonl.gz", "rt", encoding="utf-8") as f:
        truth = {r["url"]: r for r in map(json.loads, f)}
    by_url = {r["url"]: r for r in MANIFEST["records"] if r["type"] == "response"}
    seen = Counter()
    for name in FILES:
        for page in iter_warc_pages(str(SAMPLE / name)):
            if page.url not in truth:
                continue
            meta = by_url[page.url]
            decoded = decode_html(page.payload, page.http_charset)
            assert decoded.encoding == meta["encoding"], page.url
            if meta["charset_story"] == "re-encoded":
                seen["re-encoded"] += 1
            else:
                assert decoded.text == truth[page.url]["html"], page.url
                seen["equal"] += 1
    assert seen["re-encoded"] == 2
    assert seen["equal"] + seen["re-encoded"] == len(truth)


def test_non_utf8_payloads_are_really_encoded_as_declared():
    pages = {p.url: p for name in FILES for p in iter_warc_pages(str(SAMPLE / name))}
    by_url = {r["url"]: r for r in MANIFEST["records"] if r["type"] == "response" and r.get("encoding")}
    non_utf8 = [
        u
        for u, r in by_url.items()
        if r["encoding"] != "utf-8" and u in pages and not pages[u].payload.isascii()
    ]
    assert {by_url[u]["encoding"] for u in non_utf8} >= {"cp932", "cp1251", "gb18030", "cp1252"}
    for url in non_utf8:
        with pytest.raises(UnicodeDecodeError):
            pages[url].payload.decode("utf-8")
        assert decode_html(pages[url].payload, pages[url].http_charset).encoding == by_url[url]["encoding"]


class NonSeekable(io.RawIOBase):
    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buffer) -> int:
        chunk = self._inner.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def test_non_seekable_stream_counts_the_unread_rest():
    name = file_with("corrupt_member")
    stats = WarcReadStats()
    pages = list(iter_warc_pages(NonSeekable((SAMPLE / name).read_bytes()), stats=stats))
    records = [r for r in MANIFEST["records"] if r["warc_file"] == name]
    corrupt_at = next(i for i, r in enumerate(records) if r.get("kind") == "corrupt_member")
    assert [p.url for p in pages] == [r["url"] for r in records[:corrupt_at] if r["expect"] == "page"]
    assert stats.skipped["bad_gzip_member"] == 1
    assert stats.skipped["unreadable_rest"] == 1
    assert pages[0].warc_file == "<stream>"


def test_fsspec_file_object_and_uncompressed_warc(tmp_path):
    name = FILES[3]
    expected = [p.url for p in read(name)[0]]
    with open_url(str(SAMPLE / name), "rb") as f:
        assert [p.url for p in iter_warc_pages(f)] == expected
    plain = tmp_path / "plain.warc"
    plain.write_bytes(gzip.decompress((SAMPLE / name).read_bytes()))
    stats = WarcReadStats()
    assert [p.url for p in iter_warc_pages(str(plain), stats=stats)] == expected
    assert observed(stats) == MANIFEST["files"][name]["expected"]


def _record(url: str, body: bytes, http_extra: str = "", content_type: str = "text/html") -> bytes:
    http = (
        f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n{http_extra}Content-Length: {len(body)}\r\n\r\n"
    )
    block = http.encode() + body
    head = (
        "WARC/1.0\r\nWARC-Type: response\r\nWARC-Date: 2025-01-01T00:00:00Z\r\n"
        f"WARC-Record-ID: <urn:uuid:00000000-0000-4000-8000-{len(url):012d}>\r\nWARC-Target-URI: {url}\r\n"
        f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(block)}\r\n\r\n"
    )
    return gzip.compress(head.encode() + block + b"\r\n\r\n", mtime=0)


def test_content_encoding_is_undone_and_mislabelled_bodies_are_kept():
    body = b"<html><body>compressed</body></html>"
    data = (
        _record("http://a.example/gz", gzip.compress(body), "Content-Encoding: gzip\r\n")
        + _record("http://a.example/liar", body, "Content-Encoding: gzip\r\n")
        + _record("http://a.example/xhtml", body, content_type="application/xhtml+xml; charset=UTF-8")
        + _record("http://a.example/plain", body, content_type="text/plain")
    )
    stats = WarcReadStats()
    pages = list(iter_warc_pages(io.BytesIO(data), stats=stats))
    assert [p.payload for p in pages] == [body, body, body]
    assert pages[2].content_type == "application/xhtml+xml"
    assert pages[2].http_charset == "UTF-8"
    assert stats.skipped == Counter({"non_html": 1})


def test_garbage_between_members_is_skipped_and_counted():
    a, b = _record("http://a.example/1", b"<p>1</p>"), _record("http://a.example/2", b"<p>2</p>")
    stats = WarcReadStats()
    pages = list(iter_warc_pages(io.BytesIO(a + b"\x00not gzip\x1f\x8b" * 50 + b), stats=stats))
    assert [p.url for p in pages] == ["http://a.example/1", "http://a.example/2"]
    assert stats.skipped["bad_gzip_member"] == 1
    stats.check()


def test_stats_merge_and_dict():
    one, two = read(FILES[0])[1], read(FILES[1])[1]
    total = WarcReadStats().merge(one).merge(two)
    assert total.pages == one.pages + two.pages
    assert (
        total.as_dict()["skipped"]["not_response"]
        == one.skipped["not_response"] + two.skipped["not_response"]
    )
    json.dumps(total.as_dict())
