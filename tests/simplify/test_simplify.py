"""Behaviour of the simplifier on small pages, each case a rule of the upstream format or one of our fixes."""

from __future__ import annotations

import re

from dripper.prompt import build_prompt
from dripper.simplify import SimplifyOptions, simplify_html


def items(html: str, **options) -> list[str]:
    page = simplify_html(html, options=SimplifyOptions(**options))
    return [block.simplified_html for block in page.blocks]


def test_ids_are_contiguous_in_document_order_and_empty_blocks_get_none():
    page = simplify_html(
        "<html><body><div><p>one</p><p>  </p><h2>two</h2><p><img src='x.png'></p></div></body></html>"
    )
    assert [block.item_id for block in page.blocks] == [1, 2, 3]
    assert re.findall(r'_item_id="(\d+)"', page.simplified_html) == ["1", "2", "3"]
    assert page.simplified_html.startswith('<html><head><meta charset="utf-8"></head><body>')


def test_attributes_pruned_to_class_id_and_image_src_alt():
    (item,) = items(
        '<body><div><p class="c" id="i" style="x" data-x="1"><a href="/u" title="t">link</a> '
        '<img src="data:image/png;base64,AAA" alt="a"><img src=" s.png " alt="b" width="3"></p></div></body>'
    )
    assert item == '<p class="c" id="i" _item_id="1"><a>link</a> <img alt="a"><img src="s.png" alt="b"></p>'


def test_long_text_cut_at_500_chars_with_ellipsis_but_block_text_is_whole():
    text = "word " * 200
    page = simplify_html(f"<body><div><p>{text}<b>after</b></p></div></body>")
    (item,) = [block.simplified_html for block in page.blocks]
    # As upstream, elements after the cut point inside the cut node stay, emptied.
    assert item == f'<p _item_id="1">{text[:500]}...<b></b></p>'
    assert page.blocks[0].text == " ".join(["word"] * 200) + " after"


def test_tables_text_not_cut_and_data_table_is_one_block():
    cells = "".join(f"<tr><td>{'x' * 300}</td></tr>" for _ in range(3))
    page = simplify_html(f"<body><div><table>{cells}</table></div></body>")
    assert page.n_blocks == 1
    assert page.blocks[0].simplified_html.count("x" * 300) == 3


def test_layout_table_cells_are_blocks():
    page = simplify_html("<body><table><tr><td><div>left</div></td><td><p>right</p></td></tr></table></body>")
    assert [block.text for block in page.blocks] == ["left", "right"]


def test_content_list_is_one_block_shown_as_first_ellipsis_last():
    (item,) = items("<body><div><ul><li>a</li><li>b</li><li>c</li><li>d</li></ul></div></body>")
    assert item == '<ul _item_id="1"><li>a</li><span>...</span><li>d</li></ul>'


def test_hidden_and_chrome_removed_from_model_view():
    html = (
        '<body><nav><p>menu</p></nav><div style="display:none"><p>hidden</p></div>'
        "<details><summary>S</summary><p>closed</p></details><div><p>kept</p><script>x</script></div></body>"
    )
    assert [block for block in items(html)] == [
        '<summary _item_id="1">S</summary>',
        '<p _item_id="2">kept</p>',
    ]


def test_text_directly_under_body_becomes_an_item_unlike_upstream():
    html = "<body>Hello <b>world</b><div><p>x</p></div>after</body>"
    assert items(html, keep_body_text=False) == ['<p _item_id="1">x</p>']
    assert items(html) == [
        '<div _item_id="1">Hello<b>world</b></div>',
        '<p _item_id="2">x</p>',
        '<div _item_id="3">after</div>',
    ]


def test_inline_runs_are_wrapped_in_the_mapping_view():
    page = simplify_html("<body><div><h1>Title</h1><p>p</p>tail text<br>after br</div></body>")
    mapping = page.mapping_markup()
    assert '<cc-alg-uc-text _item_id="3">tail text<br></cc-alg-uc-text>' in mapping
    assert '<cc-alg-uc-text _item_id="4">after br</cc-alg-uc-text>' in mapping
    assert [block.text for block in page.blocks] == ["Title", "p", "tail text", "after br"]


def test_select_markup_flattened_like_the_training_parser():
    (item,) = items("<body><div><select><option>1 <span>Person</span></option></select></div></body>")
    assert item == '<select _item_id="1"><option>1 Person</option></select>'


def test_blank_document_has_no_blocks():
    assert simplify_html("   ").n_blocks == 0
    assert simplify_html("<html><body><div> </div></body></html>").n_blocks == 0


def test_non_latin_text_survives():
    page = simplify_html(
        '<html><head><meta charset="gb2312"></head><body><div><p>中文内容，测试。</p></div></body></html>'
    )
    assert page.blocks[0].text == "中文内容，测试。"
    assert "中文内容" in page.mapping_root().xpath("string(//p)")


def test_cc_select_reaches_blocks_whatever_its_case_and_without_lexbor(monkeypatch):
    # The annotation check first searches lexbor's markup (attribute names in lower case) for the name; when
    # lexbor fails, the raw page is parsed and only the tree is searched.
    html = '<html><body><p>annotated <span CC-Select="1">text</span></p><p>other</p></body></html>'

    def annotations(page) -> list[str | None]:
        return [element.get("cc-select") for element in page.mapping_tree.iter() if element.get("_item_id")]

    assert annotations(simplify_html(html)) == ["1", None]

    import selectolax.lexbor

    def failing_parser(*args, **kwargs):
        raise RuntimeError("lexbor failed")

    monkeypatch.setattr(selectolax.lexbor, "LexborHTMLParser", failing_parser)
    assert annotations(simplify_html(html)) == ["1", None]


