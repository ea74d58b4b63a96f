"""Bytes → str for raw HTML, with the charset found the way a browser would.

Order (first that applies wins):

1. ``bom``: a UTF-8 / UTF-16 byte-order mark.
2. ``http``: the charset of the HTTP ``Content-Type`` header, if it decodes strictly.
3. ``meta``: ``<meta charset>``, ``<meta http-equiv="Content-Type" content="…; charset=…">`` or an XML
   declaration in the first ~4 KB, if it decodes strictly.
4. ``utf8``: strict UTF-8 (the common case, and no sniffing is done when it works).
5. a declared charset that decodes with only a few errors (``lossy=True``, undecodable bytes replaced).
6. ``sniff``: charset-normalizer's guess.
7. ``fallback``: cp1252 with ``errors="replace"``.

Labels are normalised as in the WHATWG Encoding Standard (``iso-8859-1``/``latin1``/``ascii`` → cp1252,
``gb2312``/``gbk`` → gb18030, ``shift_jis`` → cp932, …); labels it does not know are ignored, never
passed to Python's codec lookup (which knows unsafe ones such as ``utf-7``).

One deliberate exception to "declared wins": when the declared charset is cp1252 (or one of its aliases)
but the bytes are valid UTF-8 with non-ASCII content, UTF-8 is used. Servers that default to
``iso-8859-1`` in front of UTF-8 pages are common; the opposite (real cp1252 text that happens to be valid
multi-byte UTF-8) practically never occurs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["DecodedHtml", "decode_html", "normalize_charset", "sniff_meta_charset"]

#: How far into the document ``<meta charset>`` is looked for (the HTML spec says 1024 bytes; real pages
#: put long ``<script>``/``<link>`` runs first often enough that 4 KB finds noticeably more).
META_SCAN_BYTES = 4096
#: A declared charset that fails strict decoding is still used when at most this share of the decoded
#: characters are replacement characters (a few stray bytes in an otherwise well-declared page).
LOSSY_MAX_ERROR_RATE = 0.005
#: charset-normalizer only looks at this many leading bytes (it is slow on large documents).
SNIFF_MAX_BYTES = 256 * 1024

# WHATWG Encoding Standard labels (https://encoding.spec.whatwg.org/#names-and-labels), mapped to the
# Python codec that decodes like the standard's decoder.
# fmt: off
_WHATWG_LABELS: dict[str, tuple[str, ...]] = {
    "utf-8": ("unicode-1-1-utf-8", "unicode11utf8", "unicode20utf8", "utf-8", "utf8", "x-unicode20utf8"),
    "cp866": ("866", "cp866", "csibm866", "ibm866"),
    "iso8859_2": ("csisolatin2", "iso-8859-2", "iso-ir-101", "iso8859-2", "iso88592", "iso_8859-2",
                  "iso_8859-2:1987", "l2", "latin2"),
    "iso8859_3": ("csisolatin3", "iso-8859-3", "iso-ir-109", "iso8859-3", "iso88593", "iso_8859-3",
                  "iso_8859-3:1988", "l3", "latin3"),
    "iso8859_4": ("csisolatin4", "iso-8859-4", "iso-ir-110", "iso8859-4", "iso88594", "iso_8859-4",
                  "iso_8859-4:1988", "l4", "latin4"),
    "iso8859_5": ("csisolatincyrillic", "cyrillic", "iso-8859-5", "iso-ir-144", "iso8859-5", "iso88595",
                  "iso_8859-5", "iso_8859-5:1988"),
    "iso8859_6": ("arabic", "asmo-708", "csiso88596e", "csiso88596i", "csisolatinarabic", "ecma-114",
                  "iso-8859-6", "iso-8859-6-e", "iso-8859-6-i", "iso-ir-127", "iso8859-6", "iso88596",
                  "iso_8859-6", "iso_8859-6:1987"),
    "iso8859_7": ("csisolatingreek", "ecma-118", "elot_928", "greek", "greek8", "iso-8859-7", "iso-ir-126",
                  "iso8859-7", "iso88597", "iso_8859-7", "iso_8859-7:1987", "sun_eu_greek"),
    "iso8859_8": ("csiso88598e", "csisolatinhebrew", "hebrew", "iso-8859-8", "iso-8859-8-e", "iso-ir-138",
                  "iso8859-8", "iso88598", "iso_8859-8", "iso_8859-8:1988", "visual", "csiso88598i",
                  "iso-8859-8-i", "logical"),
    "iso8859_10": ("csisolatin6", "iso-8859-10", "iso-ir-157", "iso8859-10", "iso885910", "l6", "latin6"),
    "iso8859_13": ("iso-8859-13", "iso8859-13", "iso885913"),
    "iso8859_14": ("iso-8859-14", "iso8859-14", "iso885914"),
    "iso8859_15": ("csisolatin9", "iso-8859-15", "iso8859-15", "iso885915", "iso_8859-15", "l9"),
    "iso8859_16": ("iso-8859-16",),
    "koi8_r": ("cskoi8r", "koi", "koi8", "koi8-r", "koi8_r"),
    "koi8_u": ("koi8-ru", "koi8-u"),
    "mac_roman": ("csmacintosh", "mac", "macintosh", "x-mac-roman"),
    "cp874": ("dos-874", "iso-8859-11", "iso8859-11", "iso885911", "tis-620", "windows-874"),
    "cp1250": ("cp1250", "windows-1250", "x-cp1250"),
    "cp1251": ("cp1251", "windows-1251", "x-cp1251"),
    "cp1252": ("ansi_x3.4-1968", "ascii", "cp1252", "cp819", "csisolatin1", "ibm819", "iso-8859-1",
               "iso-ir-100", "iso8859-1", "iso88591", "iso_8859-1", "iso_8859-1:1987", "l1", "latin1",
               "us-ascii", "windows-1252", "x-cp1252"),
    "cp1253": ("cp1253", "windows-1253", "x-cp1253"),
    "cp1254": ("cp1254", "csisolatin5", "iso-8859-9", "iso-ir-148", "iso8859-9", "iso88599", "iso_8859-9",
               "iso_8859-9:1989", "l5", "latin5", "windows-1254", "x-cp1254"),
    "cp1255": ("cp1255", "windows-1255", "x-cp1255"),
    "cp1256": ("cp1256", "windows-1256", "x-cp1256"),
    "cp1257": ("cp1257", "windows-1257", "x-cp1257"),
    "cp1258": ("cp1258", "windows-1258", "x-cp1258"),
    "mac_cyrillic": ("x-mac-cyrillic", "x-mac-ukrainian"),
    "gb18030": ("chinese", "csgb2312", "csiso58gb231280", "gb2312", "gb_2312", "gb_2312-80", "gbk",
                "iso-ir-58", "x-gbk", "gb18030"),
    "big5hkscs": ("big5", "big5-hkscs", "cn-big5", "csbig5", "x-x-big5"),
    "euc_jp": ("cseucpkdfmtjapanese", "euc-jp", "x-euc-jp"),
    "iso2022_jp": ("csiso2022jp", "iso-2022-jp"),
    "cp932": ("csshiftjis", "ms932", "ms_kanji", "shift-jis", "shift_jis", "sjis", "windows-31j",
              "x-sjis"),
    "cp949": ("cseuckr", "csksc56011987", "euc-kr", "iso-ir-149", "korean", "ks_c_5601-1987",
              "ks_c_5601-1989", "ksc5601", "ksc_5601", "windows-949"),
    "utf-16-be": ("unicodefffe", "utf-16be"),
    "utf-16-le": ("csunicode", "iso-10646-ucs-2", "ucs-2", "unicode", "unicodefeff", "utf-16", "utf-16le"),
}
# fmt: on
_LABEL_TO_CODEC: dict[str, str] = {
    label: codec for codec, labels in _WHATWG_LABELS.items() for label in labels
}
_UTF16 = frozenset({"utf-16-be", "utf-16-le"})

_META_CHARSET = re.compile(
    rb"""<meta\b[^>]*?\bcharset\s*=\s*["']?\s*([a-z0-9_:.+-]+)""",
    re.IGNORECASE,
)
_XML_ENCODING = re.compile(rb"""^\s*<\?xml\b[^>]*?\bencoding\s*=\s*["']([a-z0-9_:.+-]+)""", re.IGNORECASE)
_BOMS: tuple[tuple[bytes, str], ...] = (
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)


