"""The extraction pipeline: pages → decode → simplify → label → main HTML → Markdown, with fallback.

:func:`extract` handles one page, :func:`extract_batch` a list, :func:`iter_extract` a stream (in batches,
as a GPU labeler wants them). Every input page ends as exactly one :class:`ExtractResult`: bad input gets
a result with its reason, labelling failures go to the fallback with theirs; nothing raises per page.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from dripper_core.decode import decode_html
from dripper_core.fallback import Fallback, build_fallback
from dripper_core.labelers.base import BlockLabeler, LabelRequest, build_labeler
from dripper_core.markdown import MarkdownOptions, html_to_markdown
from dripper_core.reconstruct import main_tree
from dripper_core.simplify import SimplifyOptions, simplify_html
from dripper_core.types import ExtractResult, Page, SimplifiedPage

DEFAULT_LABELER = "trafilatura"
_TAG_START = re.compile(r"<[A-Za-z!/?]")
_BINARY_CHARS = re.compile(r"[\x00-\x08\x0e-\x1f]")


@dataclass(frozen=True)
class ExtractOptions:
    """Options of the pipeline, validated once.

    Attributes:
        fallback: Fallback name (``trafilatura``, ``empty``) or ``None`` for no fallback content.
        fallback_on_empty: Also use the fallback when the labeler marks no block as main (off by default:
            an all-"other" answer is a valid answer, as in the paper).
        max_page_bytes: Pages larger than this (UTF-8 bytes) are not processed; the result says so.
        batch_size: Pages per labeler call in :func:`iter_extract`.
        simplify: Simplification options.
        markdown: Markdown conversion options.
    """

    fallback: str | None = "trafilatura"
    fallback_on_empty: bool = False
    max_page_bytes: int = 20_000_000
    batch_size: int = 64
    simplify: SimplifyOptions = field(default_factory=SimplifyOptions)
    markdown: MarkdownOptions = field(default_factory=MarkdownOptions)

    def __post_init__(self) -> None:
        if self.max_page_bytes < 1:
            raise ValueError(f"max_page_bytes must be positive, got {self.max_page_bytes}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")


@dataclass
class _Work:
    """One page on its way through a batch."""

    page: Page
    started: float
    text: str = ""
    simplified: SimplifiedPage | None = None
    result: ExtractResult | None = None
    needs_fallback: str | None = None
    stats: dict = field(default_factory=dict)


class Extractor:
    """A configured pipeline: a labeler, a fallback and options, reusable across batches."""

    def __init__(self, labeler: str | BlockLabeler = DEFAULT_LABELER, options: ExtractOptions | None = None):
        self.options = options or ExtractOptions()
        self.labeler = build_labeler(labeler) if isinstance(labeler, str) else labeler
        self.fallback: Fallback | None = (
            build_fallback(self.options.fallback) if self.options.fallback else None
        )
        self.extractor_name = f"dripper:{self.labeler.name}"

    def extract_batch(self, pages: Sequence[Page]) -> list[ExtractResult]:
        """One result per page, in order."""
        work = [self._prepare(page) for page in pages]
        labelled = [item for item in work if item.result is None and item.needs_fallback is None]
        if labelled:
            started = time.perf_counter()
            answers = self.labeler([LabelRequest(item.page, item.simplified) for item in labelled])
            share = (time.perf_counter() - started) / len(labelled)
            for item, answer in zip(labelled, answers, strict=True):
                item.stats["label_seconds"] = share
                if answer.main is None:
                    item.needs_fallback = f"label_failed: {answer.failure}"
                else:
                    self._build_output(item, answer.main, answer.confidence)
        for item in work:
            if item.result is None:
                self._run_fallback(item)
        return [item.result for item in work]

    def iter_extract(self, pages: Iterable[Page]) -> Iterator[ExtractResult]:
        """Stream results, labelling ``options.batch_size`` pages at a time."""
        batch: list[Page] = []
        for page in pages:
            batch.append(page)
            if len(batch) >= self.options.batch_size:
                yield from self.extract_batch(batch)
                batch = []
        if batch:
            yield from self.extract_batch(batch)

    def close(self) -> None:
        self.labeler.close()

    # -- steps ---------------------------------------------------------------------------------------

    def _prepare(self, page: Page) -> _Work:
        item = _Work(page=page, started=time.perf_counter())
        if page.metadata.get("input_error"):
            self._finish(item, "", "", None, "none", f"invalid_input: {page.metadata['input_error']}")
            return item
        html = page.html
        if isinstance(html, bytes | bytearray | memoryview):
            size = len(html)
        elif isinstance(html, str):
            size = len(html.encode("utf-8", "surrogatepass"))
        else:
            self._finish(item, "", "", None, "none", f"invalid_input: html is {type(html).__name__}")
            return item
        item.stats["input_bytes"] = size
        if size > self.options.max_page_bytes:
            reason = f"too_large: {size} bytes > max_page_bytes={self.options.max_page_bytes}"
            self._finish(item, "", "", None, "none", reason)
            return item
        if isinstance(html, str):
            item.text = html
        else:
            decoded = decode_html(bytes(html), page.http_charset)
            item.text = decoded.text
            item.stats["encoding"] = decoded.encoding
        problem = _input_problem(item.text)
        if problem:
            self._finish(item, "", "", None, "none", problem)
            return item
        started = time.perf_counter()
        try:
            item.simplified = simplify_html(item.text, page.doc_id, page.url, self.options.simplify)
        except RecursionError:
            item.needs_fallback = "simplify_failed: nesting too deep"
        except Exception as error:  # a page the simplifier cannot take goes to the fallback, not the batch
            item.needs_fallback = f"simplify_failed: {type(error).__name__}: {error}"[:300]
        item.stats["simplify_seconds"] = time.perf_counter() - started
        if item.simplified is not None:
            item.stats["n_blocks"] = item.simplified.n_blocks
            if item.simplified.n_blocks == 0:
                item.needs_fallback = "no_blocks"
        return item

    def _build_output(self, item: _Work, labels: list[bool], confidence: list[float] | None) -> None:
        started = time.perf_counter()
        try:
            tree = main_tree(item.simplified, labels)
        except Exception as error:
            item.needs_fallback = f"reconstruct_failed: {type(error).__name__}: {error}"[:300]
            return
        item.stats["n_main"] = sum(labels)
        if confidence is not None:
            item.stats["confidence"] = confidence
        if tree is None and self.options.fallback_on_empty:
            item.needs_fallback = "no_main_blocks"
            return
        html, markdown = self._render(tree)
        item.stats["render_seconds"] = time.perf_counter() - started
        self._finish(item, markdown, html, labels, self.extractor_name, None)

    def _render(self, tree) -> tuple[str, str]:
        if tree is None:
            return "", ""
        from lxml import etree

        html = etree.tostring(tree, method="html", encoding="unicode")
        return html, html_to_markdown(tree, url=None, options=self.options.markdown)

    def _run_fallback(self, item: _Work) -> None:
        reason = item.needs_fallback or "unknown"
        if self.fallback is None:
            self._finish(item, "", "", None, "none", reason)
            return
        started = time.perf_counter()
        try:
            html = self.fallback.main_html(item.text, item.page.url)
            markdown = (
                html_to_markdown(html, url=item.page.url, options=self.options.markdown) if html else ""
            )
        except Exception as error:
            html, markdown = "", ""
            reason = f"{reason}; fallback_failed: {type(error).__name__}: {error}"[:300]
        item.stats["fallback_seconds"] = time.perf_counter() - started
        self._finish(item, markdown, html, None, self.fallback.name, reason)

    def _finish(self, item, markdown, html, labels, extractor, reason) -> None:
        item.stats["seconds"] = time.perf_counter() - item.started
        item.result = ExtractResult(
            doc_id=item.page.doc_id,
            url=item.page.url,
            markdown=markdown,
            main_html=html,
            labels=labels,
            extractor=extractor,
            fallback_reason=reason,
            stats=item.stats,
        )


def _input_problem(text: str) -> str | None:
    """Why ``text`` cannot be an HTML page, or ``None``."""
    if not text.strip():
        return "empty_input"
    head = text[:65536]
    if len(_BINARY_CHARS.findall(head)) > max(8, len(head) // 200):
        return "not_html: binary content"
    if not _TAG_START.search(head):
        return "not_html: no markup"
    return None


def extract_batch(
    pages: Sequence[Page],
    labeler: str | BlockLabeler = DEFAULT_LABELER,
    fallback: str | None = "trafilatura",
    options: ExtractOptions | None = None,
) -> list[ExtractResult]:
    """Extract the main content of many pages; one :class:`ExtractResult` per page, in order.

    Args:
        pages: The pages.
        labeler: A labeler name (see :func:`dripper_core.labelers.available_labelers`) or instance.
        fallback: Fallback name, or ``None`` for none; overrides ``options.fallback``.
        options: Pipeline options.
    """
    options = options or ExtractOptions()
    if fallback != options.fallback:
        options = _replace(options, fallback=fallback)
    return Extractor(labeler, options).extract_batch(pages)


def extract(
    html: str | bytes,
    url: str | None = None,
    labeler: str | BlockLabeler = DEFAULT_LABELER,
    fallback: str | None = "trafilatura",
    options: ExtractOptions | None = None,
    ground_truth: str | None = None,
) -> ExtractResult:
    """Extract the main content of one page (``html`` as text, or bytes to be decoded)."""
    page = Page(doc_id="page", html=html, url=url, ground_truth=ground_truth)
    return extract_batch([page], labeler, fallback, options)[0]


def _replace(options: ExtractOptions, **changes) -> ExtractOptions:
    from dataclasses import replace

    return replace(options, **changes)
