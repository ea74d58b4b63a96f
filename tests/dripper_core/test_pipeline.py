from __future__ import annotations

import pytest

from dripper_core.labelers.base import BlockLabeler, Labels
from dripper_core.pipeline import ExtractOptions, Extractor, extract, extract_batch
from dripper_core.types import Page

ARTICLE = (
    "<html><body><div class='nav'><a href='/'>Home</a></div><article><h1>Title of the story</h1>"
    "<p>The first paragraph of the story has enough words to be an article paragraph for trafilatura.</p>"
    "<p>The second paragraph carries on with more words so that the fallback extractor finds content.</p>"
    "</article></body></html>"
)


class AllMain(BlockLabeler):
    name = "all-main"

    def label_batch(self, requests):
        return [Labels([True] * request.simplified.n_blocks) for request in requests]


class Failing(BlockLabeler):
    name = "failing"

    def label_batch(self, requests):
        return [Labels.failed("model said no") for _ in requests]


class WrongCount(BlockLabeler):
    name = "wrong-count"

    def label_batch(self, requests):
        return [Labels([True]) for _ in requests]


def test_labelled_path_produces_markdown_and_html():
    result = extract(ARTICLE, url="https://example.org/a", labeler=AllMain())
    assert result.extractor == "dripper:all-main"
    assert result.fallback_reason is None
    assert result.markdown.startswith("# Title of the story\n\nThe first")  # class="nav" under body: removed
    assert "<h1>Title of the story</h1>" in result.main_html
    assert result.labels == [True] * result.stats["n_blocks"]


def test_label_failure_goes_to_trafilatura_with_reason_and_markdown():
    result = extract(ARTICLE, labeler=Failing())
    assert result.extractor == "trafilatura"
    assert result.fallback_reason == "label_failed: model said no"
    assert "first paragraph" in result.markdown and "first paragraph" in result.main_html


def test_the_options_fallback_is_used_unless_the_argument_is_given():
    """``extract(options=ExtractOptions(fallback=None))`` does not fall back (the argument's default used to
    override the options)."""
    unfallen = extract(ARTICLE, labeler=Failing(), options=ExtractOptions(fallback=None))
    assert unfallen.extractor == "none" and unfallen.markdown == ""
    assert unfallen.fallback_reason == "label_failed: model said no"
    assert extract(ARTICLE, labeler=Failing(), options=ExtractOptions(fallback="empty")).extractor == "empty"
    given = extract(ARTICLE, labeler=Failing(), fallback="trafilatura", options=ExtractOptions(fallback=None))
    assert given.extractor == "trafilatura"


def test_wrong_label_count_is_a_failure_not_a_crash():
    result = extract(ARTICLE, labeler=WrongCount(), fallback="empty")
    assert result.extractor == "empty"
    assert result.fallback_reason.startswith("label_failed: labeler returned 1 labels")
    assert result.markdown == ""


@pytest.mark.parametrize(
    ("html", "reason"),
    [
        (b"", "empty_input"),
        ("   \n ", "empty_input"),
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40, "not_html: binary content"),
        ("just some words, no markup", "not_html: no markup"),
        (12345, "invalid_input: html is int"),
        ("<p>" + "x" * 2_000_000 + "</p>", "too_large"),
    ],
)
def test_bad_input_gets_a_record_with_a_reason(html, reason):
    options = ExtractOptions(max_page_bytes=1_000_000)
    (result,) = extract_batch([Page("bad", html)], AllMain(), options=options)
    assert result.extractor == "none"
    assert result.fallback_reason.startswith(reason)


def test_deep_nesting_does_not_crash_the_batch():
    deep = "<html><body>" + "<div>" * 10_000 + "deep" + "</div>" * 10_000 + "<p>after</p></body></html>"
    results = extract_batch([Page("deep", deep), Page("ok", ARTICLE)], AllMain())
    assert results[0].fallback_reason == "simplify_failed: nesting too deep"
    assert results[1].extractor == "dripper:all-main"


def test_bytes_are_decoded_with_the_declared_charset():
    html = '<html><head><meta charset="windows-1251"></head><body><div><p>Привет, мир</p></div></body></html>'
    result = extract(html.encode("windows-1251"), labeler=AllMain())
    assert result.markdown == "Привет, мир"
    assert result.stats["encoding"] == "cp1251"


def test_stream_keeps_order_and_count_across_batches():
    pages = [Page(str(i), ARTICLE if i % 3 else b"") for i in range(10)]
    extractor = Extractor(AllMain(), ExtractOptions(batch_size=4))
    results = list(extractor.iter_extract(pages))
    assert [r.doc_id for r in results] == [str(i) for i in range(10)]
    assert sum(r.extractor == "none" for r in results) == 4
    assert extractor.labeler.stats.pages == 6


def test_unknown_labeler_and_fallback_names_are_clear_errors():
    with pytest.raises(KeyError, match="unknown labeler"):
        Extractor("orcale")
    with pytest.raises(KeyError, match="did you mean trafilatura"):
        Extractor(AllMain(), ExtractOptions(fallback="trafilatur"))
