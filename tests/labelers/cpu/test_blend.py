"""Trafilatura's second opinion: the blend of the model's probabilities with its projected labels."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from dripper.labelers.base import LabelRequest, Labels
from dripper.labelers.cpu.blend import TrafilaturaOpinion, check_weight
from dripper.labelers.cpu.model import CpuLabeler
from dripper.labelers.trafilatura import TrafilaturaLabeler
from dripper.simplify import simplify_html
from dripper.types import Page

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"


def _requests(limit: int) -> list[LabelRequest]:
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as lines:
        records = [json.loads(line) for _, line in zip(range(limit), lines, strict=False)]
    return [
        LabelRequest(
            page=Page(doc_id=r["id"], html=r["html"], url=r.get("url")),
            simplified=simplify_html(r["html"], r["id"], r.get("url")),
        )
        for r in records
    ]


def test_check_weight():
    assert check_weight(None) == 0.0 and check_weight(0) == 0.0 and check_weight("0.3") == 0.3
    for bad in (1.0, -0.1, 2):
        with pytest.raises(ValueError, match="trafilatura_weight"):
            check_weight(bad)


def test_blend_moves_the_blocks_trafilatura_covers_and_keeps_the_rest():
    request = _requests(1)[0]
    covered = np.array(TrafilaturaLabeler().label_batch([request])[0].main, dtype=bool)
    assert covered.any() and not covered.all()
    p = np.full(request.simplified.n_blocks, 0.2)
    (blended,) = TrafilaturaOpinion(0.4).blend([request], [p])
    assert np.allclose(blended[covered], 0.6 * 0.2 + 0.4)
    assert np.allclose(blended[~covered], 0.6 * 0.2)


def test_no_opinion_leaves_the_model_alone(monkeypatch):
    request = _requests(1)[0]
    p = np.linspace(0.1, 0.9, request.simplified.n_blocks)
    opinion = TrafilaturaOpinion(0.5)
    # Trafilatura finds nothing: its "nothing is main" is a missing opinion, not a vote against every block.
    monkeypatch.setattr(opinion._labeler, "label_batch", lambda requests: [Labels.failed("no main content")])
    assert opinion.blend([request], [p])[0] is p

    def crash(requests):
        raise RecursionError("deep page")

    monkeypatch.setattr(opinion._labeler, "label_batch", crash)
    assert opinion.blend([request], [p])[0] is p


def test_the_labeler_blends_only_what_passes_its_gates():
    requests = _requests(20)
    alone = CpuLabeler().label_batch(requests)
    labeler = CpuLabeler(trafilatura_weight=0.3)
    blended = labeler.label_batch(requests)
    assert labeler.seconds["second_opinion"] > 0
    # The gates read the model's own probabilities: the same pages are declined, with the same figures.
    assert [a.failure for a in alone] == [b.failure for b in blended]
    assert [a.confidence for a in alone] == [b.confidence for b in blended]
    assert [a.page_confidence for a in alone] == [b.page_confidence for b in blended]
    assert any(a.main != b.main for a, b in zip(alone, blended, strict=True))
    assert all(b.main is None for b in blended if b.failure)
    CpuLabeler.check_options({"trafilatura_weight": 0.3})
    with pytest.raises(ValueError, match="trafilatura_weight"):
        CpuLabeler.check_options({"trafilatura_weight": 1})
