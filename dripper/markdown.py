"""Main-content HTML → Markdown.

:func:`html_to_markdown` takes the main HTML of a page (a fragment or a whole document, a string or an lxml
element) and returns Markdown: ATX headings, paragraphs, lists, pipe tables (complex tables kept as cleaned
HTML), fenced code with its language, formulas as ``$…$`` / ``$$…$$`` LaTeX (see
:mod:`dripper.markdown_math`), and, on request, links and images.

Why a converter of our own, on lxml, rather than a library. Measured on the cases this module must handle
(200 trafilatura main HTMLs of dev.jsonl.gz, mean 10 KB, ``bench/markdown.py``):

- ``html_to_markdown`` (the Rust package, 3.21; 0.3 ms/page) gets the structure mostly right but loses
  every formula (MathML flattened to ``x=1/y``, MathJax scripts dropped, KaTeX text doubled), writes colspan
  tables as lossy pipe tables and single-cell layout tables as pipe tables, keeps ``aria-hidden`` content,
  ignores ``highlight-x`` code classes, writes ``<br>`` as trailing spaces and glues a blockquote to the
  paragraph before it. Fixing that around it needs a pre-pass on our own parse tree (placeholders for math
  and tables), a serialisation and a post-pass: most of the work of a converter, plus a second parse.
- ``markdownify`` (BeautifulSoup; ~4 ms/page, 3x html2text) has the same formula and table gaps, keeps hidden content
  and the text of ``<button>``/``<noscript>``/``<template>``.
- ``html2text`` (the benchmark's converter; 1.5–1.8 ms/page) has no formulas, no code languages and no
  complex tables.

This converter is one pass of ``lxml.etree.iterwalk`` (no recursion, so a 10,000-level page is fine) over a
stack of block frames: 0.4 ms/page, 0.8–0.9 ms per 20 KB of main HTML, ~4x faster than html2text.

Output conventions, chosen for ROUGE against plain-text ground truth: ``<br>`` is a bare newline; Markdown
characters are escaped only where they would change meaning (``#``, ``-``, ``+``, ``*``, ``1.``, ``>`` at
line start; ``*``/``_`` pairs that would form emphasis; ``|`` in pipe cells).

Known limits: ``$`` and ``<tag>``-like text are not escaped (prices may read as math, ``<div>`` text as
HTML); emphasis delimiters split across elements are not escaped; presentation MathML is converted for
the common elements only (no ``mstyle`` sizes, ``menclose`` shapes, ``mlongdiv``); MathJax 3 output without
its assistive MathML has no recoverable TeX; "layout table" is a heuristic (role, one column, one cell, or
nested tables / block cells without any header).
"""

from __future__ import annotations

import contextlib
import html as html_lib
import logging
import re
from dataclasses import dataclass
from urllib.parse import urljoin

from lxml import etree

from dripper import markdown_math as math

__all__ = ["MarkdownOptions", "html_to_markdown"]

logger = logging.getLogger(__name__)

MAX_INDENT_DEPTH = 24  # lists / quotes nested deeper are written flat
MAX_TABLE_DEPTH = 8  # tables nested deeper are read as layout
MAX_PARSE_DEPTH = 200  # libxml2 stops at 256 levels; deeper markup is re-parsed and flattened

_DROP_TAGS = frozenset((
    "style", "noscript", "template", "input", "select", "textarea", "button", "option", "optgroup",
    "datalist", "head", "title", "meta", "link", "base", "iframe", "frame", "frameset", "object", "embed",
    "applet", "svg", "canvas", "audio", "video", "source", "track", "map", "area", "param", "rp", "dialog"
))  # fmt: skip
_BLOCK_TAGS = frozenset((
    "address", "article", "aside", "body", "center", "details", "div", "fieldset", "figcaption", "figure",
    "footer", "form", "header", "hgroup", "html", "main", "nav", "p", "section", "summary", "legend",
    "search", "tr", "td", "th", "thead", "tbody", "tfoot", "caption"
))  # fmt: skip
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_CODE_TAGS = frozenset(("code", "kbd", "samp", "tt", "var"))  # trafilatura writes <tt> as <var>
_PRE_TAGS = frozenset(("pre", "listing", "xmp", "plaintext"))
_CELL_BLOCK_TAGS = ("ul", "ol", "dl", "li", "pre", "blockquote", "table", "hr", *_HEADINGS)
_VERBATIM_SKIP = frozenset(("script", "style", "noscript", "template", "button", "input", "textarea"))

