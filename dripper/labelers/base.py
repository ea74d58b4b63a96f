"""The labeler interface: simplified pages in, one boolean per block out.

A labeler implements :meth:`BlockLabeler.label_batch`; the base class owns timing, counters and the
turning of per-page failures into recorded fallbacks. Labelers are found by name in a registry, which is
what the CLI, the data plane and Airflow params use.
"""

from __future__ import annotations

import inspect
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from dripper.config.labelers import (
    BUILTIN_LABELERS,
    DEFAULT_LABELER,
    ENTRY_POINT_GROUP,
    available_labelers,
    labeler_factory,
    register_labeler,
)
from dripper.types import Page, SimplifiedPage

if TYPE_CHECKING:
    from dripper.labelers.whole_page import PageExtractor

__all__ = [
    "BUILTIN_LABELERS",
    "DEFAULT_LABELER",
    "ENTRY_POINT_GROUP",
    "BlockLabeler",
    "LabelRequest",
    "Labels",
    "available_labelers",
    "build_labeler",
    "labeler_factory",
    "register_labeler",
]


@dataclass(slots=True)
class LabelRequest:
    """What a labeler sees of one page: the raw page (for ground truth, URL) and its simplified views.

    ``decoded_html`` is the page as text when the pipeline decoded it from bytes (``html_text`` gives the
    text either way).
    """

    page: Page
    simplified: SimplifiedPage
    decoded_html: str | None = None

    @property
    def html_text(self) -> str:
        if self.decoded_html is not None:
            return self.decoded_html
        html = self.page.html
        if isinstance(html, str):
            return html
        from dripper.decode import decode_html

        return decode_html(bytes(html), self.page.http_charset).text


@dataclass(slots=True)
class Labels:
    """A labeler's answer for one page.

    Attributes:
        main: One boolean per block, in id order (``True`` = main content); ``None`` on failure.
        failure: Why no labels were produced (the page goes to the fallback), ``None`` on success.
        confidence: Optional per-block confidence (e.g. the log-probability margin main − other).
        raw_output: Optional raw model output, for debugging.
        page_confidence: Optional estimate of the page's quality in [0, 1] (the CPU labeler's expected
            character F1 of its labels); the pipeline records it as ``stats["page_confidence"]``.
        route_score: Optional score a cascade ranks pages by (low: send to the second labeler); when
            ``None`` the cascade ranks by ``page_confidence``.
    """

    main: list[bool] | None
    failure: str | None = None
    confidence: list[float] | None = None
    raw_output: str | None = None
    page_confidence: float | None = None
    route_score: float | None = None

    @classmethod
    def failed(cls, reason: str) -> Labels:
        return cls(main=None, failure=reason)


@dataclass
class LabelerStats:
    """Per-labeler counters, in the spirit of datatrove's per-step stats."""

    pages: int = 0
    blocks: int = 0
    main_blocks: int = 0
    seconds: float = 0.0
    failures: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict:
        return {
            "pages": self.pages,
            "blocks": self.blocks,
            "main_blocks": self.main_blocks,
            "seconds": round(self.seconds, 4),
            "failures": dict(self.failures),
        }


class BlockLabeler(ABC):
    """Labels the blocks of simplified pages as main content or not.

    Subclasses set ``name`` and implement :meth:`label_batch`. They may raise for a whole batch only on
    configuration errors; per-page problems are returned as :meth:`Labels.failed` with a reason.
    """

    name: str = "base"
    needs_block_text: bool = True
    """Whether the labeler reads :attr:`Block.text` (an LM reads the Simplified HTML only)."""
    is_lm: ClassVar[bool] = False
    """Whether it is a language model: its pages are the LM share of a run (the ablation report's cost)."""
    required_options: ClassVar[Mapping[str, str]] = {}
    """Options it cannot run without, each with what to give: checked with the spec, before any shard."""

    def __init__(self) -> None:
        self.stats = LabelerStats()

    @classmethod  # noqa: B027 - an optional hook: most labelers accept whatever their constructor does
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` for option values the labeler would refuse, without building it (no model
        loaded, no engine started): run specs are checked before any shard runs. Names are checked apart."""

    @classmethod
    def needs_gpu(cls, options: Mapping[str, Any]) -> bool:
        """Whether a worker running it with ``options`` needs a GPU (its extract tasks then ask for one)."""
        return False

    @abstractmethod
    def label_batch(self, requests: Sequence[LabelRequest]) -> list[Labels]:
        """Label every block of every page; one :class:`Labels` per request, in order."""

    def __call__(self, requests: Sequence[LabelRequest]) -> list[Labels]:
        started = time.perf_counter()
        results = self.label_batch(requests)
        if len(results) != len(requests):
            raise RuntimeError(
                f"labeler {self.name!r} returned {len(results)} answers for {len(requests)} pages"
            )
        for request, result in zip(requests, results, strict=True):
            expected = request.simplified.n_blocks
            if result.main is not None and len(result.main) != expected:
                result.failure = f"labeler returned {len(result.main)} labels for {expected} blocks"
                result.main = None
            self.stats.pages += 1
            self.stats.blocks += expected
            if result.main is None:
                self.stats.failures[result.failure or "unknown"] += 1
            else:
                self.stats.main_blocks += sum(result.main)
        self.stats.seconds += time.perf_counter() - started
        return results

    def close(self) -> None:  # noqa: B027 - optional hook; engines release GPUs, servers, processes here
        """Release resources held by the labeler."""


def build_labeler(name: str, **options) -> BlockLabeler | PageExtractor:
    """Build the labeler ``name`` (built in, from an entry point, registered, or ``module:factory``) with
    ``options``: a :class:`BlockLabeler`, or a whole-page extractor
    (:class:`~dripper.labelers.whole_page.PageExtractor`: ``fineweb``, ``dclm``).

    Raises:
        KeyError: unknown name (with the closest names), or an import path that does not import or does
            not build a :class:`BlockLabeler` or a ``PageExtractor``.
        ValueError: an option the labeler does not take.
    """
    from dripper.labelers.whole_page import PageExtractor

    factory = labeler_factory(name)
    try:
        inspect.signature(factory).bind(**options)
    except TypeError as error:
        raise ValueError(f"labeler {name!r}: {error}") from None
    labeler = factory(**options)
    if not isinstance(labeler, BlockLabeler | PageExtractor):
        raise KeyError(
            f"labeler {name!r} built a {type(labeler).__name__}, not a BlockLabeler or a PageExtractor"
        )
    return labeler