@dataclass(frozen=True, slots=True)
class DecodedHtml:
    """The result of :func:`decode_html`.

    Attributes:
        text: The decoded document (a BOM, if any, removed).
        encoding: The Python codec used (``"utf-8"``, ``"cp1252"``, ``"gb18030"``, …), or ``None`` for
            ``str`` input.
        source: How the encoding was found: ``str`` (input was already text), ``bom``, ``http``, ``meta``,
            ``utf8``, ``sniff`` or ``fallback``.
        declared: The normalised charset the page or server declared, if any (even when not used).
        lossy: Whether undecodable bytes were replaced with U+FFFD.
    """

    text: str
    encoding: str | None
    source: str
    declared: str | None = None
    lossy: bool = False


def normalize_charset(label: str | bytes | None) -> str | None:
    """Map a charset label (``"ISO-8859-1"``, ``b"gb2312"``, ``"Shift_JIS"``) to a Python codec name the
    WHATWG way, or ``None`` for a missing or unknown label."""
    if label is None:
        return None
    if isinstance(label, bytes):
        label = label.decode("ascii", "ignore")
    return _LABEL_TO_CODEC.get(label.strip().strip("\"'").lower())


def sniff_meta_charset(head: bytes) -> str | None:
    """The normalised charset declared in ``head`` by an XML declaration or a ``<meta>`` tag, or ``None``.

    A ``<meta>`` declaring UTF-16 means UTF-8 (HTML spec: a page that can be read as ASCII to find its
    ``<meta>`` is not UTF-16).
    """
    head = head[:META_SCAN_BYTES]
    for pattern in (_XML_ENCODING, _META_CHARSET):
        match = pattern.search(head)
        if match:
            codec = normalize_charset(match.group(1))
            if codec is not None:
                return "utf-8" if codec in _UTF16 else codec
    return None