_HIDDEN_STYLE_RE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
_CONTROL_BYTES = bytes([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F])
_MULTI_NL_RE = re.compile(r"\n{3,}")
_SOFT_NL_RE = re.compile(r"(?<=[^\n])\n(?=[^\n])")
_LINE_START_RE = re.compile(
    r"^(?:(?P<num>\d{1,9})(?=[.)](?:[ \t]|$))"
    r"|(?=#{1,6}(?:[ \t]|$)|[-+*](?:[ \t]|$)|>|`{3}|~{3}|=+[ \t]*$|([-*_])[ \t]*(?:\1[ \t]*){2,}$))",
    re.M,
)
_LIST_BLOCK_RE = re.compile(r"(?:[-:]|\d{1,9}\.) ")  # text paragraphs never start so: they are escaped
_LINE_START_CHARS = frozenset("#-+*>`~=_0123456789")
_STAR_PAIR_RE = re.compile(r"\*+[^\s*](?:[^*]*?[^\s*])?\*+")
_UNDERSCORE_PAIR_RE = re.compile(r"(?<!\w)_+[^\s_](?:[^_]*?[^\s_])?_+(?!\w)")
_LANG_RE = re.compile(r"(?:^|\s)(?:language-|lang-|highlight-(?:source-)?|brush:\s*)([\w+#.-]+)")
_NO_LANGS = frozenset(("none", "nohighlight", "plain", "plaintext", "text", "txt"))
_GUTTER_RE = re.compile(r"line-?n(?:o|um)|gutter", re.I)
_BACKTICKS_RE = re.compile(r"`+")

# what the walker does with an element: on "start", and what its action tells "end"
_INLINE, _BLOCK, _SKIP, _FRAME, _SPAN, _CHUNK, _TABLE = range(7)
_A_INLINE = (_INLINE, None)
_A_BLOCK = (_BLOCK, None)
_A_SKIP = (_SKIP, None)


@dataclass(frozen=True, slots=True)
class MarkdownOptions:
    """How main HTML is written as Markdown.

    Attributes:
        include_links: Write ``[text](absolute url)``; otherwise links are their text.
        include_images: Write ``![alt](src)``; otherwise images are dropped (formula images are always kept).
        emphasis: Write ``**bold**`` and ``*italic*``; otherwise their plain text.
        hard_breaks: Write ``<br>`` as a CommonMark hard break (two trailing spaces, as html2text does);
            otherwise as a bare newline.
    """

    include_links: bool = False
    include_images: bool = False
    emphasis: bool = True
    hard_breaks: bool = False


def html_to_markdown(
    main_html: str | bytes | etree._Element | etree._ElementTree | None,
    *,
    url: str | None = None,
    include_links: bool = False,
    include_images: bool = False,
    emphasis: bool = True,
    hard_breaks: bool = False,
    options: MarkdownOptions | None = None,
) -> str:
    """Convert main-content HTML to Markdown.

    Args:
        main_html: The main HTML: a document or fragment (``str``, or UTF-8 ``bytes``), or an lxml element /
            tree (read, never modified). ``cc-alg-uc-text`` wrappers and other unknown tags are transparent.
        url: The page URL, against which relative link and image URLs are resolved.
        include_links, include_images, emphasis, hard_breaks: See :class:`MarkdownOptions`.
        options: All the flags at once; when given, it replaces the keyword flags.

    Returns:
        Markdown without leading/trailing blank lines ('' for empty input). Never raises on odd markup.
    """
    if options is None:
        options = MarkdownOptions(include_links, include_images, emphasis, hard_breaks)
    if isinstance(main_html, etree._ElementTree):
        main_html = main_html.getroot()
    if main_html is None:
        return ""
    root = main_html if isinstance(main_html, etree._Element) else _parse(main_html)
    if root is None or not isinstance(root.tag, str):
        return ""
    try:
        markdown = _Writer(options, url).run(root)
    except Exception as exc:  # a converter bug must not lose the page: fall back to its plain text
        logger.warning("html_to_markdown: %s: %s; writing plain text instead", type(exc).__name__, exc)
        markdown = "\n\n".join(" ".join(t.split()) for t in root.itertext() if not t.isspace())
    # A tree (the reconstructed main content) may hold control characters the page had as raw bytes or as
    # references (&#26;); parsed text has them removed already. No corpus wants them.
    return _CONTROL_RE.sub("", markdown) if root is main_html else markdown


