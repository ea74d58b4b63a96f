"""Training pages: site grouping, folds, and the set built from bundled pages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dripper.labelers.cpu.training_set import assign_folds, build_training_set, site_of, snippet_labels
from tests.labelers.cpu import fake_page

REPO = Path(__file__).resolve().parents[3]
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


def test_snippet_labels_mark_only_the_blocks_the_snippets_decide():
    blocks = [
        "Das **Wetter** wird morgen schön.",  # a with snippet, through the metric's Markdown normalisation
        "Mehr zum Thema",  # a without snippet, in two blocks
        "Mehr zum Thema",
        "Ein Satz, der zweimal vorkommt.",  # a with snippet in two blocks: which one counts is unknown
        "Ein Satz, der zweimal vorkommt.",
        "Teilen Sie diesen Artikel",  # claimed by both: unknown
        "Ein Absatz, den kein Snippet nennt.",
    ]
    labels, known = snippet_labels(
        blocks,
        with_snippets=["Das Wetter wird", "zweimal vorkommt", "Teilen Sie", "gibt es nicht"],
        without_snippets=["Mehr zum Thema", "diesen Artikel", ""],
    )
    assert known.tolist() == [True, True, True, False, False, False, False]
    assert labels.tolist() == [True, False, False, False, False, False, False]


def test_snippet_pages_are_partial_training_pages(tmp_path):
    body = "".join(
        f"<p>Absatz {i} des Artikels, lang genug, um ein eigener Block zu sein.</p>" for i in range(4)
    )
    html = f"<html><body><nav><a href='/x'>Startseite</a></nav><article>{body}</article><footer>Impressum und Kontakt</footer></body></html>"
    records = [
        {
            "id": "s1",
            "url": "https://news.example.de/a",
            "html": html,
            "source": "snippets",
            "with_snippets": ["Absatz 2 des Artikels"],
            "without_snippets": ["Impressum und Kontakt"],
        },
        {
            "id": "s2",
            "url": "https://news.example.de/b",
            "html": html,
            "source": "snippets",
            "with_snippets": ["steht nirgends"],
            "without_snippets": [],
        },
    ]
    path = tmp_path / "pages.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    training = build_training_set([path])
    assert training.skipped == {"no with-snippet in one block": 1}
    (page,) = training.pages
    assert page.partial and page.known.sum() == 2 and page.labels.sum() == 1
    assert not (page.labels & ~page.known).any()
    assert training.summary()["snippet_pages"] == 1
