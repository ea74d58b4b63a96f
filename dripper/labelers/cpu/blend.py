"""Trafilatura's view of a page as a second opinion on the CPU labeler's block probabilities.

With ``trafilatura_weight`` w > 0 the labeler also runs Trafilatura on each page it labels, projects the
extracted text onto the blocks (the ``trafilatura`` labeler's projection: the ``oracle`` alignment) and
labels the page from ``(1 - w) · p + w · t`` (``p`` the model's probabilities, ``t`` 1 on the blocks
Trafilatura's text covers): where the two agree the block is settled, where they disagree the model
decides unless it is unsure. It costs a Trafilatura run on every labelled page (about as much CPU as the
rest of the labeler), so it is off by default; the confidence gates still read the model's own
probabilities, so the same pages go to the fallback with or without it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dripper.labelers.base import LabelRequest

__all__ = ["TrafilaturaOpinion", "check_weight"]


def check_weight(weight: float | None) -> float:
    """``weight`` as a float in [0, 1) (``None``: 0, off)."""
    value = 0.0 if weight is None else float(weight)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"trafilatura_weight {weight!r}: need 0 <= weight < 1 (0 turns it off)")
    return value


class TrafilaturaOpinion:
    """Blends the model's probabilities with Trafilatura's projected labels (see the module docstring)."""

    def __init__(self, weight: float) -> None:
        from dripper.labelers.trafilatura import TrafilaturaLabeler

        self.weight = check_weight(weight)
        self._labeler = TrafilaturaLabeler()

    def blend(
        self, requests: Sequence[LabelRequest], probabilities: Sequence[np.ndarray]
    ) -> list[np.ndarray]:
        """Per request, the blended probabilities; the model's own where Trafilatura finds nothing or fails
        (its opinion is then missing, not "nothing is main")."""
        blended = []
        for request, p in zip(requests, probabilities, strict=True):
            try:
                (labels,) = self._labeler.label_batch([request])
            except Exception:  # a page Trafilatura cannot take keeps the model's labels
                labels = None
            if labels is None or labels.main is None or len(labels.main) != len(p):
                blended.append(p)
                continue
            opinion = np.asarray(labels.main, dtype=np.float64)
            blended.append((1.0 - self.weight) * np.asarray(p, dtype=np.float64) + self.weight * opinion)
        return blended