# ---- parsing --------------------------------------------------------------------------------------------


def _parse(markup: str | bytes) -> etree._Element | None:
    if isinstance(markup, bytes):
        markup = markup.decode("utf-8", "replace")
    if not markup or markup.isspace():
        return None
    # bytes: no "encoding declaration" error, and lone surrogates become U+FFFD instead of cutting the text;
    # C0 controls (invalid in HTML) are deleted: in UTF-8 those bytes only ever stand for themselves
    data = markup.encode("utf-8", "replace").translate(None, _CONTROL_BYTES)
    parser = etree.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True, no_network=True)
    try:
        root = etree.fromstring(data, parser)
    except (etree.LxmlError, ValueError):
        return None
    for error in parser.error_log.filter_from_fatals():
        if "depth" in error.message:
            return _parse_flattened(markup)
    return root


def _parse_flattened(markup: str) -> etree._Element | None:
    """Parse with lexbor (no depth limit) and copy into lxml, unwrapping elements below MAX_PARSE_DEPTH."""
    from selectolax.lexbor import LexborHTMLParser

    source = LexborHTMLParser(markup).body
    if source is None:
        return None
    root = etree.Element("body")
    stack = [(iter(list(source.iter(include_text=True))), root, 0)]
    while stack:
        children, parent, depth = stack[-1]
        node = next(children, None)
        if node is None:
            stack.pop()
            continue
        if node.is_text_node:
            _append_text(parent, _CONTROL_RE.sub("", node.text_content or ""))
        elif not node.is_comment_node and isinstance(node.tag, str):
            kids = iter(list(node.iter(include_text=True)))
            if depth >= MAX_PARSE_DEPTH:
                stack.append((kids, parent, depth))  # unwrap: the children join the capped ancestor
                continue
            try:
                child = etree.SubElement(parent, node.tag)
            except ValueError:
                child = etree.SubElement(parent, "span")
            for name, value in (node.attributes or {}).items():
                with contextlib.suppress(ValueError, TypeError):  # a name lxml rejects
                    child.set(name, _CONTROL_RE.sub("", value or ""))
            stack.append((kids, child, depth + 1))
    return root


def _append_text(parent: etree._Element, text: str) -> None:
    if not text:
        return
    if len(parent):
        parent[-1].tail = (parent[-1].tail or "") + text
    else:
        parent.text = (parent.text or "") + text


# ---- element tests --------------------------------------------------------------------------------------


def _is_hidden(el: etree._Element) -> bool:
    hidden = el.get("hidden")
    if hidden is not None and hidden.lower() != "false":
        return True
    aria = el.get("aria-hidden")
    if aria is not None and aria.strip().lower() == "true":
        return True
    style = el.get("style")
    return bool(style and ("none" in style or "hidden" in style) and _HIDDEN_STYLE_RE.search(style))


def _int_attr(el: etree._Element, attr: str, default: int) -> int:
    value = (el.get(attr) or "").strip()
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else default


def _span_of(cell: etree._Element, attr: str) -> int:
    return _int_attr(cell, attr, 1)


def _absolute(base: str | None, link: str) -> str:
    if base:
        with contextlib.suppress(ValueError):  # e.g. a broken IPv6 host: keep the link as written
            link = urljoin(base, link)
    return link.replace(" ", "%20").replace("(", "%28").replace(")", "%29")


