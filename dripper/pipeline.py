"""The extraction pipeline: pages → decode → simplify → label → main HTML → Markdown, with fallback.

:func:`extract` handles one page, :func:`extract_batch` a list, :func:`iter_extract` a stream (in batches,
as a GPU labeler wants them). Every input page ends as exactly one :class:`ExtractResult`: bad input gets
a result with its reason, labelling failures go to the fallback with theirs; nothing raises per page.

The data plane splits the work: :func:`prepare_page` (decode, check, simplify: CPU) runs in the simplify
stage, and :meth:`Extractor.extract_simplified` (label, reconstruct, convert, fall back) in the extract stage,
with the same results as :meth:`Extractor.extract_batch` on the same pages.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dripper.config.extract import ExtractStageConfig
from dripper.config.extractor import DEFAULT_FALLBACK
from dripper.config.simplify import SimplifyStageConfig
from dripper.decode import decode_html
from dripper.fallback import Fallback, build_fallback
from dripper.labelers.base import DEFAULT_LABELER, BlockLabeler, LabelRequest, Labels, build_labeler
from dripper.labelers.whole_page import PageExtractor
from dripper.markdown import MarkdownOptions, html_to_markdown
from dripper.prompt import prompt_tokens_estimate
from dripper.reconstruct import main_tree
from dripper.routing import RouteCounts, RoutePolicy, route_score, select_routed
from dripper.simplify import SimplifyOptions, simplify_html
from dripper.types import ExtractResult, Page, SimplifiedPage

_TAG_START = re.compile(r"<[A-Za-z!/?]")
_BINARY_CHARS = re.compile(r"[\x00-\x08\x0e-\x1f]")
#: Reasons (prefixes) :func:`prepare_page` gives to input that is no page at all: such a page ends as
#: ``extractor="none"``, not in the fallback (which could not do better with it).
INPUT_PROBLEMS = ("empty_input", "not_html", "too_large", "invalid_input")
#: ``extract(fallback=…)`` left out: the options' fallback (``ExtractOptions().fallback`` unless given).
OPTIONS_FALLBACK = "options"


@dataclass(frozen=True)
class ExtractOptions:
    """Options of the pipeline, validated once.

    Attributes:
        fallback: Fallback name (``trafilatura``, ``trafilatura_fast``, ``empty``) or ``None`` for no fallback
            content.
        fallback_on_empty: Also use the fallback when the labeler marks no block as main (off by default:
            an all-"other" answer is a valid answer, as in the paper).
        max_page_bytes: Pages larger than this (UTF-8 bytes) are not processed; the result says so.
        batch_size: Pages per labeler call in :func:`iter_extract`.
        simplify: Simplification options.
        markdown: Markdown conversion options.
    """

    fallback: str | None = DEFAULT_FALLBACK
    fallback_on_empty: bool = False
    max_page_bytes: int = SimplifyStageConfig.default("max_page_bytes")
    batch_size: int = ExtractStageConfig.default("batch_size")
    simplify: SimplifyOptions = field(default_factory=SimplifyOptions)
    markdown: MarkdownOptions = field(default_factory=MarkdownOptions)

    def __post_init__(self) -> None:
        if self.max_page_bytes < 1:
            raise ValueError(f"max_page_bytes must be positive, got {self.max_page_bytes}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")


@dataclass
class PreparedPage:
    """A page decoded, checked and simplified (:func:`prepare_page`), ready for labelling.

    Attributes:
        text: The decoded HTML (what the fallback reads).
        simplified: The simplified page, or ``None`` when the page could not be simplified.
        problem: Why the page cannot be labelled, or ``None``: an input problem (see
            :data:`INPUT_PROBLEMS`), ``simplify_failed: …`` or ``no_blocks`` (``simplified`` kept).
        stats: ``input_bytes``, ``encoding``, ``simplify_seconds``, ``n_blocks`` as far as they got.
    """

    text: str
    simplified: SimplifiedPage | None
    problem: str | None
    stats: dict = field(default_factory=dict)

    @property
    def invalid(self) -> bool:
        """Whether :attr:`problem` is an input problem (no fallback: the result says ``none``)."""
        return is_input_problem(self.problem)


def is_input_problem(problem: str | None) -> bool:
    """Whether a :attr:`PreparedPage.problem` says the input is no page (see :data:`INPUT_PROBLEMS`)."""
    return bool(problem) and problem.split(":", 1)[0] in INPUT_PROBLEMS


def prepare_page(page: Page, options: ExtractOptions | None = None) -> PreparedPage:
    """Decode, check and simplify one page, as :meth:`Extractor.extract_batch` does before labelling.

    Never raises for a bad page: the reason is in :attr:`PreparedPage.problem`.
    """
    options = options or ExtractOptions()
    prepared = _decoded_page(page, options)
    if prepared.problem is not None:
        return prepared
    text, stats = prepared.text, prepared.stats
    problem = None
    simplified = None
    started = time.perf_counter()
    try:
        simplified = simplify_html(text, page.doc_id, page.url, options.simplify)
    except RecursionError:
        problem = "simplify_failed: nesting too deep"
    except Exception as error:  # a page the simplifier cannot take goes to the fallback, not the batch
        problem = f"simplify_failed: {type(error).__name__}: {error}"[:300]
    stats["simplify_seconds"] = time.perf_counter() - started
    if simplified is not None:
        stats["n_blocks"] = simplified.n_blocks
        if simplified.n_blocks == 0:
            problem = "no_blocks"
    return PreparedPage(text, simplified, problem, stats)


def _decoded_page(
    page: Page, options: ExtractOptions, decode: Callable[[bytes, str | None], str] | None = None
) -> PreparedPage:
    """Check and decode one page (no simplification): ``problem`` is an input problem or ``None``.

    ``decode`` turns bytes into text (a whole-page extractor decodes as its anchor did); by default
    :func:`dripper.decode.decode_html`.
    """
    stats: dict = {}
    if page.metadata.get("input_error"):
        return PreparedPage("", None, f"invalid_input: {page.metadata['input_error']}", stats)
    html = page.html
    if isinstance(html, bytes | bytearray | memoryview):
        size = len(html)
    elif isinstance(html, str):
        size = len(html.encode("utf-8", "surrogatepass"))
    else:
        return PreparedPage("", None, f"invalid_input: html is {type(html).__name__}", stats)
    stats["input_bytes"] = size
    if size > options.max_page_bytes:
        return PreparedPage(
            "", None, f"too_large: {size} bytes > max_page_bytes={options.max_page_bytes}", stats
        )
    if isinstance(html, str):
        text = html
    elif decode is not None:
        try:
            text = decode(bytes(html), page.http_charset)
        except ValueError as error:
            return PreparedPage("", None, f"invalid_input: {error}"[:300], stats)
    else:
        decoded = decode_html(bytes(html), page.http_charset)
        text = decoded.text
        stats["encoding"] = decoded.encoding
    problem = _input_problem(text)
    if problem:
        return PreparedPage("", None, problem, stats)
    return PreparedPage(text, None, None, stats)


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


@dataclass
class Route:
    """A cascade's second step: the labeler the least sure pages go to, and the rule that picks them.

    ``labeler=None`` scores the pages and routes none: the extract stage's first step, whose shards record
    each page's routing score for the step that routes them (:mod:`dripper.stages.cascade`).
    """

    labeler: BlockLabeler | None
    policy: RoutePolicy | None = None


class Extractor:
    """A configured pipeline: a labeler, a fallback and options, reusable across batches.

    With ``route`` it is a cascade: ``labeler`` labels every page, the pages it is least sure of (see
    :mod:`dripper.routing`) are labelled again by ``route.labeler``, and each result's ``extractor``
    names the labeler whose labels it holds. A routed page the second labeler fails on keeps the first
    labeler's labels; the fallback runs only for pages left without labels by both. ``route_counts`` holds
    what was routed so far (``stats["route"]``, ``stats["routed"]`` and ``stats["prompt_tokens_estimate"]``
    on each scored page).

    With a whole-page extractor (:class:`~dripper.labelers.whole_page.PageExtractor`: ``fineweb``,
    ``dclm``) in place of a labeler, pages are neither simplified nor labelled: the extractor's text is the
    result's ``markdown`` (``main_html`` empty, ``labels`` ``None``, ``extractor`` its name). Input problems
    still end as ``none``; a page the extractor fails on (an error, its timeout) goes to the fallback, or
    ends empty with its reason.
    """

    def __init__(
        self,
        labeler: str | BlockLabeler | PageExtractor = DEFAULT_LABELER,
        options: ExtractOptions | None = None,
        route: Route | None = None,
    ):
        self.options = options or ExtractOptions()
        self.labeler = build_labeler(labeler) if isinstance(labeler, str) else labeler
        self.fallback: Fallback | None = (
            build_fallback(self.options.fallback) if self.options.fallback else None
        )
        self.page_extractor = self.labeler if isinstance(self.labeler, PageExtractor) else None
        if self.page_extractor is not None and route is not None:
            raise ValueError(
                f"{self.labeler.name} is a whole-page extractor: it labels no blocks, so it cannot be the "
                "first step of a cascade (route)"
            )
        self.extractor_name = (
            self.labeler.name if self.page_extractor is not None else f"dripper:{self.labeler.name}"
        )
        self.route = route
        self.route_counts = RouteCounts()
        # A labeler that reads block text needs it extracted at simplification (either step of a cascade).
        needs_text = self.labeler.needs_block_text or bool(
            route and route.labeler and route.labeler.needs_block_text
        )
        self._simplify_options = replace(self.options.simplify, block_text=needs_text)

    @classmethod
    def from_spec(cls, spec: Any, options: ExtractOptions | None = None) -> Extractor:
        """The pipeline of an extractor spec (:class:`~dripper.config.extractor.ExtractorSpec`, a dict
        or its text form): its labeler, its fallback settings over ``options``, and its route."""
        from dripper.config.extractor import parse_extractor

        spec = parse_extractor(spec)
        options = replace(
            options or ExtractOptions(), fallback=spec.fallback, fallback_on_empty=spec.fallback_on_empty
        )
        route = None
        if spec.route is not None:
            route = Route(
                build_labeler(spec.route.labeler, **spec.route.options),
                RoutePolicy(share=spec.route.share, below=spec.route.below),
            )
        return cls(build_labeler(spec.labeler, **spec.options), options, route)

    def extract_batch(self, pages: Sequence[Page]) -> list[ExtractResult]:
        """One result per page, in order."""
        if self.page_extractor is not None:
            return self._extract_whole([self._whole_page(page) for page in pages])
        return self._label_and_finish([self._prepare(page) for page in pages])

    def extract_simplified(
        self, items: Sequence[tuple[Page, SimplifiedPage | None, str | None]]
    ) -> list[ExtractResult]:
        """Like :meth:`extract_batch` for pages simplified elsewhere (the simplify stage's shards).

        Each item is ``(page, simplified, problem)``, as :func:`prepare_page` left it, with ``page.html``
        the decoded text (the fallback reads it):

        - ``(page, simplified, None)``: labelled (a page with no blocks goes to the fallback, ``no_blocks``);
        - ``(page, simplified_or_None, problem)``: not labelled; an input problem (:data:`INPUT_PROBLEMS`)
          ends as ``extractor="none"``, any other problem (``simplify_failed: …``) goes to the fallback
          with ``problem`` as its reason;
        - ``(page, None, None)``: simplified here first, as :meth:`extract_batch` does.

        One result per item, in order; the same results as :meth:`extract_batch` on the same pages. A
        whole-page extractor reads ``page.html`` whatever the simplification gave (only an input problem
        stops it).
        """
        if self.page_extractor is not None:
            work = []
            for page, _, problem in items:
                if is_input_problem(problem):
                    prepared = PreparedPage("", None, problem)
                    work.append(self._work_from(page, prepared, time.perf_counter()))
                else:
                    work.append(self._whole_page(page))
            return self._extract_whole(work)
        work = []
        for page, simplified, problem in items:
            if simplified is None and problem is None:
                work.append(self._prepare(page))
                continue
            text = page.html if isinstance(page.html, str) else decode_html(page.html, page.http_charset).text
            prepared = PreparedPage(text, simplified, problem)
            if simplified is not None:
                prepared.stats["n_blocks"] = simplified.n_blocks
                if problem is None and simplified.n_blocks == 0:
                    prepared.problem = "no_blocks"
            work.append(self._work_from(page, prepared, time.perf_counter()))
        return self._label_and_finish(work)

    def _label_and_finish(self, work: list[_Work]) -> list[ExtractResult]:
        labelled = [item for item in work if item.result is None and item.needs_fallback is None]
        if labelled:
            answers = self._label(self.labeler, labelled, "label_seconds")
            for item, answer in zip(labelled, answers, strict=True):
                if answer.page_confidence is not None:
                    item.stats["page_confidence"] = answer.page_confidence
            if self.route is None:
                for item, answer in zip(labelled, answers, strict=True):
                    self._accept(item, answer, self.extractor_name)
            else:
                self._cascade(labelled, answers)
        for item in work:
            if item.result is None:
                self._run_fallback(item)
        return [item.result for item in work]

    def _label(self, labeler: BlockLabeler, items: list[_Work], timing: str) -> list[Labels]:
        started = time.perf_counter()
        answers = labeler([LabelRequest(item.page, item.simplified, item.text) for item in items])
        share = (time.perf_counter() - started) / len(items)
        for item in items:
            item.stats[timing] = share
        return answers

    def _accept(self, item: _Work, answer: Labels, extractor: str) -> None:
        if answer.main is None:
            item.needs_fallback = f"label_failed: {answer.failure}"
        else:
            self._build_output(item, answer.main, answer.confidence, extractor)

    def _cascade(self, items: list[_Work], answers: list[Labels]) -> None:
        """Route the least sure of ``items`` to the second labeler; keep the first labels on the others."""
        keys = [(answer.main is None, route_score(answer)) for answer in answers]
        counts = self.route_counts
        chosen = set()
        if self.route.labeler is not None:
            chosen = set(select_routed(keys, self.route.policy, counts.pages, counts.routed))
        routed = []
        for index, (item, answer, (declined, score)) in enumerate(zip(items, answers, keys, strict=True)):
            tokens = prompt_tokens_estimate(item.simplified.simplified_html)
            item.stats.update(route=score, declined=declined, prompt_tokens_estimate=tokens)
            if self.route.labeler is not None:
                item.stats["routed"] = index in chosen
            counts.pages += 1
            counts.prompt_tokens += tokens
            counts.declined += declined
            if index in chosen:
                counts.routed += 1
                counts.routed_prompt_tokens += tokens
                routed.append((item, answer))
            else:
                self._accept(item, answer, self.extractor_name)
        if not routed:
            return
        second = self._label(self.route.labeler, [item for item, _ in routed], "route_label_seconds")
        name = f"dripper:{self.route.labeler.name}"
        for (item, first), answer in zip(routed, second, strict=True):
            if answer.main is None:
                # The LM could not take it: the first labeler's labels (or, declined, the fallback) stand.
                counts.route_failed += 1
                item.stats["route_failure"] = answer.failure
                self._accept(item, first, self.extractor_name)
            else:
                self._build_output(item, answer.main, answer.confidence, name)

    def route_summary(self) -> dict[str, Any] | None:
        """What the cascade routed (``None`` without a route): pages and prompt tokens, and the second
        labeler's own prompt-token count where it keeps one (LM labelers)."""
        if self.route is None or self.route.labeler is None:
            return None
        summary: dict[str, Any] = {"labeler": self.route.labeler.name, **self.route_counts.as_dict()}
        tokens = prompt_tokens_used(self.route.labeler)
        if tokens is not None:
            summary["lm_prompt_tokens"] = tokens
        return summary

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
        if self.route is not None and self.route.labeler is not None:
            self.route.labeler.close()

    # -- steps ---------------------------------------------------------------------------------------

    def _whole_page(self, page: Page) -> _Work:
        started = time.perf_counter()
        prepared = _decoded_page(page, self.options, self.page_extractor.decode)
        return self._work_from(page, prepared, started)

    def _extract_whole(self, work: list[_Work]) -> list[ExtractResult]:
        """A whole-page extractor's text for every item not already finished (input problems)."""
        for item in work:
            if item.result is not None:
                continue
            started = time.perf_counter()
            try:
                text = self.page_extractor.extract(item.text, item.page.url)
            except Exception as error:  # one page's failure (its timeout included) is that page's result
                item.stats["extract_seconds"] = time.perf_counter() - started
                item.needs_fallback = f"extract_failed: {type(error).__name__}: {error}"[:300]
                self._run_fallback(item)
                continue
            item.stats["extract_seconds"] = time.perf_counter() - started
            self._finish(item, text, "", None, self.extractor_name, None)
        return [item.result for item in work]

    def _prepare(self, page: Page) -> _Work:
        started = time.perf_counter()
        return self._work_from(page, prepare_page(page, self.options), started)

    def _work_from(self, page: Page, prepared: PreparedPage, started: float) -> _Work:
        item = _Work(page=page, started=started, text=prepared.text, simplified=prepared.simplified)
        item.stats.update(prepared.stats)
        if prepared.invalid:
            self._finish(item, "", "", None, "none", prepared.problem)
        elif prepared.problem is not None:
            item.needs_fallback = prepared.problem
        return item

    def _build_output(
        self, item: _Work, labels: list[bool], confidence: list[float] | None, extractor: str
    ) -> None:
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
        self._finish(item, markdown, html, labels, extractor, None)

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


def prompt_tokens_used(labeler: BlockLabeler) -> int | None:
    """The prompt tokens an LM labeler has sent so far (its call planner's count), ``None`` for a labeler
    that keeps no such count."""
    planner = getattr(labeler, "planner", None)
    return getattr(getattr(planner, "stats", None), "prompt_tokens", None)


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
    fallback: str | None = OPTIONS_FALLBACK,
    options: ExtractOptions | None = None,
) -> list[ExtractResult]:
    """Extract the main content of many pages; one :class:`ExtractResult` per page, in order.

    Args:
        pages: The pages.
        labeler: A labeler name (see :func:`dripper.labelers.available_labelers`) or instance.
        fallback: Fallback name, or ``None`` for none; given, it overrides ``options.fallback`` (by default
            the options' fallback is used).
        options: Pipeline options.
    """
    options = options or ExtractOptions()
    if fallback != OPTIONS_FALLBACK and fallback != options.fallback:
        options = replace(options, fallback=fallback)
    return Extractor(labeler, options).extract_batch(pages)


def extract(
    html: str | bytes,
    url: str | None = None,
    labeler: str | BlockLabeler = DEFAULT_LABELER,
    fallback: str | None = OPTIONS_FALLBACK,
    options: ExtractOptions | None = None,
    ground_truth: str | None = None,
) -> ExtractResult:
    """Extract the main content of one page (``html`` as text, or bytes to be decoded)."""
    page = Page(doc_id="page", html=html, url=url, ground_truth=ground_truth)
    return extract_batch([page], labeler, fallback, options)[0]
