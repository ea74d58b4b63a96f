"""Records that flow through the extraction core.

A :class:`Page` goes in, :func:`dripper.simplify.simplify_page` turns it into a :class:`SimplifiedPage`
(the model's view and the aligned mapping view), a :class:`~dripper.labelers.base.BlockLabeler` turns
simplified pages into labels, and :func:`dripper.pipeline.extract_batch` turns labels into an
:class:`ExtractResult`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class Page:
    """One input page.

    Attributes:
        doc_id: Stable identifier, unique within a batch.
        html: Raw HTML, as ``str`` (already decoded) or ``bytes`` (decoded by the core with the declared or
            sniffed charset, see :mod:`dripper.decode`).
        url: The page's URL, if known.
        http_charset: Charset from the HTTP ``Content-Type`` header, if known (bytes input only).
        ground_truth: Reference main content (text or Markdown); only the ``oracle`` labeler reads it.
        metadata: Free-form fields carried through to the result untouched.
    """

    doc_id: str
    html: str | bytes
    url: str | None = None
    http_charset: str | None = None
    ground_truth: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Block:
    """One labelled unit (an ``_item_id``) of a page.

    Attributes:
        item_id: 1-based id, contiguous in document order, as the model sees it.
        tag: Tag of the block's element in the original DOM (``cc-alg-uc-text`` for runs of inline content).
        simplified_html: The block as the model sees it (attributes pruned, text cut, lists shortened).
        text: The block's full visible text from the mapping view (not truncated), whitespace collapsed
            ('' when simplified with ``SimplifyOptions(block_text=False)``).
    """

    item_id: int
    tag: str
    simplified_html: str
    text: str


@dataclass(slots=True)
class SimplifiedPage:
    """The two aligned views of one page.

    Attributes:
        doc_id: The page's id.
        simplified_html: The model input, identical to upstream ``mineru-html``'s ``simplify_html`` output.
        blocks: The blocks in id order (``blocks[i].item_id == i + 1``).
        url: The page's URL, if known.
        stats: Counters and timings of the simplification.
        mapping_html: The original DOM serialised as HTML, with ``_item_id`` on every block element (runs of
            inline content wrapped in ``<cc-alg-uc-text>``); labels are projected back onto it. Serialised
            on first use when the page was simplified in this process (see :meth:`mapping_markup`).
        mapping_tree: The same view as a parsed lxml tree, when at hand (not serialised, not compared).
        block_elements: Each block's element in ``mapping_tree`` (``None`` for a block without one), in
            block order, when the page was simplified in this process (not serialised, not compared): the
            CPU labeler's features start from them instead of searching the tree for the ids again.
    """

    doc_id: str
    simplified_html: str
    blocks: list[Block]
    url: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    mapping_html: str | None = None
    mapping_tree: Any = field(default=None, repr=False, compare=False)
    block_elements: list | None = field(default=None, repr=False, compare=False)

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    def mapping_markup(self) -> str:
        """The mapping view as HTML text (serialising the tree once if needed)."""
        if self.mapping_html is None:
            from lxml import etree

            self.mapping_html = etree.tostring(self.mapping_tree, method="html", encoding="unicode")
        return self.mapping_html

    def mapping_root(self) -> Any:
        """The mapping view as an lxml tree (parsing the HTML once if needed). Callers must not mutate it."""
        if self.mapping_tree is None:
            from lxml import etree

            self.mapping_tree = etree.fromstring(self.mapping_html, etree.HTMLParser(huge_tree=True))
        return self.mapping_tree


@dataclass(slots=True)
class ExtractResult:
    """The result for one page (one row of ``extracted/``).

    Attributes:
        doc_id: The page's id.
        url: The page's URL, if known.
        markdown: The main content as Markdown (empty when nothing was extracted).
        main_html: The main content as HTML, a subset of the original DOM (or the fallback's HTML).
        labels: One boolean per block (``True`` = main), or ``None`` when no labels were produced.
        extractor: What produced the output: ``dripper:<labeler>``, ``trafilatura`` (fallback or chosen),
            or ``none`` when the page could not be processed at all.
        fallback_reason: Why the fallback ran (or why the page is empty), ``None`` on the normal path.
        stats: ``n_blocks``, ``n_main``, timings in seconds per step, input size.
    """

    doc_id: str
    url: str | None
    markdown: str
    main_html: str
    labels: list[bool] | None
    extractor: str
    fallback_reason: str | None
    stats: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