def _classify_table(table: etree._Element) -> str:
    """'pipe' (simple data table), 'html' (keep as cleaned HTML) or 'layout' (write its cells as text)."""
    if (table.get("role") or "").lower() in ("presentation", "none"):
        return "layout"
    rows: list[etree._Element] = []
    for child in table:
        if child.tag == "tr":
            rows.append(child)
        elif child.tag in ("thead", "tbody", "tfoot"):
            rows.extend(r for r in child if r.tag == "tr")
    header = table.find("thead") is not None or table.find("caption") is not None
    n_cells = widest = 0
    spans = blocks = False
    for row in rows:
        cells = [c for c in row if c.tag in ("td", "th")]
        n_cells += len(cells)
        widest = max(widest, len(cells))
        for cell in cells:
            header = header or cell.tag == "th"
            spans = spans or _span_of(cell, "colspan") > 1 or _span_of(cell, "rowspan") > 1
            blocks = blocks or next(cell.iter(*_CELL_BLOCK_TAGS), None) is not None
    if n_cells <= 1 or widest <= 1:
        return "layout"
    if blocks or next(table.iterdescendants("table"), None) is not None:
        return "html" if header else "layout"
    return "html" if spans else "pipe"


def _verbatim_text(el: etree._Element) -> str:
    """Text of a code element as displayed: ``<br>`` and block children end lines; gutters are skipped."""
    out: list[str] = []
    walker = etree.iterwalk(el, events=("start", "end", "comment", "pi"))
    for event, node in walker:
        if event == "start":
            tag = node.tag
            if tag in _VERBATIM_SKIP or _is_hidden(node) or _GUTTER_RE.search(node.get("class") or ""):
                walker.skip_subtree()
                node = None
            elif tag == "br":
                out.append("\n")
            elif node.text:
                out.append(node.text)
            continue
        block_end = event == "end" and node is not el and (node.tag in _BLOCK_TAGS or node.tag == "li")
        if block_end and out and not out[-1].endswith("\n"):
            out.append("\n")
        if node is not el and node.tail:
            out.append(node.tail)
    return "".join(out)


def _blank(text: str | None) -> bool:
    return not text or text.isspace()


def _is_inline_pre(pre: etree._Element) -> bool:
    """A one-line <pre> with text beside it in the same parent (trafilatura's inline code)."""
    if not _blank(pre.tail):
        previous = None
    else:
        sibling = pre.getprevious()
        parent = pre.getparent()
        previous = sibling.tail if sibling is not None else parent.text if parent is not None else None
        if _blank(previous):
            return False
    text = "".join(pre.itertext())
    return "\n" not in text.strip() and len(text) < 200


def _code_language(pre: etree._Element) -> str:
    candidates = [pre, *(c for c in pre if c.tag == "code")]
    parent = pre.getparent()
    if parent is not None:
        candidates.append(parent)
        if parent.getparent() is not None:
            candidates.append(parent.getparent())
    for el in candidates:
        lang = el.get("data-lang") or el.get("data-language")
        if not lang:
            match = _LANG_RE.search(el.get("class") or "")
            lang = match.group(1) if match else ""
        lang = lang.strip().lower()
        if lang and lang not in _NO_LANGS and " " not in lang:
            return lang
    return ""


def _fence(code: str, minimum: int) -> str:
    longest = max((len(run) for run in _BACKTICKS_RE.findall(code)), default=0)
    return "`" * max(minimum, longest + 1)


# ---- the writer -----------------------------------------------------------------------------------------


class _Frame:
    """A block container being written: finished blocks, plus the inline run of the current paragraph."""

    __slots__ = ("kind", "blocks", "parts", "space", "gen", "number", "ordered", "rows", "html", "formula")

    def __init__(self, kind: str, html: bool = False, number: int = 0) -> None:
        self.kind = kind
        self.blocks: list[str] = []
        self.parts: list[str] = []
        self.space = True  # the inline run is empty or ends in a space: drop leading whitespace
        self.gen = 0  # bumped at each flush, so an open span knows its start index went stale
        self.number = number  # heading level / next ordered-list number
        self.ordered = False
        self.rows: list = []  # pipe table: list of row cell texts; HTML table: output chunks
        self.html = html  # inside a table kept as HTML: escape text, no Markdown markup
        self.formula = False  # the inline run ends with an inline formula