def _strict(data: bytes, codec: str) -> str | None:
    try:
        return data.decode(codec)
    except (UnicodeDecodeError, LookupError):
        return None


def _lossy(data: bytes, codec: str) -> tuple[str, float]:
    text = data.decode(codec, errors="replace")
    return text, text.count("\ufffd") / max(len(text), 1)


def _sniff(data: bytes) -> str | None:
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # an optional speed-up of the fallback, not a hard requirement
        return None
    try:
        best = from_bytes(data[:SNIFF_MAX_BYTES]).best()
    except Exception:  # charset-normalizer must never make decoding raise
        return None
    if best is None:
        return None
    return normalize_charset(best.encoding.replace("_", "-")) or _python_codec(best.encoding)


def _python_codec(name: str) -> str | None:
    # charset-normalizer answers with Python codec names ("cp1251", "shift_jis", "big5"); re-map the ones
    # the WHATWG table spells differently so the decoder matches a browser's.
    aliases = {
        "shift_jis": "cp932",
        "euc_kr": "cp949",
        "big5": "big5hkscs",
        "gb2312": "gb18030",
        "gbk": "gb18030",
        "latin_1": "cp1252",
        "ascii": "cp1252",
        "utf_8": "utf-8",
    }
    key = name.lower()
    if key in aliases:
        return aliases[key]
    return key if key in _WHATWG_LABELS else None


def decode_html(data: bytes | bytearray | memoryview | str, http_charset: str | None = None) -> DecodedHtml:
    """Decode raw HTML bytes to text.

    Args:
        data: The payload. ``str`` is returned as is (``source="str"``).
        http_charset: The ``charset`` parameter of the HTTP ``Content-Type`` header, as sent (any label).

    Returns:
        A :class:`DecodedHtml`. Never raises on bytes: the last resort is cp1252 with replacement.

    Raises:
        ValueError: if ``data`` is neither ``str`` nor bytes-like.
    """
    if isinstance(data, str):
        return DecodedHtml(text=data, encoding=None, source="str")
    if isinstance(data, bytearray | memoryview):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise ValueError(
            f"decode_html expects str or bytes, got {type(data).__name__}; pass the raw payload bytes or text"
        )

    for bom, codec in _BOMS:
        if data.startswith(bom):
            return DecodedHtml(
                text=data[len(bom) :].decode(codec, errors="replace"), encoding=codec, source="bom"
            )

    declared: list[tuple[str, str]] = []  # (codec, source) in precedence order
    http_codec = normalize_charset(http_charset)
    if http_codec is not None:
        declared.append((http_codec, "http"))
    meta_codec = sniff_meta_charset(data[:META_SCAN_BYTES])
    if meta_codec is not None and meta_codec != http_codec:
        declared.append((meta_codec, "meta"))
    first_declared = declared[0][0] if declared else None

    for codec, source in declared:
        if codec == "cp1252" and not data.isascii():
            as_utf8 = _strict(data, "utf-8")
            if as_utf8 is not None:
                return DecodedHtml(as_utf8, "utf-8", "utf8", declared=first_declared)
        text = _strict(data, codec)
        if text is not None:
            return DecodedHtml(text, codec, source, declared=first_declared)

    if "utf-8" not in {codec for codec, _ in declared}:
        text = _strict(data, "utf-8")
        if text is not None:
            return DecodedHtml(text, "utf-8", "utf8", declared=first_declared)

    for codec, source in declared:
        text, error_rate = _lossy(data, codec)
        if error_rate <= LOSSY_MAX_ERROR_RATE:
            return DecodedHtml(text, codec, source, declared=first_declared, lossy=True)

    sniffed = _sniff(data)
    if sniffed is not None:
        text = _strict(data, sniffed)
        if text is not None:
            return DecodedHtml(text, sniffed, "sniff", declared=first_declared)
        text, error_rate = _lossy(data, sniffed)
        if error_rate <= LOSSY_MAX_ERROR_RATE:
            return DecodedHtml(text, sniffed, "sniff", declared=first_declared, lossy=True)

    text = data.decode("cp1252", errors="replace")
    return DecodedHtml(text, "cp1252", "fallback", declared=first_declared, lossy="\ufffd" in text)
