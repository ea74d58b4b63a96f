from __future__ import annotations

import pytest

from dripper.reconstruct import main_html
from dripper.simplify import simplify_html

PAGE = (
    "<html><head><title>t</title></head><body><div class='menu'><p>Home</p></div>"
    "<article><h1 class='x'>Headline</h1><p>First <b>para</b>.<script>track()</script>"
    "<span style='display: none !important'>HIDDEN</span> end.</p>"
    "<div class='lead'><span>Lead</span><nav>NAV</nav></div>"
    "<p>Second para</p>loose text<br>after break</article><footer><p>Copyright</p></footer></body></html>"
)


def labels_for(page, wanted: set[str]) -> list[bool]:
    return [block.text in wanted for block in page.blocks]


def test_main_html_is_the_labelled_subset_without_internal_attributes():
    page = simplify_html(PAGE)
    html = main_html(page, labels_for(page, {"Headline", "First para. end.", "Second para"}))
    assert "Headline" in html and "Second para" in html
    assert "Home" not in html and "Copyright" not in html and "loose text" not in html
    assert "_item_id" not in html and "cc-alg-uc-text" not in html and "data-dripper-ref" not in html
    assert 'class="x"' in html  # original attributes of kept elements stay


def test_hidden_script_and_nav_inside_a_main_block_do_not_leak():
    page = simplify_html(PAGE)
    html = main_html(page, labels_for(page, {"First para. end.", "Lead"}))
    assert "First <b>para</b>." in html and " end." in html and "<span>Lead</span>" in html
    for leaked in ("HIDDEN", "NAV", "track()"):
        assert leaked not in html


def test_inline_runs_and_their_break_come_back():
    page = simplify_html(PAGE)
    html = main_html(page, labels_for(page, {"loose text", "after break"}))
    assert "loose text<br>after break" in html


def test_no_main_block_gives_empty_output_and_label_count_is_checked():
    page = simplify_html(PAGE)
    assert main_html(page, [False] * page.n_blocks) == ""
    with pytest.raises(ValueError, match="labels"):
        main_html(page, [True])


def test_mapping_view_reparsed_from_text_keeps_non_latin_text():
    page = simplify_html(
        '<html><head><meta charset="gb2312"></head><body><div><p>中文内容</p></div></body></html>'
    )
    page.mapping_html, page.mapping_tree = page.mapping_markup(), None  # as after a parquet round trip
    assert "中文内容" in main_html(page, [True])


def test_main_blocks_inside_noscript_or_hidden_containers_reach_the_markdown():
    from dripper.labelers.base import BlockLabeler, Labels
    from dripper.pipeline import extract

    class AllMain(BlockLabeler):
        name = "all-main"

        def label_batch(self, requests):
            return [Labels([True] * r.simplified.n_blocks) for r in requests]

    html = (
        "<html><body><noscript><div><p>Inside noscript text.</p></div></noscript>"
        "<div hidden><p>Inside hidden text.</p></div><atom:entry><p>Namespaced text.</p></atom:entry></body></html>"
    )
    markdown = extract(html, labeler=AllMain(), fallback=None).markdown
    for text in ("Inside noscript text.", "Inside hidden text.", "Namespaced text."):
        assert text in markdown


def test_breaks_between_kept_blocks_come_back_from_inside_other_elements():
    """The <br> recall walks only subtrees that hold a kept block or a <br>: a <br> wrapped in an inline
    element between two main blocks is still found, the breaks next to nothing kept are not."""
    page = simplify_html(
        "<html><body><div><p>First paragraph of text.</p><span><br></span><br>"
        "<p>Second paragraph of text.</p></div><div><em><br></em><p>Menu entry</p></div></body></html>"
    )
    html = main_html(page, labels_for(page, {"First paragraph of text.", "Second paragraph of text."}))
    assert "First paragraph of text.</p><span><br></span><br><p>Second paragraph of text." in html
    assert "<em>" not in html and "Menu entry" not in html
