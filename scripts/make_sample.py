"""Build the bundled sample under ``data/sample/`` from the development pages in ``../shared/data``.

    .venv/bin/python scripts/make_sample.py [--shared ../shared/data] [--out data/sample] [--seed 20250314]

Writes (same inputs and seed → byte-identical outputs):

- ``pages.jsonl.gz``: ~60 real pages with ground truth (dev.jsonl.gz record format);
- ``crawl-data/CC-MAIN-SAMPLE/warc.paths.gz`` and 4 ``…/segments/<segment>/warc/*.warc.gz`` files laid out
  like Common Crawl: those pages plus more real pages (190 in all), some in their declared non-UTF-8
  charset, and on purpose request/metadata records, non-200s, non-HTML, an oversized payload, truncated
  records, a corrupt gzip member, binary junk, duplicates, near-duplicates and low-quality pages;
- ``collinfo.json`` listing CC-MAIN-SAMPLE;
- ``manifest.json``: every record written, with what a reader must make of it, and the expected counts per
  file (the WARC reader's tests compare against it).

``README.md`` next to the outputs is written by hand; the counts it quotes are printed by this script.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import json
import random
import re
import struct
import uuid
import zlib
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CRAWL_ID = "CC-MAIN-SAMPLE"
SEED = 20250314
KEEP_FIELDS = (
    "id",
    "url",
    "html",
    "ground_truth_text",
    "ground_truth_format",
    "with_snippets",
    "without_snippets",
    "language",
    "source",
    "page_type",
)
GT_MAX_CHARS = 330_000  # keeps readability-qq (gb2312, 315 kB) and drops the one 2.2 MB page
EXTRA_MAX_CHARS = 220_000
PAGE_TYPES = ("article", "collection", "documentation", "forum", "listing", "product", "service")
SEGMENTS = ("1741910000000.11", "1741910000000.42")
WARC_NAMES = (
    (SEGMENTS[0], "CC-MAIN-20250314001422-20250314031422-00000.warc.gz"),
    (SEGMENTS[0], "CC-MAIN-20250314001422-20250314031422-00001.warc.gz"),
    (SEGMENTS[1], "CC-MAIN-20250314031422-20250314061422-00000.warc.gz"),
    (SEGMENTS[1], "CC-MAIN-20250314031422-20250314061422-00001.warc.gz"),
)
# Pages that must be in pages.jsonl.gz: non-Latin scripts and a declared gb2312 page.
FORCED_GT = (
    "readability-qq",  # zh, declares gb2312
    "readability-yahoo-4",  # ja
    "aeb-c82b3d1d540bbbd6",  # ru, re-encoded to windows-1251 below
    "aeb-85439e26c41c7590",  # ja, re-encoded to Shift_JIS below
    "wmb-7cdb7231-9337-4104-a562-9b8f285add7d",  # zh
)
# Extra pages (WARCs only) picked for the charsets they declare.
FORCED_EXTRA = (
    "traf-archive.org.he.xinhuanet.com.25340717.html",  # gb2312
    "traf-kyffhaeuser-nachrichten.de-Regen.html",  # iso-8859-1
    "traf-automobilwoche.de-VW-Betriebsversammlung.html",  # windows-1252
    "wcxb-dev-4071",  # macintosh
    "wcxb-dev-0525",  # iso-8859-1 forum
    "cleaneval_dev-34",  # windows-1252
    "cleaneval_dev-12",  # iso-8859-1
    "dragnet-T87",  # windows-1252
)
# Re-declared: the page's <meta> says UTF-8; the WARC copy is re-encoded and its <meta> rewritten.
REENCODE = {"aeb-85439e26c41c7590": "Shift_JIS", "aeb-c82b3d1d540bbbd6": "windows-1251"}
# Python codecs for the labels pages declare (the WHATWG mapping, as dripper.decode uses).
LABEL_CODECS = {
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "iso-8859-1": "cp1252",
    "windows-1252": "cp1252",
    "macintosh": "mac_roman",
    "shift_jis": "cp932",
    "windows-1251": "cp1251",
}
META_CHARSET = re.compile(r"""<meta[^>]*?charset\s*=\s*["']?\s*([a-zA-Z0-9_:.+-]+)""", re.IGNORECASE)


