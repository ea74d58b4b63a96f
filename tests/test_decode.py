import gzip
import json
import random
from pathlib import Path

import pytest

from dripper import decode
from dripper.decode import DecodedHtml, decode_html, normalize_charset, sniff_meta_charset

SAMPLE_PAGES = Path(__file__).resolve().parents[1] / "data" / "sample" / "pages.jsonl.gz"

RUSSIAN = "Съешь же ещё этих мягких французских булок, да выпей чаю."
JAPANESE = "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"
CHINESE = "中华人民共和国是世界上人口最多的国家之一，历史悠久，文化灿烂。"


def page(body: str, head: str = "") -> str:
    return f"<!DOCTYPE html><html><head>{head}<title>t</title></head><body><p>{body}</p></body></html>"


def test_str_passes_through_unchanged():
    html = page("déjà vu")
    result = decode_html(html, http_charset="shift_jis")
    assert result.text is html
    assert (result.encoding, result.source) == (None, "str")


@pytest.mark.parametrize("bad", [None, 42, ["<html>"], {"html": b""}])
def test_non_text_input_raises_value_error(bad):
    with pytest.raises(ValueError, match="expects str or bytes"):
        decode_html(bad)


def test_bytearray_and_memoryview_are_bytes():
    raw = page("café").encode("utf-8")
    assert decode_html(bytearray(raw)).text == page("café")
    assert decode_html(memoryview(raw)).text == page("café")


def test_utf8_bom_wins_over_declarations_and_is_removed():
    html = page("naïve", head='<meta charset="windows-1251">')
    result = decode_html(b"\xef\xbb\xbf" + html.encode("utf-8"), http_charset="iso-8859-1")
    assert result.source == "bom"
    assert result.encoding == "utf-8"
    assert result.text == html


def test_utf16_bom():
    html = page(RUSSIAN)
    result = decode_html(b"\xff\xfe" + html.encode("utf-16-le"))
    assert (result.source, result.text) == ("bom", html)


def test_http_charset_wins_over_meta():
    html = page(RUSSIAN, head='<meta charset="koi8-r">')
    result = decode_html(html.encode("cp1251"), http_charset="windows-1251")
    assert (result.source, result.encoding) == ("http", "cp1251")
    assert result.text == html


def test_meta_used_when_http_charset_does_not_decode():
    html = page(JAPANESE, head='<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">')
    result = decode_html(html.encode("cp932"), http_charset="utf-8")
    assert (result.source, result.encoding) == ("meta", "cp932")
    assert result.text == html


@pytest.mark.parametrize(
    "head",
    [
        '<meta charset="windows-1251">',
        "<meta charset=windows-1251>",
        '<META HTTP-EQUIV="content-type" CONTENT="text/html; charset=Windows-1251">',
    ],
)
def test_meta_charset_forms(head):
    html = page(RUSSIAN, head=head)
    result = decode_html(html.encode("cp1251"))
    assert (result.source, result.encoding, result.text) == ("meta", "cp1251", html)


def test_xml_declaration_counts_as_in_document_declaration():
    html = '<?xml version="1.0" encoding="windows-1251"?>' + page(RUSSIAN)
    result = decode_html(html.encode("cp1251"))
    assert (result.source, result.text) == ("meta", html)


def test_meta_past_the_scan_window_is_ignored():
    html = "<!-- " + "x" * decode.META_SCAN_BYTES + " -->" + page("ok", head='<meta charset="koi8-r">')
    assert sniff_meta_charset(html.encode()) is None
    assert decode_html(html.encode("utf-8")).source == "utf8"


def test_meta_declaring_utf16_means_utf8():
    assert sniff_meta_charset(b'<meta charset="utf-16">') == "utf-8"


def test_gb2312_page_decodes_as_gb18030():
    html = page(CHINESE + " 𠀀", head='<meta http-equiv="Content-Type" content="text/html; charset=gb2312">')
    result = decode_html(html.encode("gb18030"))
    assert (result.source, result.encoding) == ("meta", "gb18030")
    assert result.text == html


