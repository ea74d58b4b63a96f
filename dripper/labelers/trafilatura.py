"""The ``trafilatura`` labeler: Trafilatura's extraction projected onto our blocks.

Trafilatura extracts the page's main text; the ``oracle`` alignment then labels the blocks that text covers.
Output therefore goes through our reconstruction and Markdown (a subset of the original DOM, tables and
formulas kept), and the labels are per block: usable as draft labels or features by other labelers.
"""

from __future__ import annotations

from collections.abc import Sequence

from dripper.labelers.base import BlockLabeler, LabelRequest, Labels, register_labeler
from dripper.labelers.oracle import OracleOptions, align_blocks


@register_labeler("trafilatura")
class TrafilaturaLabeler(BlockLabeler):
    """Labels blocks main where Trafilatura's extracted text covers them."""

    name = "trafilatura"

    def __init__(self, options: OracleOptions | None = None) -> None:
        super().__init__()
        from trafilatura import extract
        from trafilatura.settings import Extractor

        self._extract = extract
        self._settings = Extractor(output_format="txt", tables=True, comments=False)
        self.options = options or OracleOptions()

    def label_batch(self, requests: Sequence[LabelRequest]) -> list[Labels]:
        results = []
        for request in requests:
            self._settings.url = request.page.url
            text = self._extract(request.html_text, options=self._settings)
            if not text:
                results.append(Labels.failed("trafilatura found no main content"))
                continue
            texts = [block.text for block in request.simplified.blocks]
            alignment = align_blocks(text, texts, self.options)
            results.append(Labels(main=alignment.main, confidence=alignment.coverage))
        return results