# Character references to control characters, as upstream (mineru-html 1.1.2, checked against it in
# test_conformance.py) gives them: an item whose own text or attributes hold one is dropped (even an
# attribute pruned later); deeper ones become U+FFFD; NUL and lone surrogates are U+FFFD from the start
# (HTML5 parsing) and DEL is XML-compatible: both kept.
_REFERENCES_PAGE = (
    "<html><body><div>"
    "<p>dec &#26; text</p><p>hex &#x1A; text</p><p title='t&#26;'>attr dec</p><p class='a&#x1a;'>attr hex</p>"
    "<p>nul &#0; text</p><p class='n&#x0;'>nul attr</p>"
    "<p>vt &#11; text</p><p id='v&#xB;'>vt attr</p>"
    "<p>del &#127; text</p><p class='d&#x7F;'>del attr</p>"
    "<p>sur &#xD800; text</p><p id='s&#55296;'>sur attr</p>"
    "<div><span>deep &#26; &#x0b; text</span> tail <b class='q&#1;'>b</b></div>"
    "<p>plain</p></div></body></html>"
)
_XML_INCOMPATIBLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def test_character_references_to_control_characters_give_upstream_items():
    page = simplify_html(_REFERENCES_PAGE)
    assert [block.simplified_html for block in page.blocks] == [
        '<p _item_id="1">nul \ufffd text</p>',
        '<p class="n\ufffd" _item_id="2">nul attr</p>',
        '<p _item_id="3">del \x7f text</p>',
        '<p class="d\x7f" _item_id="4">del attr</p>',
        '<p _item_id="5">sur \ufffd text</p>',
        '<p id="s\ufffd" _item_id="6">sur attr</p>',
        '<div _item_id="7"><span>deep \ufffd \ufffd text</span> tail <b class="q\ufffd">b</b></div>',
        '<p _item_id="8">plain</p>',
    ]
    assert page.stats["xml_incompatible_items"] == 6
    assert not _XML_INCOMPATIBLE.search(page.simplified_html)
    assert not _XML_INCOMPATIBLE.search(build_prompt(page.simplified_html))
    # The mapping view keeps the characters as parsed (as upstream's does); the ids sit where upstream's do.
    assert '<p>dec \x1a text</p><p>hex \x1a text</p><p title="t\x1a">' in page.mapping_markup()
    assert page.blocks[6].text == "deep \x1a text tail b"


def test_character_references_decoded_by_libxml2_when_lexbor_fails(monkeypatch):
    import selectolax.lexbor

    def failing_parser(*args, **kwargs):
        raise RuntimeError("lexbor failed")

    monkeypatch.setattr(selectolax.lexbor, "LexborHTMLParser", failing_parser)
    page = simplify_html(_REFERENCES_PAGE)  # libxml2 decodes the references into the tree too
    assert page.stats["xml_incompatible_items"] > 0
    assert page.blocks[-1].simplified_html == f'<p _item_id="{page.n_blocks}">plain</p>'
    assert not _XML_INCOMPATIBLE.search(page.simplified_html)


def test_run_whose_inline_tail_ends_in_a_whitespace_control_character_is_dropped():
    # str.strip() takes \x0b, \x0c and \x1c-\x1f for whitespace, but upstream extends the element's whole
    # tail from Python, which lxml refuses: the run goes.
    for character in ("\x0b", "&#12;", "&#x1F;"):
        html = f"<body><div><p>x</p>lead <b>b</b> tail{character}<p>keep</p></div></body>"
        assert items(html) == ['<p _item_id="1">x</p>', '<p _item_id="2">keep</p>'], character


def test_noncharacter_in_a_kept_attribute_or_a_cut_text_drops_the_item():
    # U+FFFE/U+FFFF survive upstream's round trip; upstream sets kept attributes and cut texts again from
    # Python, which lxml refuses, so the item goes. Elsewhere the character stays.
    for nonchar, character in (("\ufffe", "\ufffe"), ("&#xFFFE;", "\ufffe"), ("&#xFFFF;", "\uffff")):
        for dropped in (
            f'<span class="q{nonchar}">z</span>',
            f'<span title="t" id="q{nonchar}">z</span>',
            f'<img alt="q{nonchar}" src="a.png">',
            f"<span>x{nonchar}{'y' * 600}</span>",
        ):
            html = f"<body><div><div>{dropped} tail</div><p>keep</p></div></body>"
            assert items(html) == ['<p _item_id="1">keep</p>'], dropped
        html = f'<body><div><div><span title="t{nonchar}">x{nonchar}y</span></div><p>k</p></div></body>'
        assert items(html)[0] == f'<div _item_id="1"><span>x{character}y</span></div>', nonchar


def test_page_with_character_references_is_labelled_not_sent_to_the_fallback():
    from dripper.pipeline import extract, prepare_page
    from dripper.types import Page

    html = _REFERENCES_PAGE.replace("<p>plain</p>", "<p>" + "plain words of the article. " * 20 + "</p>")
    prepared = prepare_page(Page(doc_id="page", html=html.encode()))
    assert prepared.problem is None
    assert prepared.simplified.n_blocks == 8
    result = extract(html, labeler="cpu")
    assert result.extractor == "dripper:cpu"
    assert "plain words of the article." in result.markdown
