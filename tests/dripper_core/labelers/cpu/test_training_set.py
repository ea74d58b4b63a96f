"""Training pages: site grouping, folds, and the set built from bundled pages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dripper_core.labelers.cpu.training_set import assign_folds, build_training_set, site_of
from tests.dripper_core.labelers.cpu import fake_page

REPO = Path(__file__).resolve().parents[4]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"


def test_site_of():
    assert site_of({"url": "https://www.example.co.uk/a/b", "html": ""}) == "example.co.uk"
    assert site_of({"url": "http://blogs.nfl.com/x", "html": ""}) == "nfl.com"
    html = '<html><head><link rel="canonical" href="https://news.example.org/story"></head></html>'
    assert site_of({"url": None, "html": html}) == "example.org"
    assert site_of({"url": None, "html": "<p>x</p>", "id": "p1", "source": "s"}) == "page:s:p1"


def test_folds_keep_sites_together_and_spread_sources():
    pages = [fake_page(f"p{i}", "a" if i % 2 else "b", f"site{i // 3}", 10 + i) for i in range(30)]
    folds = assign_folds(pages, 3, seed=0, by="site")
    for site in {page.site for page in pages}:
        assert len({int(folds[i]) for i, page in enumerate(pages) if page.site == site}) == 1
    for source in ("a", "b"):
        assert {int(folds[i]) for i, page in enumerate(pages) if page.source == source} == {0, 1, 2}
    assert np.array_equal(folds, assign_folds(pages, 3, seed=0, by="site"))
    by_source = assign_folds(pages, 3, by="source")
    assert sorted(set(by_source.tolist())) == [0, 1]
    with pytest.raises(ValueError, match="grouping"):
        assign_folds(pages, 3, by="language")


def test_build_training_set_reads_sample_pages():
    training = build_training_set([SAMPLE], limit=6)
    assert training.files[0]["records"] == 6
    assert len(training.pages) + sum(training.skipped.values()) == 6
    page = training.pages[0]
    assert page.labels.shape == (page.n_blocks,) and page.labels.any()
