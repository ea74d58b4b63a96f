"""Extractors under evaluation, registered by name: heuristic baselines and this project's pipeline.

A baseline subclasses :class:`Extractor` and implements ``extract(html, url) -> str`` (Markdown or text);
the base class owns timing and error capture, so one failing page yields ``''`` (F1 0) and an error count
instead of a crashed run. Build one with :func:`get_extractor` from a name such as ``"trafilatura"`` or
``"dripper:oracle"``; the part after the colon is the extractor's argument.

The settings below reproduce the baseline figures of the development sets' README (not distributed) on
``dev.jsonl.gz`` (152 full-text pages, 200 snippet pages) within ±0.005; each class notes what matched.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dripper.config.labelers import PAGE_EXTRACTORS
from dripper.hints import did_you_mean

if TYPE_CHECKING:
    from dripper.eval.datasets import BenchPage

_EXTRACTORS: dict[str, type[Extractor]] = {}


def register_extractor(name: str) -> Callable[[type[Extractor]], type[Extractor]]:
    """Class decorator: make an :class:`Extractor` subclass available as ``name``."""

    def decorator(cls: type[Extractor]) -> type[Extractor]:
        if name in _EXTRACTORS and _EXTRACTORS[name] is not cls:
            raise ValueError(f"extractor {name!r} is already registered by {_EXTRACTORS[name].__qualname__}")
        cls.registry_name = name
        _EXTRACTORS[name] = cls
        return cls

    return decorator


def available_extractors() -> list[str]:
    """The registered extractor names, sorted."""
    return sorted(_EXTRACTORS)


def get_extractor(spec: Any, **options: Any) -> Extractor:
    """Build an extractor from its name, optionally followed by ``:argument`` (e.g. ``dripper:oracle/md``),
    or from an extractor spec (:class:`dripper.config.extractor.ExtractorSpec`: our pipeline with that
    labeler, its options and fallback, rows ``dripper:{spec.name}/md`` and ``/html2text``).

    Args:
        spec: A registered name, ``family:argument`` for extractors that take one, or an extractor spec.
        **options: Keyword options for the extractor's constructor.

    Raises:
        KeyError: For an unknown name, suggesting the closest registered ones.
        ValueError: When the extractor rejects its argument.
    """
    if not isinstance(spec, str):
        return PipelineUnderTest(spec=spec, **options)
    family, sep, argument = spec.partition(":")
    cls = _EXTRACTORS.get(family)
    if cls is None:
        names = available_extractors()
        hint = did_you_mean(family, names, cutoff=0.5)
        raise KeyError(f"unknown extractor {spec!r}{hint} (available: {', '.join(names)})")
    return cls(argument if sep else None, **options)


@dataclass(slots=True)
class ExtractionOutcome:
    """What one extractor produced for one page.

    Attributes:
        outputs: Row name → extracted Markdown/text ('' on error). Most extractors have one row, named like
            the extractor; ``dripper:<labeler>`` has one per view (``/md``, ``/html2text``).
        seconds: Extraction time attributed to this page (a batch's time is split evenly).
        error: ``"ExceptionType: message"`` when extraction failed, else ``None``.
        info: Extractor-specific details worth keeping per page (``dripper:*``: which extractor produced the
            output and the fallback reason).
    """

    outputs: dict[str, str]
    seconds: float
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


class Extractor(ABC):
    """Base class: subclasses implement :meth:`extract`; batch extractors override :meth:`extract_pages`.

    Attributes:
        registry_name: Set by :func:`register_extractor`.
    """

    registry_name: str = ""

    def __init__(self, argument: str | None = None) -> None:
        if argument is not None:
            raise ValueError(f"extractor {self.registry_name!r} takes no ':argument' (got {argument!r})")
        self.name = self.registry_name

    @abstractmethod
    def extract(self, html: str, url: str | None) -> str:
        """Return the main content of ``html`` as Markdown or plain text ('' when there is none)."""

    def output_names(self) -> tuple[str, ...]:
        """The result rows this extractor produces (one per output view)."""
        return (self.name,)

    def extract_pages(self, pages: Sequence[BenchPage]) -> list[ExtractionOutcome]:
        """Extract every page, timing each call and turning exceptions into empty outputs."""
        outcomes = []
        for page in pages:
            start = time.perf_counter()
            try:
                text, error = self.extract(page.html, page.url) or "", None
            except Exception as exc:  # any extractor bug must cost one page, not the run
                text, error = "", _describe(exc)
            outcomes.append(ExtractionOutcome({self.name: text}, time.perf_counter() - start, error))
        return outcomes

    def close(self) -> None:  # noqa: B027 - optional: extractors holding an engine release it here
        """Release what the extractor holds (an LM engine's processes, GPU memory)."""


def html_to_markdown(html: str, url: str | None = None) -> str:
    """Convert (main-content) HTML to Markdown the way WebMainBench scores HTML extractors.

    ``HTML2Text(bodywidth=0)`` with links and images ignored (docs/upstream.md#the-rouge-metric): the
    whitespace layout of this conversion is part of the ROUGE-5 score, so every HTML-producing extractor
    must go through it.
    """
    import html2text

    converter = html2text.HTML2Text(baseurl=url or "", bodywidth=0)
    converter.ignore_links = True
    converter.ignore_images = True
    return converter.handle(html)


@register_extractor("trafilatura")
class TrafilaturaExtractor(Extractor):
    """``trafilatura.extract`` as Markdown, tables on, comments off.

    Matched README on dev: 0.879 raw / 0.939 normalised / snippet 0.921, with ``url`` passed and all other
    options at trafilatura 2.3.1 defaults (no precision/recall bias, formatting implied by Markdown).
    """

    def __init__(self, argument: str | None = None) -> None:
        super().__init__(argument)
        # Imported when built, not per call, so the first page's timing does not include the import.
        from trafilatura import extract

        self._extract = extract

    def extract(self, html: str, url: str | None) -> str:
        return (
            self._extract(
                html, url=url, output_format="markdown", include_tables=True, include_comments=False
            )
            or ""
        )


@register_extractor("resiliparse")
class ResiliparseExtractor(Extractor):
    """Resiliparse ``extract_plain_text(main_content=True)``.

    Uses WebMainBench's wrapper settings (alt texts, list bullets, preserved formatting, comments on; links,
    form fields, noscript off). On resiliparse 2.0.1 these give the same output as its defaults and matched
    README on dev: 0.830 raw / 0.881 normalised (README 0.880) / snippet 0.847.
    """

    def __init__(self, argument: str | None = None) -> None:
        super().__init__(argument)
        from resiliparse.extract.html2text import extract_plain_text

        self._extract_plain_text = extract_plain_text

    def extract(self, html: str, url: str | None) -> str:
        return self._extract_plain_text(
            html,
            main_content=True,
            alt_texts=True,
            list_bullets=True,
            preserve_formatting=True,
            comments=True,
            links=False,
            form_fields=False,
            noscript=False,
        )


@register_extractor("readability")
class ReadabilityExtractor(Extractor):
    """readability-lxml's ``Document.summary`` through :func:`html_to_markdown`.

    ``summary(html_partial=True)`` (no ``<html><body>`` wrapper) is what matched README on dev: 0.907 raw /
    0.943 normalised / snippet 0.862. The default full-document summary scored 0.902 / 0.938 instead.
    """

    def __init__(self, argument: str | None = None) -> None:
        super().__init__(argument)
        import html2text  # noqa: F401  (warm the import html_to_markdown does)
        from readability import Document

        self._document = Document

    def extract(self, html: str, url: str | None) -> str:
        return html_to_markdown(self._document(html, url=url).summary(html_partial=True), url)


@register_extractor("html2text")
class WholePageExtractor(Extractor):
    """The floor: :func:`html_to_markdown` of the whole page (MinerU-HTML's ``fullpage-html-md``).

    Matched README on dev: 0.599 raw / 0.692 normalised / snippet 0.693.
    """

    def __init__(self, argument: str | None = None) -> None:
        super().__init__(argument)
        import html2text  # noqa: F401  (warm the import html_to_markdown does)

    def extract(self, html: str, url: str | None) -> str:
        return html_to_markdown(html, url)


DRIPPER_VIEWS = ("md", "html2text")


@register_extractor("dripper")
class PipelineUnderTest(Extractor):
    """This project's pipeline, ``dripper:<labeler>[/<view>]``, scored like WebMainBench scores Dripper.

    Two views of one extraction become two result rows: ``/md`` is the pipeline's own Markdown and
    ``/html2text`` its main HTML through :func:`html_to_markdown`. Naming a view keeps only that row.

    The ``oracle`` labeler reads :attr:`dripper.types.Page.ground_truth`, so every page's ground truth
    is passed in; snippet-only pages get their ``with_snippets`` joined by newlines instead (the only
    positive evidence they have). ``dripper`` is imported when the extractor is built, so this module
    works before or without the core.

    Pages go to ``extract_batch`` ``batch_size`` at a time. Timing covers ``extract_batch`` only: the
    html2text view's conversion is scoring-side formatting.
    """

    def __init__(
        self,
        argument: str | None = None,
        fallback: str = "trafilatura",
        batch_size: int = 64,
        spec: Any = None,
    ) -> None:
        self.spec = spec
        self._pipeline: Any = None
        if spec is not None:
            argument = spec.name
            fallback = spec.fallback
        if not argument:
            raise ValueError(
                "extractor 'dripper' needs a labeler: use 'dripper:<labeler>', e.g. 'dripper:oracle'"
            )
        labeler, _, view = argument.partition("/")
        if batch_size < 1:
            raise ValueError(f"extractor 'dripper:{argument}': batch_size {batch_size} must be at least 1")
        if not labeler:
            raise ValueError(f"extractor 'dripper:{argument}': empty labeler name; e.g. 'dripper:oracle/md'")
        if view and view not in DRIPPER_VIEWS:
            raise ValueError(
                f"extractor 'dripper:{argument}': unknown view {view!r}; choose one of {DRIPPER_VIEWS}"
            )
        self.labeler = labeler
        self.views = (view,) if view else DRIPPER_VIEWS
        if spec is not None and spec.labeler in PAGE_EXTRACTORS:
            self.views = ("md",)  # a whole-page extractor (fineweb, dclm) writes text only, no main HTML
        self.fallback = fallback
        self.batch_size = batch_size
        self.name = f"dripper:{labeler}"
        try:
            from dripper import pipeline, types
        except ImportError as exc:
            raise ImportError(
                f"extractor {self.name!r} needs dripper.pipeline.extract_batch, which could not be "
                f"imported ({exc}); run from the repository root (or pip install -e .) with a core that has "
                "dripper/pipeline.py"
            ) from exc
        self._extract_batch = pipeline.extract_batch
        self._page_type = types.Page

    def output_names(self) -> tuple[str, ...]:
        return tuple(f"{self.name}/{view}" for view in self.views)

    def extract(self, html: str, url: str | None) -> str:
        # Without a ground truth the oracle has nothing to read; other labelers work page by page too.
        return self._run([self._page_type(doc_id="0", html=html, url=url)])[0].markdown

    def _to_core_page(self, page: BenchPage) -> Any:
        ground_truth = page.ground_truth
        if ground_truth is None and page.with_snippets:
            ground_truth = "\n".join(page.with_snippets)
        return self._page_type(doc_id=page.id, html=page.html, url=page.url, ground_truth=ground_truth)

    def _run(self, core_pages: list[Any]) -> list[Any]:
        if self.spec is not None:
            results = self._spec_pipeline().extract_batch(core_pages)
        else:
            results = self._extract_batch(core_pages, labeler=self.labeler, fallback=self.fallback)
        if len(results) != len(core_pages):
            raise RuntimeError(f"extract_batch returned {len(results)} results for {len(core_pages)} pages")
        return results

    def close(self) -> None:
        if self._pipeline is not None:
            self._pipeline.close()
            self._pipeline = None

    def _spec_pipeline(self) -> Any:
        """The spec's labeler in a pipeline, built once (an LM engine is expensive to start)."""
        if self._pipeline is None:
            from dripper.pipeline import ExtractOptions, Extractor

            self._pipeline = Extractor.from_spec(self.spec, ExtractOptions(batch_size=self.batch_size))
        return self._pipeline

    def _outcome(self, result: Any, page: BenchPage, seconds: float) -> ExtractionOutcome:
        outputs = {}
        for view in self.views:
            text = result.markdown if view == "md" else html_to_markdown(result.main_html or "", page.url)
            outputs[f"{self.name}/{view}"] = text or ""
        info = {"extractor": result.extractor, "fallback_reason": result.fallback_reason}
        return ExtractionOutcome(outputs, seconds, None, info)

    def extract_pages(self, pages: Sequence[BenchPage]) -> list[ExtractionOutcome]:
        """Run ``extract_batch`` over ``batch_size`` pages at a time; a failing batch is retried page by page."""
        outcomes: list[ExtractionOutcome] = []
        for offset in range(0, len(pages), self.batch_size):
            outcomes.extend(self._extract_one_batch(pages[offset : offset + self.batch_size]))
        return outcomes

    def _extract_one_batch(self, pages: Sequence[BenchPage]) -> list[ExtractionOutcome]:
        core_pages = [self._to_core_page(page) for page in pages]
        start = time.perf_counter()
        try:
            results = self._run(core_pages)
        except Exception:  # one bad page must not zero the whole batch: fall through to per-page calls
            results = None
        if results is not None:
            per_page = (time.perf_counter() - start) / len(pages)
            return [
                self._outcome(result, page, per_page) for result, page in zip(results, pages, strict=True)
            ]
        outcomes = []
        empty = dict.fromkeys(self.output_names(), "")
        for page, core_page in zip(pages, core_pages, strict=True):
            start = time.perf_counter()
            try:
                result = self._run([core_page])[0]
            except Exception as exc:
                outcomes.append(ExtractionOutcome(dict(empty), time.perf_counter() - start, _describe(exc)))
                continue
            outcomes.append(self._outcome(result, page, time.perf_counter() - start))
        return outcomes
