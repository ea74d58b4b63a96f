"""Behaviour of the simplifier on small pages, each case a rule of the upstream format or one of our fixes."""

from __future__ import annotations

import re

from dripper_core.simplify import SimplifyOptions, simplify_html


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
