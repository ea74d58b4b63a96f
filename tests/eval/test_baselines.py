"""The extractor registry, the baselines on a small page, and the dripper extractor with a fake core."""

from __future__ import annotations

import sys

import pytest

from dripper.eval.baselines import (
    ExtractionOutcome,
    Extractor,
    available_extractors,
    get_extractor,
    html_to_markdown,
)
from dripper.eval.datasets import BenchPage
from tests.eval.conftest import ARTICLE_HTML, ARTICLE_TEXT

BASELINES = ("trafilatura", "resiliparse", "readability", "html2text")


def test_baselines_are_registered():
    assert set(BASELINES) <= set(available_extractors())
    assert "dripper" in available_extractors()


def test_unknown_name_suggests_close_matches():
    with pytest.raises(KeyError, match=r"unknown extractor 'trafilatur'; did you mean 'trafilatura'\?"):
        get_extractor("trafilatur")


def test_unknown_name_without_close_match_lists_available():
    with pytest.raises(KeyError, match=r"\(available: .*html2text.*trafilatura") as excinfo:
        get_extractor("zzzzzz")
    assert "did you mean" not in str(excinfo.value)


def test_baseline_rejects_an_argument():
    with pytest.raises(ValueError, match="takes no ':argument'"):
        get_extractor("trafilatura:fast")


@pytest.mark.parametrize("name", BASELINES)
def test_baselines_extract_the_article(name):
    text = get_extractor(name).extract(ARTICLE_HTML, "https://example.com/fox")
    assert "quick brown fox jumps over the lazy dog" in " ".join(text.split())


def test_main_content_baselines_drop_the_footer():
    for name in ("trafilatura", "readability"):
        assert "All rights reserved" not in get_extractor(name).extract(ARTICLE_HTML, None), name


def test_html_to_markdown_ignores_links_and_images_and_does_not_wrap():
    long_paragraph = "word " * 200
    markdown = html_to_markdown(
        f'<h2>Head</h2><p>See <a href="https://x.org/a">the docs</a> <img src="i.png" alt="pic"> {long_paragraph}</p>'
    )
    assert "## Head" in markdown
    assert "the docs" in markdown
    assert "https://x.org" not in markdown
    assert "i.png" not in markdown and "pic" not in markdown
    # bodywidth=0: the long paragraph stays on one line.
    assert max(len(line) for line in markdown.splitlines()) > 900


class _Flaky(Extractor):
    registry_name = "flaky"

    def extract(self, html: str, url: str | None) -> str:
        if "boom" in html:
            raise RuntimeError("exploded")
        return html.upper()


def _page(page_id: str, html: str, **kwargs) -> BenchPage:
    return BenchPage(
        id=page_id,
        url=None,
        html=html,
        ground_truth=kwargs.pop("ground_truth", None),
        format="text",
        **kwargs,
    )


def test_extractor_exception_becomes_an_empty_output_and_an_error():
    outcomes = _Flaky().extract_pages([_page("a", "ok"), _page("b", "boom"), _page("c", "fine")])
    assert [o.outputs["flaky"] for o in outcomes] == ["OK", "", "FINE"]
    assert outcomes[0].error is None
    assert outcomes[1].error == "RuntimeError: exploded"
    assert all(o.seconds >= 0 for o in outcomes)


# --- dripper:<labeler> with a fake dripper.pipeline ----------------------------------------------------


def test_dripper_scores_two_views_and_passes_ground_truth(fake_core):
    extractor = get_extractor("dripper:oracle")
    assert extractor.output_names() == ("dripper:oracle/md", "dripper:oracle/html2text")
    pages = [
        _page("full", "<p>x</p>", ground_truth="the truth"),
        _page("snip", "<p>y</p>", with_snippets=("first", "second"), without_snippets=("bad",)),
    ]
    outcomes = extractor.extract_pages(pages)

    assert fake_core == [
        {"ids": ["full", "snip"], "gts": ["the truth", "first\nsecond"], "labeler": "oracle"}
    ]
    assert outcomes[0].outputs["dripper:oracle/md"] == "# MD full"
    html_view = outcomes[0].outputs["dripper:oracle/html2text"]
    assert "# HTML full" in html_view and "link text" in html_view and "/x" not in html_view
    assert outcomes[1].error is None
    assert outcomes[1].info["extractor"] == "dripper:oracle"


def test_dripper_single_view(fake_core):
    extractor = get_extractor("dripper:trafilatura/md")
    assert extractor.output_names() == ("dripper:trafilatura/md",)
    (outcome,) = extractor.extract_pages([_page("p", "<p>x</p>")])
    assert list(outcome.outputs) == ["dripper:trafilatura/md"]
    assert fake_core[0]["labeler"] == "trafilatura"


def test_dripper_failing_batch_is_retried_page_by_page(fake_core):
    extractor = get_extractor("dripper:oracle")
    outcomes = extractor.extract_pages([_page("a", "<p>a</p>"), _page("b", "crash"), _page("c", "<p>c</p>")])
    assert [o.error for o in outcomes] == [None, "RuntimeError: batch crashed", None]
    assert outcomes[1].outputs == {"dripper:oracle/md": "", "dripper:oracle/html2text": ""}
    assert outcomes[2].outputs["dripper:oracle/md"] == "# MD c"
    assert len(fake_core) == 4  # one batch call, then three single-page calls


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("dripper", "needs a labeler"),
        ("dripper:oracle/pdf", "unknown view 'pdf'"),
        ("dripper:/md", "empty labeler"),
    ],
)
def test_dripper_bad_specs(fake_core, spec, message):
    with pytest.raises(ValueError, match=message):
        get_extractor(spec)


def test_outcome_defaults():
    outcome = ExtractionOutcome({"x": "y"}, 0.5)
    assert outcome.error is None and outcome.info == {}


def test_article_text_fixture_is_in_html():
    # Guards the fixtures the tests above rely on.
    assert ARTICLE_TEXT in ARTICLE_HTML


def test_dripper_pages_go_in_batches_of_batch_size(fake_core):
    extractor = get_extractor("dripper:oracle", batch_size=2)
    outcomes = extractor.extract_pages([_page(str(i), f"<p>{i}</p>") for i in range(5)])
    assert [call["ids"] for call in fake_core] == [["0", "1"], ["2", "3"], ["4"]]
    assert [o.outputs["dripper:oracle/md"] for o in outcomes] == [f"# MD {i}" for i in range(5)]


def test_dripper_without_the_core_fails_when_built_with_a_hint(monkeypatch):
    import dripper

    monkeypatch.setitem(sys.modules, "dripper.pipeline", None)  # None in sys.modules → ImportError
    monkeypatch.delattr(dripper, "pipeline", raising=False)  # set once the real module was imported
    with pytest.raises(ImportError, match=r"'dripper:oracle' needs dripper\.pipeline\.extract_batch"):
        get_extractor("dripper:oracle")
