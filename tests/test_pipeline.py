from __future__ import annotations

import pytest

from dripper.labelers.base import BlockLabeler, Labels
from dripper.pipeline import ExtractOptions, Extractor, extract, extract_batch
from dripper.types import Page

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
    with pytest.raises(KeyError, match="did you mean 'trafilatura'"):
        Extractor(AllMain(), ExtractOptions(fallback="trafilatur"))


class Scored(BlockLabeler):
    """All main, with page confidences from the page's id (``p07`` → 0.07); ``decline`` ids get no labels."""

    name = "scored"

    def __init__(self, decline=()):
        super().__init__()
        self.decline = set(decline)

    def label_batch(self, requests):
        answers = []
        for request in requests:
            confidence = int(request.page.doc_id[1:]) / 100
            if request.page.doc_id in self.decline:
                answers.append(Labels(None, failure="low confidence", page_confidence=confidence))
            else:
                answers.append(Labels([True] * request.simplified.n_blocks, page_confidence=confidence))
        return answers


class Recording(BlockLabeler):
    """All main; remembers which pages it saw; fails the ``fail`` ids."""

    name = "second"

    def __init__(self, fail=()):
        super().__init__()
        self.seen: list[str] = []
        self.fail = set(fail)

    def label_batch(self, requests):
        self.seen += [request.page.doc_id for request in requests]
        return [
            Labels.failed("too long")
            if r.page.doc_id in self.fail
            else Labels([True] * r.simplified.n_blocks)
            for r in requests
        ]


def test_a_cascade_routes_the_least_sure_pages_and_names_who_labelled_each():
    from dripper.pipeline import Route
    from dripper.routing import RoutePolicy

    pages = [Page(doc_id=f"p{i:02d}", html=ARTICLE) for i in (90, 10, 50, 95, 20, 70, 30, 99, 60, 80)]
    second = Recording(fail={"p20"})
    extractor = Extractor(Scored(decline={"p95"}), route=Route(second, RoutePolicy(share=0.4)))
    results = {r.doc_id: r for r in extractor.extract_batch(pages)}
    # The declined page first, then the least sure; sent in page order.
    assert second.seen == ["p10", "p95", "p20", "p30"]
    assert results["p10"].extractor == "dripper:second" and results["p95"].extractor == "dripper:second"
    # The second labeler failed: the first labels stand, and the failure is recorded.
    assert (
        results["p20"].extractor == "dripper:scored" and results["p20"].stats["route_failure"] == "too long"
    )
    assert results["p90"].extractor == "dripper:scored" and results["p90"].stats["routed"] is False
    assert results["p10"].stats["route"] == 0.1 and results["p10"].stats["page_confidence"] == 0.1
    summary = extractor.route_summary()
    assert (summary["pages_scored"], summary["pages_routed"], summary["route_failed"]) == (10, 4, 1)
    assert summary["declined"] == 1 and 0 < summary["token_share_routed"] < 1


def test_a_declined_page_falls_back_only_when_the_second_labeler_fails_too():
    from dripper.pipeline import Route
    from dripper.routing import RoutePolicy

    pages = [Page(doc_id="p40", html=ARTICLE), Page(doc_id="p50", html=ARTICLE)]
    extractor = Extractor(
        Scored(decline={"p40", "p50"}), route=Route(Recording(fail={"p40"}), RoutePolicy(below=0.1))
    )
    first, second = extractor.extract_batch(pages)
    assert first.extractor == "trafilatura" and first.fallback_reason == "label_failed: low confidence"
    assert first.stats["route_failure"] == "too long"
    assert second.extractor == "dripper:second" and second.fallback_reason is None


def test_no_main_block_gives_empty_output_or_the_fallback_on_request():
    """An all-"other" answer is a valid answer (upstream's behaviour); ``fallback_on_empty`` opts out."""

    class AllOther(BlockLabeler):
        name = "all-other"

        def label_batch(self, requests):
            return [Labels([False] * request.simplified.n_blocks) for request in requests]

    empty = extract(ARTICLE, labeler=AllOther())
    assert (empty.extractor, empty.markdown, empty.fallback_reason) == ("dripper:all-other", "", None)
    fallen = extract(ARTICLE, labeler=AllOther(), options=ExtractOptions(fallback_on_empty=True))
    assert fallen.extractor == "trafilatura" and fallen.fallback_reason == "no_main_blocks"
    assert "first paragraph" in fallen.markdown


def test_the_fallbacks_a_spec_may_name_are_the_registered_ones():
    """``config.extractor.FALLBACKS`` (the spec's and the CLI's choices, kept light for DAG parsing) and
    ``dripper.fallback``'s registry name the same fallbacks, and each names its results by its own name."""
    from dripper.config.extractor import FALLBACKS
    from dripper.fallback import available_fallbacks, build_fallback

    assert available_fallbacks() == sorted(FALLBACKS)
    assert [build_fallback(name).name for name in FALLBACKS] == list(FALLBACKS)
