"""This project's extractor and WARC reader as datatrove pipeline steps.

``from dripper.datatrove import DripperExtractor, DripperWarcReader`` imports datatrove (the ``refine``
extra); importing this package alone does not. :func:`fineweb_pipeline` assembles the FineWeb-shaped first
stage around them. See the docs page "Use it in a datatrove pipeline".
"""

from __future__ import annotations

from dripper.lazy import lazy_exports

_EXPORTS = {
    "DripperExtractor": "extractor",
    "ExtractorBuildError": "extractor",
    "DripperWarcReader": "reader",
    "QualityWordTokenizer": "recipes",
    "reader_accounting": "reader",
    "fineweb_pipeline": "recipes",
    "pipeline_accounting": "recipes",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
