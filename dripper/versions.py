"""The software that decides a corpus's text: this package and its parser stack, with their versions.

The extracted text depends on exact parser versions (lexbor inside selectolax, libxml2 inside lxml,
Trafilatura and its helpers for the fallback, html-to-markdown, FastWARC). ``constraints/parsers.txt`` pins
them for an install; :func:`software_versions` is what each shard marker and run summary records, so a
corpus says what made it.
"""

from __future__ import annotations

import platform
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version

__all__ = ["PARSER_STACK", "software_versions"]

#: The distributions of ``constraints/parsers.txt``, in its order.
PARSER_STACK = (
    "lxml",
    "lxml_html_clean",
    "selectolax",
    "trafilatura",
    "justext",
    "htmldate",
    "courlan",
    "charset-normalizer",
    "html-to-markdown",
    "fastwarc",
    "resiliparse",
)


@lru_cache(maxsize=1)
def software_versions() -> dict[str, str | None]:
    """``{distribution: version}`` of this package, Python, the parser stack (``None``: not installed) and
    the libxml2 that lxml was built with."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("dripper-platform", *PARSER_STACK):
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    try:
        from lxml import etree

        versions["libxml2"] = ".".join(map(str, etree.LIBXML_VERSION))
    except ImportError:  # pragma: no cover - lxml is a core dependency
        versions["libxml2"] = None
    return versions