class _Writer:
    def __init__(self, options: MarkdownOptions, url: str | None) -> None:
        self.links = options.include_links
        self.images = options.include_images
        self.emphasis = options.emphasis
        self.hard_breaks = options.hard_breaks
        self.url = url
        self.frames = [_Frame("root")]
        self.bold = self.italic = self.linked = 0
        self.indent_depth = self.table_depth = 0
        self.closed_p: tuple = (None, None, 0)  # the last <p> ended: (element, frame, its block count)

    def run(self, root: etree._Element) -> str:
        actions: list[tuple] = []
        walker = etree.iterwalk(root, events=("start", "end", "comment", "pi"))
        for event, el in walker:
            if event == "start":
                action = self.start(el)
                actions.append(action)
                if action[0] == _SKIP:
                    walker.skip_subtree()
                elif el.text:
                    self.text(el.text)
            elif event == "end":
                self.end(actions.pop())
                if el.tail and el is not root:
                    self.text(el.tail)
            elif el.tail:  # comment / processing instruction
                self.text(el.tail)
        while len(self.frames) > 1:  # only on an aborted walk; keep what was written
            self.end((_FRAME, None))
        top = self.frames[0]
        self.flush(top)
        return "\n\n".join(top.blocks)

    # -- inline text --------------------------------------------------------------------------------------

    def text(self, text: str) -> None:
        frame = self.frames[-1]
        words = text.split()
        if not words:
            if not frame.space:
                frame.parts.append(" ")
                frame.space = True
            return
        run = " ".join(words)
        if not frame.space and (text[0].isspace() or (frame.formula and run[0].isalnum())):
            run = " " + run
        if not frame.html and ("*" in run or "_" in run):
            run = _escape_emphasis(run)
        frame.space = text[-1].isspace()
        frame.formula = False
        frame.parts.append(run + " " if frame.space else run)

    def inline(self, markup: str) -> None:
        frame = self.frames[-1]
        frame.parts.append(markup)
        frame.space = frame.formula = False

    def flush(self, frame: _Frame) -> None:
        """Close the frame's inline run into a paragraph block."""
        if not frame.parts:
            return
        text = "".join(frame.parts)
        frame.parts.clear()
        frame.space = True
        frame.gen += 1
        if "\n" in text:
            text = _MULTI_NL_RE.sub("\n\n", "\n".join(line.strip(" ") for line in text.split("\n"))).strip()
            if self.hard_breaks and not frame.html:
                text = _SOFT_NL_RE.sub("  \n", text)
        else:
            text = text.strip(" ")
        if not text:
            return
        if frame.html:
            text = html_lib.escape(text, quote=False).replace("\n", "<br>")
        elif frame.kind not in ("heading", "cell") and _may_need_line_escape(text):
            text = _LINE_START_RE.sub(_escape_line_start, text)
        frame.blocks.append(text)

    def block(self, markdown: str) -> None:
        frame = self.frames[-1]
        self.flush(frame)
        frame.blocks.append(html_lib.escape(markdown, quote=False) if frame.html else markdown)

    # -- start of an element ------------------------------------------------------------------------------

    def start(self, el: etree._Element) -> tuple:
        tag = el.tag
        if not isinstance(tag, str):
            return _A_SKIP
        if tag[0] == "{" or ":" in tag:
            tag = math.local_name(tag)
        if _is_hidden(el):
            return _A_SKIP
        if tag in _DROP_TAGS:
            return _A_SKIP
        top = self.frames[-1]
        if tag in ("span", "div") or tag.startswith("mjx"):
            classes = el.get("class") or ""
            if tag == "mjx-container" or "katex" in classes or "mwe-math" in classes:
                found = math.container_tex(el, classes)
                if found:
                    self.formula(*found)
                    return _A_SKIP
            elif "MathJax" in classes and math.is_mathjax_duplicate(el, classes):
                return _A_SKIP
        if tag in _BLOCK_TAGS:
            if tag in ("tr", "td", "th", "caption", "thead", "tbody", "tfoot"):
                return self.start_table_part(el, tag, top)
            self.flush(top)
            return (_BLOCK, el) if tag == "p" else _A_BLOCK
        if tag == "br":
            top.parts.append("\n")
            top.space = True
            return _A_SKIP
        if tag in ("b", "strong", "i", "em", "a"):
            return self.start_span(el, tag, top)
        if tag in _CODE_TAGS:
            if next(el.iter("br", "pre"), None) is not None:
                self.code_block(el)
            else:
                self.inline_code(el)
            return _A_SKIP
        if tag in _HEADINGS:
            if top.kind == "heading":  # a heading inside a heading is part of its text
                return _A_INLINE
            return self.push(top, _Frame("heading", top.html, _HEADINGS[tag]))
        if tag in ("ul", "ol", "menu", "dir", "dl") or tag == "blockquote":
            if self.indent_depth >= MAX_INDENT_DEPTH:
                self.flush(top)
                return _A_BLOCK
            self.indent_depth += 1
            kind = "quote" if tag == "blockquote" else "dl" if tag == "dl" else "list"
            frame = _Frame(kind, top.html)
            if tag == "ol":
                frame.ordered = True
                frame.number = _int_attr(el, "start", 1)
            return self.push(top, frame)
        if tag == "li":
            if top.kind == "list" and top.ordered:
                top.number = _int_attr(el, "value", top.number)
            if top.kind == "list" or self.indent_depth < MAX_INDENT_DEPTH:
                return self.push(top, _Frame("li", top.html))
            self.flush(top)
            return _A_BLOCK
        if tag in ("dt", "dd"):
            if top.kind == "dl":
                return self.push(top, _Frame(tag, top.html))
            self.flush(top)
            return _A_BLOCK
        if tag in _PRE_TAGS:
            if _is_inline_pre(el):  # trafilatura writes inline <code> as <pre> inside <p>
                self.reopen_paragraph(el, top)
                self.inline_code(el)
            else:
                self.code_block(el)
            return _A_SKIP
        if tag == "table":
            return self.start_table(el, top)
        if tag == "hr":
            self.block("<hr>" if top.html else "* * *")
            return _A_SKIP
        if tag == "img":
            self.image(el)
            return _A_SKIP
        if tag == "math":
            self.formula(*math.math_element_tex(el))
            return _A_SKIP
        if tag == "script":
            found = math.script_tex(el)
            if found:
                self.formula(*found)
            return _A_SKIP
        return _A_INLINE

    def push(self, top: _Frame, frame: _Frame) -> tuple:
        self.flush(top)
        self.frames.append(frame)
        return (_FRAME, None)

    def start_span(self, el: etree._Element, tag: str, top: _Frame) -> tuple:
        if top.html:
            return _A_INLINE
        if tag == "a":
            href = (el.get("href") or "").strip()
            if not self.links or self.linked or not href or href[0] == "#" or href.startswith("javascript:"):
                return _A_INLINE
            target = _absolute(self.url, href)
            self.linked += 1
            return (_SPAN, (top, top.gen, len(top.parts), "[", "](" + target + ")", "linked"))
        if not self.emphasis or top.kind == "heading":  # a heading is emphasis enough
            return _A_INLINE
        counter = "bold" if tag in ("b", "strong") else "italic"
        depth = getattr(self, counter)
        setattr(self, counter, depth + 1)
        marker = ("**" if counter == "bold" else "*") if depth == 0 else ""
        return (_SPAN, (top, top.gen, len(top.parts), marker, marker, counter))

    def start_table_part(self, el: etree._Element, tag: str, top: _Frame) -> tuple:
        if top.kind == "table":
            if tag == "tr":
                top.rows.append([])
            elif tag in ("td", "th"):
                return self.push(top, _Frame("cell"))
            elif tag == "caption":
                return self.push(top, _Frame("caption"))
            return _A_INLINE
        if top.kind == "htable":
            if tag == "tr":
                top.rows.append("<tr>")
                return (_CHUNK, (top, "</tr>\n"))
            if tag in ("td", "th", "caption"):
                attrs = "".join(
                    f' {name}="{_span_of(el, name)}"'
                    for name in ("colspan", "rowspan")
                    if _span_of(el, name) > 1
                )
                frame = _Frame("hcell", html=True)
                frame.rows = [f"<{tag}{attrs}>", f"</{tag}>"]
                return self.push(top, frame)
            return _A_INLINE
        self.flush(top)
        return _A_BLOCK

    def start_table(self, el: etree._Element, top: _Frame) -> tuple:
        self.table_depth += 1
        kind = "layout" if self.table_depth > MAX_TABLE_DEPTH else _classify_table(el)
        if kind == "layout":
            self.flush(top)
            return (_TABLE, None)
        frame = _Frame("htable" if kind == "html" or top.html else "table", html=kind == "html" or top.html)
        self.flush(top)
        self.frames.append(frame)
        return (_TABLE, frame)

    # -- end of an element --------------------------------------------------------------------------------

    def end(self, action: tuple) -> None:
        code, payload = action
        if code in (_INLINE, _SKIP):
            return
        if code == _BLOCK:
            frame = self.frames[-1]
            self.flush(frame)
            if payload is not None:
                self.closed_p = (payload, frame, len(frame.blocks))
        elif code == _SPAN:
            self.end_span(*payload)
        elif code == _CHUNK:
            payload[0].rows.append(payload[1])
        elif code == _TABLE:
            self.table_depth -= 1
            if payload is None:
                self.flush(self.frames[-1])
            else:
                self.end_frame()
        elif code == _FRAME:
            self.end_frame()

    def end_span(self, frame: _Frame, gen: int, index: int, opening: str, closing: str, counter: str) -> None:
        setattr(self, counter, getattr(self, counter) - 1)
        if not opening or frame is not self.frames[-1] or frame.gen != gen:
            return  # nested, or a block inside the span split it: keep the text unmarked
        inner = "".join(frame.parts[index:])
        core = inner.strip()
        if not core:
            return
        if "\n" in core:
            core = " ".join(core.split())
        if opening == "[" and "![" not in core:  # brackets of text, not of an image's markup
            core = core.replace("[", "\\[").replace("]", "\\]")
        lead = " " if inner[0] == " " else ""
        trail = " " if inner[-1] == " " else ""
        frame.parts[index:] = [lead + opening + core + closing + trail]

    def end_frame(self) -> None:
        frame = self.frames.pop()
        self.flush(frame)
        parent = self.frames[-1]
        kind = frame.kind
        blocks = frame.blocks
        if kind in ("quote", "list", "dl"):
            self.indent_depth -= 1
        if kind == "heading":
            text = " ".join(" ".join(blocks).split())
            if text:
                parent.blocks.append("#" * frame.number + " " + text)
        elif kind == "li":
            marker = "- "
            if parent.kind == "list" and parent.ordered:
                marker = f"{parent.number}. "
                parent.number += 1
            if blocks:
                parent.blocks.append(_indent_after_first(marker, _join_item(blocks), self.indent_depth))
        elif kind == "dd":
            if blocks:
                parent.blocks.append(_indent_after_first(": ", _join_item(blocks), self.indent_depth))
        elif kind in ("list", "dl", "dt"):
            body = "\n".join(blocks)
            if body and parent.kind == "list" and kind != "dt":  # <ul><li>a</li><ul>…</ul></ul>
                pad = " " * (len(f"{parent.number - 1}. ") if parent.ordered else 2)
                body = "\n".join(pad + line if line else line for line in body.split("\n"))
            if body:
                parent.blocks.append(body)
        elif kind == "quote":
            if blocks:
                lines = "\n\n".join(blocks).split("\n")
                parent.blocks.append("\n".join("> " + line if line else ">" for line in lines))
        elif kind == "cell":
            text = " ".join(" ".join(blocks).split()).replace("|", "\\|")
            if parent.kind == "table":
                if not parent.rows:
                    parent.rows.append([])
                parent.rows[-1].append(text)
            elif text:
                parent.blocks.append(text)
        elif kind == "hcell":
            cell = frame.rows[0] + "<br>".join(blocks) + frame.rows[1]
            if parent.kind == "htable":
                parent.rows.append(cell)
            else:
                parent.blocks.append(cell)
        elif kind == "table":
            parent.blocks.extend(blocks)
            table = _pipe_table(frame.rows)
            if table:
                parent.blocks.append(table)
        elif kind == "htable":
            if frame.rows:
                parent.blocks.append("<table>\n" + "".join(frame.rows).rstrip("\n") + "\n</table>")
        else:  # caption and anything else: its blocks as they are
            parent.blocks.extend(blocks)

    # -- leaves -------------------------------------------------------------------------------------------

    def code_block(self, el: etree._Element) -> None:
        language = _code_language(el)
        for _ in range(4):
            if not (len(el) == 1 and el[0].tag in ("pre", "code") and _blank(el.text) and _blank(el[0].tail)):
                break
            el = el[0]  # <pre>\n  <pre>code</pre>\n</pre>: the wrapper's layout whitespace is not code
        text = _verbatim_text(el).replace("\r\n", "\n").replace("\r", "\n")
        lines = [line.rstrip() for line in text.split("\n")]
        first = next((i for i, line in enumerate(lines) if line), len(lines))
        last = len(lines)
        while last > first and not lines[last - 1]:
            last -= 1
        lines = lines[first:last]
        if not lines:
            return
        code = "\n".join(lines)
        if len(lines) > 1 and [line.strip() for line in lines] == [str(i) for i in range(1, len(lines) + 1)]:
            return  # a line-number gutter rendered as its own <pre>
        fence = _fence(code, 3)
        self.block(fence + (language or _code_language(el)) + "\n" + code + "\n" + fence)

    def reopen_paragraph(self, pre: etree._Element, top: _Frame) -> None:
        """``<p>Use <pre>x</pre> here</p>``: the parser closed the <p> at the <pre>; continue it instead."""
        paragraph, frame, n_blocks = self.closed_p
        if (
            paragraph is not None
            and paragraph is pre.getprevious()
            and _blank(paragraph.tail)
            and frame is top
            and n_blocks == len(top.blocks) > 0
            and not top.parts
        ):
            top.parts.append(top.blocks.pop() + " ")
            top.space = True

    def inline_code(self, el: etree._Element) -> None:
        code = " ".join(_verbatim_text(el).split())
        if code:
            fence = _fence(code, 1)
            pad = " " if code[0] == "`" or code[-1] == "`" else ""
            self.inline(fence + pad + code + pad + fence)

    def formula(self, tex: str, display: bool) -> None:
        if not tex:
            return
        if display:
            self.block("$$\n" + tex.strip() + "\n$$")
        else:
            # A rendered formula is a box of its own: "$x$ and", never "$x$and" (MathJax v3 pages put
            # the text right after the container), and two formulas never make "$$".
            frame = self.frames[-1]
            if frame.parts and (frame.formula or frame.parts[-1][-1:].isalnum()):
                frame.parts.append(" ")
            self.inline("$" + " ".join(tex.split()) + "$")
            frame.formula = True

    def image(self, el: etree._Element) -> None:
        found = math.image_tex(el)
        if found:
            self.formula(*found)
            return
        if not self.images or self.frames[-1].html:
            return
        src = (el.get("src") or "").strip()
        if not src or src.startswith("data:"):
            src = (el.get("data-src") or el.get("data-original") or "").strip()
        if not src or src.startswith("data:"):
            return
        alt = " ".join((el.get("alt") or "").split()).replace("[", "(").replace("]", ")")
        self.inline("![" + alt + "](" + _absolute(self.url, src) + ")")