def load(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def pick(rng: random.Random, pool: list[dict], n: int, forced: tuple[str, ...] = ()) -> list[dict]:
    chosen = [r for r in pool if r["id"] in forced]
    rest = [r for r in pool if r["id"] not in forced]
    rng.shuffle(rest)
    return chosen + rest[: max(0, n - len(chosen))]


def select_pages(shared: Path, rng: random.Random) -> tuple[list[dict], list[dict]]:
    """(ground-truth pages, extra pages), disjoint, unique URL and HTML."""
    dev = [r for r in load(shared / "dev.jsonl.gz") if len(r["html"]) <= GT_MAX_CHARS]
    hard = [
        r
        for r in load(shared / "dev_hard.jsonl.gz")
        if len(r["html"]) <= GT_MAX_CHARS and not r.get("duplicate_of")
    ]

    def of(records: list[dict], source: str, page_type: str | None = None, limit: int = GT_MAX_CHARS):
        return [
            r
            for r in records
            if r["source"] == source
            and (page_type is None or r.get("page_type") == page_type)
            and (len(r["html"]) <= limit or r["id"] in FORCED_GT + FORCED_EXTRA)
        ]

    gt: list[dict] = []
    gt += pick(rng, of(dev, "scrapinghub_aeb"), 16, FORCED_GT)
    gt += pick(rng, of(dev, "mozilla_readability"), 11, FORCED_GT)
    gt += pick(rng, of(dev, "webmainbench_sample"), 4, FORCED_GT)
    for page_type in PAGE_TYPES:
        gt += pick(rng, of(hard, "wcxb", page_type), 3)
    gt += pick(rng, of(hard, "dragnet"), 5)
    gt += pick(rng, of(hard, "cleaneval"), 4)

    taken = {r["id"] for r in gt}
    seen_html = {hashlib.sha1(r["html"].encode()).hexdigest() for r in gt}

    def fresh(records: list[dict]) -> list[dict]:
        out = []
        for r in records:
            digest = hashlib.sha1(r["html"].encode()).hexdigest()
            if r["id"] not in taken and digest not in seen_html:
                out.append(r)
        return out

    extra: list[dict] = []
    plan = [
        (dev, "trafilatura_eval", None, 40),
        (dev, "scrapinghub_aeb", None, 10),
        (dev, "mozilla_readability", None, 8),
        *[(hard, "wcxb", page_type, 6) for page_type in PAGE_TYPES],
        (hard, "dragnet", None, 20),
        (hard, "cleaneval", None, 10),
    ]
    for records, source, page_type, n in plan:
        batch = pick(rng, fresh(of(records, source, page_type, EXTRA_MAX_CHARS)), n, FORCED_EXTRA)
        for r in batch:
            taken.add(r["id"])
            seen_html.add(hashlib.sha1(r["html"].encode()).hexdigest())
        extra += batch
    for r in gt + extra:
        if not r.get("url"):
            r["url"] = f"https://sample.invalid/{r['id']}"
    urls = Counter(r["url"] for r in gt + extra)
    assert max(urls.values()) == 1, [u for u, n in urls.items() if n > 1]
    return gt, extra


# --- WARC writing ---------------------------------------------------------------------------------------


def sha1_b32(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


class WarcFileBuilder:
    """Writes one gzip member per record, as Common Crawl does, and remembers what each record is."""

    def __init__(self, name: str, rng: random.Random, clock: datetime) -> None:
        self.name = name
        self.rng = rng
        self.clock = clock
        self.members: list[bytes] = []
        self.records: list[dict[str, Any]] = []
        self.warcinfo_id = self._uuid()

    def _uuid(self) -> str:
        return f"<urn:uuid:{uuid.UUID(int=self.rng.getrandbits(128), version=4)}>"

    def _tick(self) -> str:
        self.clock += timedelta(seconds=self.rng.randint(1, 9))
        return self.clock.strftime("%Y-%m-%dT%H:%M:%SZ")

    def _record(self, warc_type: str, block: bytes, headers: list[tuple[str, str]]) -> bytes:
        lines = [("WARC-Type", warc_type), *headers, ("Content-Length", str(len(block)))]
        head = "WARC/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in lines) + "\r\n"
        return head.encode("utf-8") + block + b"\r\n\r\n"

    def add_member(self, record: bytes, meta: dict[str, Any]) -> None:
        self.members.append(gzip.compress(record, compresslevel=9, mtime=0))
        self.records.append(meta)

    def warcinfo(self) -> None:
        fields = (
            f"isPartOf: {CRAWL_ID}\r\npublisher: dripper-platform sample (scripts/make_sample.py)\r\n"
            "description: Real pages from public extraction benchmarks, laid out like Common Crawl\r\n"
            "format: WARC File Format 1.0\r\nconformsTo: https://iipc.github.io/warc-specifications/\r\n"
        ).encode()
        rec = self._record(
            "warcinfo",
            fields,
            [
                ("WARC-Date", self._tick()),
                ("WARC-Record-ID", self.warcinfo_id),
                ("WARC-Filename", self.name),
                ("Content-Type", "application/warc-fields"),
            ],
        )
        self.add_member(rec, {"type": "warcinfo", "expect": "not_response"})

    def capture(
        self,
        url: str,
        payload: bytes,
        *,
        status: str = "200 OK",
        content_type: str | None = "text/html; charset=UTF-8",
        extra_http: tuple[tuple[str, str], ...] = (),
        meta: dict[str, Any],
        truncate_payload_at: int | None = None,
        http_block: bytes | None = None,
        mangle: str | None = None,
    ) -> None:
        """request + response + metadata records for one fetch (the response's fate described by ``meta``)."""
        host = url.split("://", 1)[1].split("/", 1)[0]
        path = "/" + url.split("://", 1)[1].split("/", 1)[1] if "/" in url.split("://", 1)[1] else "/"
        date = self._tick()
        request_id, response_id = self._uuid(), self._uuid()
        request_block = (
            f"GET {path} HTTP/1.1\r\nUser-Agent: CCBot/2.0 (https://commoncrawl.org/faq/)\r\n"
            f"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\nHost: {host}\r\n\r\n"
        ).encode()
        common = [("WARC-Date", date), ("WARC-Warcinfo-ID", self.warcinfo_id), ("WARC-Target-URI", url)]
        self.add_member(
            self._record(
                "request",
                request_block,
                [
                    *common,
                    ("WARC-Record-ID", request_id),
                    ("WARC-IP-Address", "192.0.2.10"),
                    ("Content-Type", "application/http; msgtype=request"),
                ],
            ),
            {"type": "request", "url": url, "expect": "not_response"},
        )
        full_payload = payload
        warc_extra: list[tuple[str, str]] = []
        if truncate_payload_at is not None:
            payload = payload[:truncate_payload_at]
            warc_extra.append(("WARC-Truncated", "length"))
        if http_block is None:
            http_lines = [
                f"HTTP/1.1 {status}",
                f"Date: {datetime.strptime(date, '%Y-%m-%dT%H:%M:%SZ'):%a, %d %b %Y %H:%M:%S} GMT",
                "Server: nginx",
            ]
            if content_type is not None:
                http_lines.append(f"Content-Type: {content_type}")
            http_lines += [f"{k}: {v}" for k, v in extra_http]
            http_lines.append(f"Content-Length: {len(full_payload)}")
            http_block = ("\r\n".join(http_lines) + "\r\n\r\n").encode("latin-1") + payload
            identified = (content_type or "application/octet-stream").split(";")[0]
            warc_extra += [
                ("WARC-Payload-Digest", sha1_b32(full_payload)),
                ("WARC-Identified-Payload-Type", identified),
            ]
        response = self._record(
            "response",
            http_block,
            [
                *common,
                ("WARC-Record-ID", response_id),
                ("WARC-Concurrent-To", request_id),
                ("WARC-IP-Address", "192.0.2.10"),
                ("Content-Type", "application/http; msgtype=response"),
                ("WARC-Block-Digest", sha1_b32(http_block)),
                *warc_extra,
            ],
        )
        member = gzip.compress(response, compresslevel=9, mtime=0)
        if mangle == "corrupt":
            # Right after the 10-byte gzip header: 0xFF is a deflate block of the reserved type 3, so
            # decompression fails at once and nothing of the record (not even its WARC header) is readable.
            member = member[:10] + b"\xff" * 16 + member[26:]
            try:
                zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(member)
            except zlib.error:
                pass
            else:  # pragma: no cover - a guard on the sample's construction
                raise AssertionError("corrupted member still decompresses")
        elif mangle == "cut":
            member = member[: len(member) // 2]
        self.members.append(member)
        self.records.append({"type": "response", "url": url, "record_id": response_id, **meta})
        if mangle == "cut":
            return  # the file ends inside this record
        metadata_block = (
            f"fetchTimeMs: {self.rng.randint(80, 900)}\r\n"
            f"charset-detected: {meta.get('encoding') or 'n/a'}\r\n"
        ).encode()
        self.add_member(
            self._record(
                "metadata",
                metadata_block,
                [
                    *common,
                    ("WARC-Record-ID", self._uuid()),
                    ("WARC-Refers-To", response_id),
                    ("Content-Type", "application/warc-fields"),
                ],
            ),
            {"type": "metadata", "url": url, "expect": "not_response"},
        )

    def raw_response(self, url: str, block: bytes, meta: dict[str, Any]) -> None:
        """A response record whose block is not an HTTP message at all."""
        record = self._record(
            "response",
            block,
            [
                ("WARC-Date", self._tick()),
                ("WARC-Record-ID", self._uuid()),
                ("WARC-Target-URI", url),
                ("Content-Type", "application/http; msgtype=response"),
            ],
        )
        self.add_member(record, {"type": "response", "url": url, **meta})

    def data(self) -> bytes:
        return b"".join(self.members)


def tiny_png() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    raw = b"".join(b"\x00" + bytes([200, 30, 30]) * 8 for _ in range(8))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def tiny_pdf() -> bytes:
    return (
        b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
        b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 200]>>endobj\n"
        b"trailer<</Root 1 0 R>>\n%%EOF\n"
    )


def declared_codec(html: str) -> str | None:
    """The Python codec for a non-UTF-8 charset the page's <meta> declares, else None."""
    match = META_CHARSET.search(html[:8192])
    return LABEL_CODECS.get(match.group(1).lower()) if match else None


def encode_page(record: dict, rng: random.Random) -> tuple[bytes, str, str | None, str]:
    """(payload, Python codec used, HTTP Content-Type header or None, the charset story)."""
    html: str = record["html"]
    if record["id"] in REENCODE:
        label = REENCODE[record["id"]]
        match = META_CHARSET.search(html[:8192])
        assert match, record["id"]
        html = html[: match.start(1)] + label + html[match.end(1) :]
        codec = LABEL_CODECS[label.lower()]
        return html.encode(codec, "xmlcharrefreplace"), codec, f"text/html; charset={label}", "re-encoded"
    match = META_CHARSET.search(html[:8192])
    label = match.group(1) if match else None
    codec = LABEL_CODECS.get(label.lower()) if label else None
    if codec is not None:
        header = f"text/html; charset={label}" if rng.random() < 0.6 else "text/html"
        return html.encode(codec, "xmlcharrefreplace"), codec, header, "declared"
    roll = rng.random()
    header = (
        "text/html; charset=UTF-8" if roll < 0.6 else "text/html" if roll < 0.9 else "text/html;charset=utf-8"
    )
    return html.encode("utf-8"), "utf-8", header, "utf-8"


def near_duplicate(html: str, variant: int) -> str:
    if variant == 0:  # a dated banner added at the top of the body
        return re.sub(
            r"(<body[^>]*>)", r"\1<div class='notice'>Updated on 14 March 2025</div>", html, count=1
        )
    if variant == 1:  # one paragraph dropped
        paragraphs = [m.start() for m in re.finditer(r"<p[\s>]", html)]
        if len(paragraphs) >= 3:
            start = paragraphs[len(paragraphs) // 2]
            end = html.find("</p>", start)
            if end > 0:
                return html[:start] + html[end + 4 :]
        return html.replace("</body>", "<p>Share this article.</p></body>", 1)
    # a different footer and tracking snippet (a print/AMP variant of the same page)
    return html.replace("</body>", "<footer>Printed from the archive · page 1 of 1</footer></body>", 1)


def build(shared: Path, out: Path, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    gt, extra = select_pages(shared, rng)

    out.mkdir(parents=True, exist_ok=True)
    with open(out / "pages.jsonl.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        for r in gt:
            line = json.dumps({k: r.get(k) for k in KEEP_FIELDS}, ensure_ascii=False) + "\n"
            gz.write(line.encode("utf-8"))

    # Real pages that will be lost on purpose (corrupt member, cut record, WARC-Truncated) come from the
    # extras, so every ground-truth page is readable from the WARCs.
    extra_order = list(extra)
    rng.shuffle(extra_order)
    lost = {"corrupt": extra_order.pop(), "cut": extra_order.pop(), "warc_truncated": extra_order.pop()}
    readable = gt + extra_order
    rng.shuffle(readable)
    per_file = [readable[i :: len(WARC_NAMES)] for i in range(len(WARC_NAMES))]

    clock = datetime(2025, 3, 14, 0, 14, 22, tzinfo=UTC)
    builders = [
        WarcFileBuilder(f"crawl-data/{CRAWL_ID}/segments/{seg}/warc/{name}", rng, clock + timedelta(hours=i))
        for i, (seg, name) in enumerate(WARC_NAMES)
    ]
    in_gt = {r["id"] for r in gt}
    page_payload: dict[str, bytes] = {}

    def page_meta(r: dict, codec: str, story: str, header: str | None) -> dict[str, Any]:
        return {
            "kind": "page",
            "expect": "page",
            "id": r["id"],
            "source": r["source"],
            "page_type": r.get("page_type"),
            "language": r.get("language"),
            "in_pages_jsonl": r["id"] in in_gt,
            "encoding": codec,
            "charset_story": story,
            "http_content_type": header,
        }

    def write_page(builder: WarcFileBuilder, r: dict, **kwargs: Any) -> None:
        payload, codec, header, story = encode_page(r, rng)
        meta = page_meta(r, codec, story, header)
        meta.update(kwargs.pop("meta_update", {}))
        page_payload[r["id"]] = payload
        builder.capture(r["url"], payload, content_type=header, meta=meta, **kwargs)

    # Specials per file, each inserted at a seeded position among the pages (positions fixed up front).
    specials: list[list[tuple[str, Any]]] = [[] for _ in builders]
    specials[0] += [
        ("not_found", None),
        ("redirect", None),
        ("png", None),
        ("too_large", None),
        ("utf8_behind_latin1_header", None),
    ]
    specials[1] += [
        ("pdf", None),
        ("junk", None),
        ("three_words", None),
        ("repeated_lines", None),
        ("corrupt", lost["corrupt"]),
        ("xhtml", None),
    ]
    specials[2] += [
        ("duplicate", 0),
        ("duplicate", 1),
        ("duplicate", 2),
        ("warc_truncated", lost["warc_truncated"]),
        ("robots_txt", None),
    ]
    specials[3] += [
        ("near_duplicate", 0),
        ("near_duplicate", 1),
        ("near_duplicate", 2),
        ("server_error", None),
        ("not_http", None),
    ]

    def plain_utf8(r: dict) -> bool:
        return r["id"] not in REENCODE and declared_codec(r["html"]) is None and not r["html"].isascii()

    utf8_latin1 = next(r for r in per_file[0] if plain_utf8(r))
    per_file[0].remove(utf8_latin1)
    xhtml_page = next(r for r in per_file[1] if plain_utf8(r))
    per_file[1].remove(xhtml_page)
    # Duplicates and near-duplicates copy pages of the first two files (written before files 3 and 4).
    dup_sources = [per_file[0][3], per_file[1][5], per_file[0][11]]
    near_sources = [per_file[1][2], per_file[0][7], per_file[1][13]]

    for index, builder in enumerate(builders):
        builder.warcinfo()
        pages = per_file[index]
        slots = sorted(rng.sample(range(1, len(pages)), len(specials[index])))
        events: list[tuple[str, Any]] = []
        cursor = 0
        for slot, special in zip(slots, specials[index], strict=True):
            events += [("page", r) for r in pages[cursor:slot]]
            events.append(special)
            cursor = slot
        events += [("page", r) for r in pages[cursor:]]
        if index == 2:
            events.append(("cut", lost["cut"]))  # the file ends inside this record
        for kind, arg in events:
            add_event(
                builder,
                kind,
                arg,
                write_page,
                page_meta,
                page_payload,
                dup_sources,
                near_sources,
                utf8_latin1,
                xhtml_page,
                rng,
            )

    manifest: dict[str, Any] = {"crawl_id": CRAWL_ID, "seed": seed, "files": {}, "records": []}
    crawl_dir = out / "crawl-data" / CRAWL_ID
    paths = []
    for builder in builders:
        target = out / builder.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(builder.data())
        paths.append(builder.name)
        expected = Counter(rec["expect"] for rec in builder.records)
        manifest["files"][builder.name] = {
            "records_written": len(builder.records),
            "bytes": target.stat().st_size,
            "sha256": hashlib.sha256(builder.data()).hexdigest(),
            "expected": dict(sorted(expected.items())),
        }
        for rec in builder.records:
            manifest["records"].append({"warc_file": builder.name, **rec})
    with open(crawl_dir / "warc.paths.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(("\n".join(paths) + "\n").encode())
    collinfo = [
        {
            "id": CRAWL_ID,
            "name": "Dripper sample snapshot (real pages from public benchmarks)",
            "timegate": "",
            "cdx-api": "",
            "from": "2025-03-14T00:00:00",
            "to": "2025-03-14T06:00:00",
        }
    ]
    (out / "collinfo.json").write_text(json.dumps(collinfo, indent=1) + "\n")
    manifest["totals"] = summarize(manifest, gt, extra)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    return manifest


def add_event(
    builder,
    kind,
    arg,
    write_page,
    page_meta,
    page_payload,
    dup_sources,
    near_sources,
    utf8_latin1,
    xhtml_page,
    rng,
) -> None:
    synthetic = {"kind": kind, "source": "synthetic", "in_pages_jsonl": False}
    if kind == "page":
        write_page(builder, arg)
    elif kind == "not_found":
        body = b"<html><head><title>404 Not Found</title></head><body><h1>Not Found</h1></body></html>"
        builder.capture(
            "https://sample.invalid/synthetic/missing-page",
            body,
            status="404 Not Found",
            meta={**synthetic, "expect": "non_200"},
        )
    elif kind == "redirect":
        body = b'<html><body>Moved <a href="https://sample.invalid/synthetic/new-home">here</a></body></html>'
        builder.capture(
            "https://sample.invalid/synthetic/old-home",
            body,
            status="301 Moved Permanently",
            extra_http=(("Location", "https://sample.invalid/synthetic/new-home"),),
            meta={**synthetic, "expect": "non_200"},
        )
    elif kind == "server_error":
        body = b"<html><body><h1>503 Service Unavailable</h1></body></html>"
        builder.capture(
            "https://sample.invalid/synthetic/overloaded",
            body,
            status="503 Service Unavailable",
            meta={**synthetic, "expect": "non_200"},
        )
    elif kind == "png":
        builder.capture(
            "https://sample.invalid/synthetic/logo.png",
            tiny_png(),
            content_type="image/png",
            meta={**synthetic, "expect": "non_html"},
        )
    elif kind == "pdf":
        builder.capture(
            "https://sample.invalid/synthetic/report.pdf",
            tiny_pdf(),
            content_type="application/pdf",
            meta={**synthetic, "expect": "non_html"},
        )
    elif kind == "robots_txt":
        builder.capture(
            "https://sample.invalid/robots.txt",
            b"User-agent: *\nDisallow: /private/\n",
            content_type="text/plain",
            meta={**synthetic, "expect": "non_html"},
        )
    elif kind == "too_large":
        line = b"<p>This line repeats until the page is larger than the reader's 10 MB limit.</p>\n"
        body = b"<html><body>" + line * (11 * 1024 * 1024 // len(line)) + b"</body></html>"
        builder.capture(
            "https://sample.invalid/synthetic/huge-page",
            body,
            meta={**synthetic, "expect": "too_large", "payload_bytes": len(body)},
        )
    elif kind == "junk":
        junk = bytes(rng.getrandbits(8) for _ in range(6000))
        builder.capture(
            "https://sample.invalid/synthetic/binary-junk",
            junk,
            content_type="text/html",
            meta={**synthetic, "expect": "page"},
        )
    elif kind == "three_words":
        body = b"<html><head><title>Home</title></head><body><p>Coming soon here</p></body></html>"
        builder.capture(
            "https://sample.invalid/synthetic/coming-soon",
            body,
            meta={**synthetic, "kind": "low_quality", "expect": "page"},
        )
    elif kind == "repeated_lines":
        body = (
            b"<html><head><title>Cheap watches</title></head><body>"
            + b"<p>Buy cheap watches online at the best price today</p>\n" * 300
            + b"</body></html>"
        )
        builder.capture(
            "https://sample.invalid/synthetic/cheap-watches",
            body,
            meta={**synthetic, "kind": "low_quality", "expect": "page"},
        )
    elif kind == "not_http":
        builder.raw_response(
            "https://sample.invalid/synthetic/not-http",
            b"this block is not an HTTP message\r\n",
            meta={**synthetic, "kind": "bad_record", "expect": "bad_record"},
        )
    elif kind == "duplicate":
        original = dup_sources[arg]
        url = original["url"] + ("&" if "?" in original["url"] else "?") + "utm_source=sample-duplicate"
        builder.capture(
            url,
            page_payload[original["id"]],
            content_type="text/html",
            meta={
                "kind": "duplicate",
                "expect": "page",
                "duplicate_of": original["id"],
                "source": original["source"],
                "in_pages_jsonl": False,
            },
        )
    elif kind == "near_duplicate":
        original = near_sources[arg]
        html = near_duplicate(original["html"], arg)
        url = original["url"] + ("&" if "?" in original["url"] else "?") + f"output=print{arg}"
        codec = "utf-8"
        builder.capture(
            url,
            html.encode(codec, "xmlcharrefreplace"),
            content_type="text/html; charset=UTF-8",
            meta={
                "kind": "near_duplicate",
                "expect": "page",
                "near_duplicate_of": original["id"],
                "source": original["source"],
                "in_pages_jsonl": False,
                "encoding": codec,
            },
        )
    elif kind == "utf8_behind_latin1_header":
        # The classic misconfigured server: UTF-8 page, "charset=iso-8859-1" in the HTTP header.
        payload = utf8_latin1["html"].encode("utf-8")
        meta = page_meta(
            utf8_latin1, "utf-8", "utf-8 behind an iso-8859-1 header", "text/html; charset=iso-8859-1"
        )
        page_payload[utf8_latin1["id"]] = payload
        builder.capture(utf8_latin1["url"], payload, content_type="text/html; charset=iso-8859-1", meta=meta)
    elif kind == "xhtml":
        payload = xhtml_page["html"].encode("utf-8")
        meta = page_meta(xhtml_page, "utf-8", "utf-8", "application/xhtml+xml; charset=utf-8")
        page_payload[xhtml_page["id"]] = payload
        builder.capture(
            xhtml_page["url"], payload, content_type="application/xhtml+xml; charset=utf-8", meta=meta
        )
    elif kind == "corrupt":
        write_page(
            builder,
            arg,
            mangle="corrupt",
            meta_update={"kind": "corrupt_member", "expect": "bad_gzip_member"},
        )
    elif kind == "warc_truncated":
        write_page(
            builder,
            arg,
            truncate_payload_at=4096,
            meta_update={"kind": "warc_truncated", "expect": "truncated"},
        )
    elif kind == "cut":
        write_page(
            builder, arg, mangle="cut", meta_update={"kind": "cut_at_end_of_file", "expect": "truncated"}
        )
    else:  # pragma: no cover
        raise ValueError(kind)


def summarize(manifest: dict[str, Any], gt: list[dict], extra: list[dict]) -> dict[str, Any]:
    responses = [r for r in manifest["records"] if r["type"] == "response"]
    by_expect = Counter(r["expect"] for r in manifest["records"])
    return {
        "ground_truth_pages": len(gt),
        "real_pages_in_warcs": len(gt) + len(extra),
        "records": len(manifest["records"]),
        "responses": len(responses),
        "expected": dict(sorted(by_expect.items())),
        "gt_by_source": dict(sorted(Counter(r["source"] for r in gt).items())),
        "gt_by_page_type": dict(sorted(Counter(str(r.get("page_type")) for r in gt).items())),
        "gt_languages": dict(sorted(Counter(str(r.get("language")) for r in gt).items())),
        "real_by_source": dict(sorted(Counter(r["source"] for r in gt + extra).items())),
        "kinds": dict(sorted(Counter(r.get("kind", "page") for r in responses).items())),
        "encodings": dict(
            sorted(Counter(r.get("encoding") or "-" for r in responses if r.get("encoding")).items())
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=REPO / "data" / "sample")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    manifest = build(args.shared, args.out, args.seed)
    print(json.dumps(manifest["totals"], indent=1))
    for name, info in manifest["files"].items():
        print(name, info["bytes"], "bytes", info["expected"])
    total = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"data/sample: {total / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
