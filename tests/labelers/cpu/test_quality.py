"""The shipped model on the bundled sample pages (held out of its training): a measured quality floor.

The shipped model is trained with ``--exclude-pages data/sample/pages.jsonl.gz``, so these 60 pages are
unseen. Measured when the model was trained (see the lead-in of ``dripper/labelers/cpu/model.py``'s
metadata and the README): the floors below sit a small margin under the measured figures.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

pytest.importorskip("jieba")

from dripper.eval.baselines import get_extractor  # noqa: E402
from dripper.eval.metrics import score_page  # noqa: E402
from dripper.pipeline import ExtractOptions, Extractor  # noqa: E402
from dripper.types import Page  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"
MARGIN = 0.02


@pytest.fixture(scope="module")
def scores() -> dict[str, list[float]]:
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines]
    records = [record for record in records if record.get("ground_truth_text")]
    pages = [Page(doc_id=r["id"], html=r["html"], url=r.get("url")) for r in records]
    results = Extractor("cpu", ExtractOptions(fallback="trafilatura")).extract_batch(pages)
    trafilatura = get_extractor("trafilatura")
    found: dict[str, list[float]] = {"cpu": [], "trafilatura": []}
    for record, result in zip(records, results, strict=True):
        found["cpu"].append(score_page(result.markdown, record["ground_truth_text"])["rouge_f1_norm"])
        text = trafilatura.extract(record["html"], record.get("url"))
        found["trafilatura"].append(score_page(text, record["ground_truth_text"])["rouge_f1_norm"])
    return found


@pytest.mark.slow
def test_cpu_labeler_is_at_least_trafilatura_on_unseen_sample_pages(scores):
    cpu = sum(scores["cpu"]) / len(scores["cpu"])
    trafilatura = sum(scores["trafilatura"]) / len(scores["trafilatura"])
    assert len(scores["cpu"]) >= 50
    assert cpu >= trafilatura - MARGIN, f"cpu {cpu:.3f} vs trafilatura {trafilatura:.3f}"
