"""Fallback extractors: what produces a page's output when the labelling path cannot.

Registered by name (``--fallback NAME``). Each takes the decoded page and returns main HTML; the pipeline
converts it to Markdown with the same converter as the main path, so a fallback result is never left
without Markdown (an upstream defect, docs/upstream.md#orchestration).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from dripper.hints import did_you_mean


class Fallback(ABC):
    """Produces main HTML from a whole page."""

    name: str = "base"

    @abstractmethod
    def main_html(self, html: str, url: str | None) -> str:
        """Main content of ``html`` as HTML ('' when nothing is found)."""


_FALLBACKS: dict[str, Callable[[], Fallback]] = {}


def register_fallback(name: str) -> Callable:
    def decorator(factory: Callable[[], Fallback]) -> Callable[[], Fallback]:
        _FALLBACKS[name] = factory
        return factory

    return decorator


@register_fallback("trafilatura")
class TrafilaturaFallback(Fallback):
    """Trafilatura's main-content extraction (HTML output, tables kept, comments dropped).

    Args:
        fast: Trafilatura's fast mode: its own extraction only, without the jusText and readability
            passes it otherwise runs on pages where its first result looks short (``trafilatura_fast``).
    """

    name = "trafilatura"

    def __init__(self, fast: bool = False) -> None:
        from trafilatura import extract
        from trafilatura.settings import Extractor

        self._extract = extract
        self._options = Extractor(output_format="html", tables=True, comments=False, fast=fast)
        if fast:
            self.name = "trafilatura_fast"

    def main_html(self, html: str, url: str | None) -> str:
        self._options.url = url
        return self._extract(html, options=self._options) or ""


register_fallback("trafilatura_fast")(lambda: TrafilaturaFallback(fast=True))


@register_fallback("empty")
class EmptyFallback(Fallback):
    """No fallback content: the page ends as an empty result with its reason recorded."""

    name = "empty"

    def main_html(self, html: str, url: str | None) -> str:
        return ""


def build_fallback(name: str) -> Fallback:
    """The fallback registered as ``name``.

    Raises:
        KeyError: unknown name, with the closest registered names.
    """
    if name not in _FALLBACKS:
        hint = did_you_mean(name, _FALLBACKS, n=2)
        raise KeyError(f"unknown fallback {name!r} (known: {', '.join(sorted(_FALLBACKS))}){hint}")
    return _FALLBACKS[name]()


def available_fallbacks() -> list[str]:
    return sorted(_FALLBACKS)
