"""The whole-page baseline extractors (``fineweb``, ``dclm``): the anchors' own steps, through our pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from dripper.config.extractor import check_labeler_options, parse_extractor, parse_extractors
from dripper.config.labelers import available_labelers
from dripper.pipeline import Extractor
from dripper.types import Page

REPO = Path(__file__).resolve().parents[2]
# One of the bundled WARC files that every gzip reader reads to the end (two others are damaged on purpose).
WARC = next(
    (REPO / "data" / "sample" / "crawl-data").rglob("CC-MAIN-20250314031422-20250314061422-00001.warc.gz")
)
#: Generous on both sides: 2 shared cores must not turn a slow page into a timeout on one side only.
TIMEOUT = 60


def _datatrove_fineweb(warc: Path) -> dict[str, str]:
    """What FineWeb's own steps write for a WARC file: datatrove's ``WarcReader`` → ``Trafilatura(
    favour_precision=True)``; the documents it keeps, by WARC-Record-ID."""
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.readers import WarcReader

    reader = WarcReader(str(warc.parent), glob_pattern=warc.name)
    step = Trafilatura(favour_precision=True, timeout=TIMEOUT)
    return {doc.id: doc.text for doc in step.run(reader.run())}


def _our_pages(warc: Path) -> tuple[list[Page], object]:
    from dripper.io.warc import WarcReadStats, iter_warc_pages

    stats = WarcReadStats()
    return [page.to_page() for page in iter_warc_pages(warc, stats=stats)], stats


def test_fineweb_arm_is_byte_identical_to_datatrove_trafilatura_step():
    expected = _datatrove_fineweb(WARC)
    pages, read_stats = _our_pages(WARC)
    extractor = Extractor.from_spec(
        {"name": "fineweb", "labeler": "fineweb", "options": {"timeout": TIMEOUT}}
    )
    try:
        results = {r.doc_id: r for r in extractor.extract_batch(pages)}
    finally:
        extractor.close()
    shared = set(results) & set(expected)
    # datatrove's reader keeps every HTML response; ours reads HTTP 200 pages only (the sample holds a 503).
    assert len(shared) >= 40 and len(expected) - len(shared) <= read_stats.skipped["non_200"]
    for doc_id in shared:
        assert results[doc_id].markdown == expected[doc_id], doc_id  # byte for byte
        assert results[doc_id].extractor == "fineweb"
        assert results[doc_id].main_html == "" and results[doc_id].labels is None
    # What datatrove dropped (no text) is empty here too: the refine stage drops it the same way.
    for doc_id in set(results) - set(expected):
        assert results[doc_id].markdown == ""


def test_fineweb_and_dclm_are_specs_like_any_labeler():
    assert {"fineweb", "dclm"} <= set(available_labelers())
    specs = parse_extractors(
        [
            "cpu",
            "fineweb",
            "d=dclm,links=true",
            {"name": "fw5", "labeler": "fineweb", "options": {"timeout": 5}},
        ]
    )
    check_labeler_options(specs)
    assert [s.fallback for s in specs] == ["trafilatura", None, None, None]  # anchors drop what they miss
    assert specs[1].describe() == "fineweb" and not specs[1].needs_gpu and not specs[1].is_lm
    with pytest.raises(ValueError, match="takes no option 'link'"):
        check_labeler_options([parse_extractor("d=dclm,link=true")])
    with pytest.raises(ValueError, match="timeout"):
        check_labeler_options([parse_extractor("f=fineweb,timeout=-1")])


def test_dclm_arm_is_resiliparse_main_content_text():
    from resiliparse.extract.html2text import extract_plain_text

    html = (
        "<html><body><nav><a href='/'>Home</a> <a href='/x'>About</a></nav><article><h1>Title</h1>"
        "<p>The first paragraph of the article, long enough to be main content.</p>"
        "<ul><li>one</li><li>two</li></ul></article><footer>Copyright</footer></body></html>"
    )
    extractor = Extractor("dclm")
    result = extractor.extract_batch([Page(doc_id="a", html=html.encode(), url="https://x.org/a")])[0]
    assert result.markdown == extract_plain_text(html, main_content=True)
    assert result.extractor == "dclm" and result.fallback_reason is None
    assert extractor.labeler.describe()["settings"]["main_content"] is True


def test_page_extractor_accounting_and_extract_simplified():
    extractor = Extractor("dclm")
    page = Page(doc_id="p", html="<html><body><p>Some words of text here.</p></body></html>")
    bad = Page(doc_id="b", html="no markup at all")
    batch = extractor.extract_batch([page, bad])
    assert batch[1].extractor == "none" and batch[1].fallback_reason.startswith("not_html")
    # The data plane's split path gives the same results; a simplify failure does not stop the extractor.
    split = extractor.extract_simplified(
        [(page, None, "simplify_failed: X"), (bad, None, "not_html: no markup")]
    )
    assert [r.markdown for r in split] == [r.markdown for r in batch]
    assert [r.extractor for r in split] == ["dclm", "none"]


def test_page_extractor_failure_goes_to_the_fallback_or_ends_empty_with_its_reason():
    from dripper.labelers.whole_page import PageExtractor

    class Broken(PageExtractor):
        name = "broken"

        def extract_text(self, html, url=None):
            raise RuntimeError("boom")

    page = Page(
        doc_id="p",
        html="<html><body><article><p>" + "Words of the page. " * 30 + "</p></article></body></html>",
    )
    empty = Extractor(Broken(), options=None).extract_batch([page])[0]
    assert empty.extractor == "trafilatura" and "extract_failed: RuntimeError: boom" in empty.fallback_reason
    from dataclasses import replace

    from dripper.pipeline import ExtractOptions

    none = Extractor(Broken(), replace(ExtractOptions(), fallback=None)).extract_batch([page])[0]
    assert (
        none.extractor == "none" and none.markdown == "" and none.fallback_reason.startswith("extract_failed")
    )
    with pytest.raises(ValueError, match="whole-page extractor"):
        Extractor.from_spec({"name": "c", "labeler": "dclm", "route": {"labeler": "cpu", "share": 0.5}})


def test_a_page_over_the_timeout_is_cut_off_and_the_next_page_runs():
    import time as clock

    from dripper.labelers.whole_page import PageExtractor

    class Slow(PageExtractor):
        name = "slow"

        def extract_text(self, html, url=None):
            if "slow" in html:
                clock.sleep(30)
            return "text of " + html[-10:]

    extractor = Slow(timeout=0.5)
    pages = [
        Page(doc_id=i, html=f"<html><body><p>{word}</p></body></html>")
        for i, word in (("1", "slow"), ("2", "fast"))
    ]
    started = clock.perf_counter()
    from dripper.pipeline import ExtractOptions

    slow, fast = Extractor(extractor, ExtractOptions(fallback=None)).extract_batch(pages)
    assert clock.perf_counter() - started < 30  # sooner than the slow page's sleep: the deadline cut it
    assert slow.extractor == "none" and "PageExtractorTimeout" in slow.fallback_reason
    assert fast.extractor == "slow" and fast.markdown.startswith("text of")
    assert extractor.stats["timeouts"] == 1 and extractor.stats["pages"] == 2
    extractor.close()