def _join_item(blocks: list[str]) -> str:
    """Blocks of one list item: a nested list stays tight, other blocks are separate paragraphs."""
    out = [blocks[0]]
    for block in blocks[1:]:
        out.append("\n" if _LIST_BLOCK_RE.match(block) else "\n\n")
        out.append(block)
    return "".join(out)


def _indent_after_first(marker: str, body: str, depth: int) -> str:
    if "\n" not in body:
        return marker + body
    pad = " " * len(marker) if depth < MAX_INDENT_DEPTH else ""
    first, *rest = body.split("\n")
    return marker + first + "".join("\n" + pad + line if line else "\n" for line in rest)


def _pipe_table(rows: list[list[str]]) -> str:
    rows = [row for row in rows if any(row)]
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    lines = []
    for i, row in enumerate(rows):
        lines.append("| " + " | ".join(row + [""] * (width - len(row))) + " |")
        if i == 0:
            lines.append("|" + " --- |" * width)
    return "\n".join(lines)


def _may_need_line_escape(text: str) -> bool:
    """Cheap gate for _LINE_START_RE, which costs a regex step per character."""
    if text[0] in _LINE_START_CHARS:
        return True
    return "\n" in text and any(line[:1] in _LINE_START_CHARS for line in text.split("\n"))


def _escape_line_start(match: re.Match) -> str:
    number = match.group("num")
    return number + "\\" if number else "\\"


def _escape_emphasis(text: str) -> str:
    if "*" in text:
        text = _STAR_PAIR_RE.sub(lambda m: m.group(0).replace("*", "\\*"), text)
    if "_" in text:
        text = _UNDERSCORE_PAIR_RE.sub(lambda m: m.group(0).replace("_", "\\_"), text)
    return text