def test_real_gb2312_page_from_the_sample():
    with gzip.open(SAMPLE_PAGES, "rt", encoding="utf-8") as f:
        qq = next(r for r in map(json.loads, f) if r["id"] == "readability-qq")
    result = decode_html(qq["html"].encode("gb18030"), http_charset="GB2312")
    assert (result.source, result.encoding) == ("http", "gb18030")
    assert result.text == qq["html"]


@pytest.mark.parametrize("label", ["Shift_JIS", "shift-jis", "sjis", "windows-31j", "x-sjis"])
def test_shift_jis_labels(label):
    html = page(JAPANESE)
    result = decode_html(html.encode("cp932"), http_charset=label)
    assert (result.source, result.encoding, result.text) == ("http", "cp932", html)


def test_latin1_header_in_front_of_utf8_bytes_gives_utf8():
    html = page("Crème brûlée für Müller")
    result = decode_html(html.encode("utf-8"), http_charset="ISO-8859-1")
    assert (result.source, result.encoding, result.declared) == ("utf8", "utf-8", "cp1252")
    assert result.text == html


def test_latin1_header_decodes_real_latin1_bytes_as_cp1252():
    html = page("Crème brûlée – “quoted”")
    result = decode_html(html.encode("cp1252"), http_charset="iso-8859-1")
    assert (result.source, result.encoding, result.text) == ("http", "cp1252", html)


def test_undeclared_utf8_takes_the_fast_path_without_sniffing(monkeypatch):
    def no_sniffing(data):
        raise AssertionError("sniffed a clean UTF-8 page")

    monkeypatch.setattr(decode, "_sniff", no_sniffing)
    html = page(JAPANESE + RUSSIAN)
    result = decode_html(html.encode("utf-8"))
    assert (result.source, result.encoding, result.text, result.lossy) == ("utf8", "utf-8", html, False)


def test_undeclared_non_utf8_is_sniffed():
    html = page(" ".join([RUSSIAN] * 20))
    result = decode_html(html.encode("cp1251"))
    assert result.source == "sniff"
    assert RUSSIAN in result.text


def test_declared_charset_with_a_stray_byte_is_used_lossily():
    html = page(" ".join([RUSSIAN] * 40), head='<meta charset="utf-8">')
    raw = html.encode("utf-8").replace("чаю".encode(), b"\xff", 1)
    result = decode_html(raw)
    assert (result.source, result.encoding, result.lossy) == ("meta", "utf-8", True)
    assert result.text.count("\ufffd") == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_binary_junk_never_raises(seed):
    rng = random.Random(seed)
    junk = bytes(rng.getrandbits(8) for _ in range(5000))
    result = decode_html(junk, http_charset="text/html")
    assert isinstance(result, DecodedHtml)
    assert isinstance(result.text, str) and result.text
    assert result.source in ("sniff", "fallback")


def test_empty_bytes():
    assert decode_html(b"").text == ""


@pytest.mark.parametrize(
    ("label", "codec"),
    [
        ("iso-8859-1", "cp1252"),
        ("Latin1", "cp1252"),
        ("US-ASCII", "cp1252"),
        ("ascii", "cp1252"),
        ("gb2312", "gb18030"),
        ("GBK", "gb18030"),
        (' "UTF8" ', "utf-8"),
        (b"windows-1251", "cp1251"),
        ("euc-kr", "cp949"),
        ("big5", "big5hkscs"),
        ("iso-8859-9", "cp1254"),
        ("tis-620", "cp874"),
    ],
)
def test_normalize_charset_whatwg_aliases(label, codec):
    assert normalize_charset(label) == codec


@pytest.mark.parametrize("label", [None, "", "utf-7", "x-user-defined", "klingon", "latin_1"])
def test_unknown_or_unsafe_labels_are_ignored(label):
    assert normalize_charset(label) is None


def test_unknown_http_label_falls_through_to_meta():
    html = page(RUSSIAN, head='<meta charset="windows-1251">')
    result = decode_html(html.encode("cp1251"), http_charset="utf-7")
    assert (result.source, result.text) == ("meta", html)
