"""Main HTML → Markdown (dripper.markdown): one test per feature, exact output for small inputs."""

from __future__ import annotations

import logging
import random

import pytest
from lxml import etree, html

from bench.markdown import HOSTILE_CHAIN_TAGS, HOSTILE_MARKUP, element_chain
from dripper.markdown import MarkdownOptions, html_to_markdown
from dripper.markdown_math import clean_tex


def md(markup: str, **options: object) -> str:
    return html_to_markdown(markup, **options)


# ---- blocks ---------------------------------------------------------------------------------------------


def test_headings_all_levels():
    markup = "".join(f"<h{n}> Level   {n} </h{n}>" for n in range(1, 7))
    assert (
        md(markup)
        == "# Level 1\n\n## Level 2\n\n### Level 3\n\n#### Level 4\n\n##### Level 5\n\n###### Level 6"
    )


def test_heading_text_needs_no_escaping_emphasis_or_br():
    assert md("<h2>1. <b>Intro</b><br>to it</h2>") == "## 1. Intro to it"


def test_paragraphs_whitespace_and_blank_lines():
    markup = "<div>\n  <p>  One\n\t two  </p>\n\n<p></p><p>&nbsp;</p>  <p>Three</p></div>"
    assert md(markup) == "One two\n\nThree"


def test_inline_whitespace_across_elements():
    assert md("<p>a <span> b </span> <i></i> c</p>") == "a b c"


def test_br_is_a_newline_without_trailing_spaces():
    assert md("<p>one <br> two<br><br><br>three</p>") == "one\ntwo\n\nthree"


def test_br_hard_breaks_option():
    assert md("<p>one<br>two<br><br>three</p>", hard_breaks=True) == "one  \ntwo\n\nthree"


def test_blockquote_nested_and_separated():
    markup = "<p>Before</p><blockquote><p>Quoted</p><blockquote>Inner</blockquote><p>More</p></blockquote>"
    assert md(markup) == "Before\n\n> Quoted\n>\n> > Inner\n>\n> More"


def test_horizontal_rule():
    assert md("<p>a</p><hr><p>b</p>") == "a\n\n* * *\n\nb"


def test_unordered_and_ordered_lists():
    markup = "<ul><li>a</li><li>b</li></ul><ol start='3'><li>c</li><li value='7'>d</li><li>e</li></ol>"
    assert md(markup) == "- a\n- b\n\n3. c\n7. d\n8. e"


def test_nested_lists_and_multi_paragraph_items():
    markup = (
        "<ol><li>one<ul><li>a<ol><li>deep</li></ol></li></ul></li>"
        "<li><p>two</p><p>second para</p></li></ol>"
        "<ul><li>x</li><ul><li>stray nested</li></ul></ul>"
    )
    assert md(markup) == ("1. one\n   - a\n     1. deep\n2. two\n\n   second para\n\n- x\n  - stray nested")


def test_definition_list():
    markup = "<dl><dt>Term</dt><dd>Meaning one<br>continued</dd><dt>Other</dt><dd>Two</dd></dl>"
    assert md(markup) == "Term\n: Meaning one\n  continued\nOther\n: Two"


# ---- tables ---------------------------------------------------------------------------------------------


def test_simple_table_with_th_header_and_pipe_escape():
    markup = (
        "<table><thead><tr><th>Name</th><th>a|b</th></tr></thead>"
        "<tbody><tr><td>x <b>bold</b></td><td><p>1</p></td></tr><tr><td>y</td></tr></tbody></table>"
    )
    assert md(markup) == "| Name | a\\|b |\n| --- | --- |\n| x **bold** | 1 |\n| y |  |"


def test_simple_table_first_row_is_header_without_th():
    markup = "<table><caption>Cap</caption><tr><td>a</td><td>b</td></tr><tr><td>1</td><td>2</td></tr></table>"
    assert md(markup) == "Cap\n\n| a | b |\n| --- | --- |\n| 1 | 2 |"


def test_complex_table_kept_as_clean_html():
    markup = (
        '<table class="t" style="x"><caption>Cap</caption><tr><th colspan="2" id="h">A &amp; B</th></tr>'
        '<tr><td rowspan="1" class="c">1 <b>b</b></td><td>2&lt;3</td></tr></table>'
    )
    assert md(markup) == (
        '<table>\n<caption>Cap</caption><tr><th colspan="2">A &amp; B</th></tr>\n'
        "<tr><td>1 b</td><td>2&lt;3</td></tr>\n</table>"
    )


def test_table_with_nested_data_table_and_header_is_html():
    markup = (
        "<table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>"
        "<table><tr><td>1</td><td>2</td></tr></table></td></tr></table>"
    )
    assert md(markup) == (
        "<table>\n<tr><th>k</th><th>v</th></tr>\n<tr><td>a</td><td><table>\n"
        "<tr><td>1</td><td>2</td></tr>\n</table></td></tr>\n</table>"
    )


def test_single_cell_and_single_column_tables_are_text():
    assert md("<table><tr><td><p>Only</p><p>cell</p></td></tr></table>") == "Only\n\ncell"
    assert md("<table><tr><td>row 1</td></tr><tr><td>row 2</td></tr></table>") == "row 1\n\nrow 2"


def test_layout_table_with_blocks_and_no_header_is_text():
    markup = "<table><tr><td><h2>Title</h2><ul><li>a</li></ul></td><td>Side</td></tr></table>"
    assert md(markup) == "## Title\n\n- a\n\nSide"


# ---- code -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("markup", "language"),
    [
        ('<pre><code class="language-python">{}</code></pre>', "python"),
        ('<pre class="lang-js">{}</pre>', "js"),
        ('<div class="highlight-rust notranslate"><div class="highlight"><pre>{}</pre></div></div>', "rust"),
        ('<div class="highlight highlight-source-go"><pre>{}</pre></div>', "go"),
        ("<pre>{}</pre>", ""),
    ],
)
def test_code_block_language_and_verbatim_content(markup, language):
    code = "def f(x):\n    # *not* a heading\n    return x_1 | 2\n\n\n"
    assert (
        md(markup.format(code)) == f"```{language}\ndef f(x):\n    # *not* a heading\n    return x_1 | 2\n```"
    )


def test_code_block_keeps_markup_lines_and_skips_line_numbers():
    markup = (
        '<pre><span class="lineno">1</span>a &lt;b&gt;<br><span class="lineno">2</span>  c</pre>'
        "<pre>1\n2\n3</pre>"
    )
    assert md(markup) == "```\na <b>\n  c\n```"


def test_code_block_fence_longer_than_content_backticks():
    assert md("<pre>```\nx\n```</pre>") == "````\n```\nx\n```\n````"


def test_nested_pre_wrapper_whitespace_is_not_code():
    assert md("<pre>\n      <pre>x = 1\ny = 2</pre>\n    </pre>") == "```\nx = 1\ny = 2\n```"


def test_inline_code_and_backtick_runs():
    markup = "<p>Run <code>ls  -l</code>, <kbd>a`b</kbd> and <code>`x`</code>.</p>"
    assert md(markup) == "Run `ls -l`, ``a`b`` and `` `x` ``."


def test_one_line_pre_inside_a_paragraph_is_inline_code():  # trafilatura's rendering of <code>
    assert md("<p>Use the <pre>Cow</pre> class.</p>") == "Use the `Cow` class."


def test_code_with_br_is_a_block():
    assert md("<p><code>a = 1<br>b = 2</code></p>") == "```\na = 1\nb = 2\n```"


# ---- math -----------------------------------------------------------------------------------------------


def test_mathml_presentation_to_latex():
    markup = (
        "<p>Let <math><mi>x</mi><mo>=</mo><mfrac><mn>1</mn><msup><mi>y</mi><mn>2</mn></msup></mfrac>"
        "<mo>+</mo><msqrt><msub><mi>α</mi><mi>i</mi></msub></msqrt><mo>+</mo><mroot><mi>z</mi><mn>3</mn>"
        "</mroot></math> hold.</p>"
    )
    assert md(markup) == "Let $x=\\frac{1}{y^2}+\\sqrt{\\alpha_i}+\\sqrt[3]{z}$ hold."


def test_mathml_scripts_over_under_text_and_tables():
    markup = (
        '<math display="block"><munderover><mo>∑</mo><mrow><mi>i</mi><mo>=</mo><mn>1</mn></mrow>'
        "<mi>n</mi></munderover><msubsup><mi>x</mi><mi>i</mi><mn>2</mn></msubsup><mo>≤</mo>"
        "<mover><mi>x</mi><mo>^</mo></mover><munder><mi>y</mi><mo>_</mo></munder><mtext>if ok</mtext>"
        "<mi>sin</mi><mi>θ</mi><mtable><mtr><mtd><mn>1</mn></mtd><mtd><mn>0</mn></mtd></mtr>"
        "<mtr><mtd><mn>0</mn></mtd><mtd><mn>1</mn></mtd></mtr></mtable></math>"
    )
    assert md(markup) == (
        "$$\n\\sum_{i=1}^n x_i^2\\leq\\hat{x}\\underline{y}\\text{if ok}\\sin\\theta"
        "\\begin{matrix}1 & 0 \\\\ 0 & 1\\end{matrix}\n$$"
    )


def test_mathml_prefers_tex_annotation():
    markup = (
        '<p>A <math xmlns="http://www.w3.org/1998/Math/MathML"><semantics><mrow><mi>x</mi></mrow>'
        '<annotation encoding="application/x-tex">{\\displaystyle x^{2}}</annotation></semantics></math>.</p>'
    )
    assert md(markup) == "A $x^{2}$."


def test_mathjax_scripts_inline_and_display_without_rendered_duplicates():
    markup = (
        '<p>Eq <span class="MathJax_Preview">a+b</span><span class="MathJax" id="MathJax-Element-1-Frame">'
        '<span class="math">a+b</span></span><script type="math/tex" id="MathJax-Element-1">a+b</script> and</p>'
        '<div class="MathJax_Display"><span class="MathJax">∫f</span></div>'
        '<script type="math/tex; mode=display">\\int f\\,dx</script>'
    )
    assert md(markup) == "Eq $a+b$ and\n\n$$\n\\int f\\,dx\n$$"


def test_mathjax3_container_uses_assistive_mathml():
    markup = (
        '<p>See <mjx-container class="MathJax" jax="CHTML" display="true"><mjx-math aria-hidden="true">'
        '<mjx-mi>x</mjx-mi></mjx-math><mjx-assistive-mml><math display="block"><msup><mi>x</mi><mn>2</mn>'
        "</msup></math></mjx-assistive-mml></mjx-container></p>"
    )
    assert md(markup) == "See\n\n$$\nx^2\n$$"


def test_inline_formulas_stand_apart_from_adjacent_words_and_each_other():
    # MathJax v3 pages put text right against the container: "<mjx-container>…</mjx-container>and".
    def inline(tex_name: str) -> str:
        return f'<mjx-container class="MathJax" jax="CHTML"><mjx-assistive-mml><math><mi>{tex_name}</mi></math></mjx-assistive-mml></mjx-container>'

    markup = f"<p>When{inline('a')}and {inline('k')}{inline('n')}, done ({inline('x')}).</p>"
    assert md(markup) == "When $a$ and $k$ $n$, done ($x$)."


def test_katex_inline_and_display_drop_html_rendering():
    def katex(tex: str) -> str:
        return (
            '<span class="katex"><span class="katex-mathml"><math><semantics><mrow><mi>z</mi></mrow>'
            f'<annotation encoding="application/x-tex">{tex}</annotation></semantics></math></span>'
            '<span class="katex-html" aria-hidden="true"><span class="base">z2</span></span></span>'
        )

    markup = f'<p>K {katex("z^2")} end</p><p><span class="katex-display">{katex("E=mc^2")}</span></p>'
    assert md(markup) == "K $z^2$ end\n\n$$\nE=mc^2\n$$"


def test_latex_images_by_class_and_wikipedia_math():
    markup = (
        '<p>So <img class="latex" src="https://s0.wp.com/latex.php?latex=a" alt="a+b" title="a+b"> done '
        '<span class="mwe-math-element"><span class="mwe-math-mathml-inline" style="display: none;">'
        '<math><mi>q</mi></math></span><img class="mwe-math-fallback-image-inline" alt="{\\displaystyle q}">'
        '</span>.</p><p><img class="photo" src="p.png" alt="x^2 photo"></p>'
    )
    assert md(markup) == "So $a+b$ done $q$."


def test_clean_tex_strips_delimiters_and_displaystyle():
    assert clean_tex("$$ x $$") == "x"
    assert clean_tex("\\(a\\)") == "a"
    assert clean_tex("{\\displaystyle {a}+{b}}") == "{a}+{b}"
    assert clean_tex("{\\displaystyle a}+{b}") == "{\\displaystyle a}+{b}"  # unbalanced wrapper: kept


# ---- links, images, dropped and hidden content ----------------------------------------------------------


def test_links_are_text_by_default_and_absolute_when_included():
    markup = '<p>See <a href="/docs/a b">the docs</a>, <a href="#top">top</a> and <a href="">x</a>.</p>'
    assert md(markup) == "See the docs, top and x."
    assert md(markup, include_links=True, url="https://ex.com/page/") == (
        "See [the docs](https://ex.com/docs/a%20b), top and x."
    )
    linked = '<p><a href="u">see [1]</a> <a href="v"><img src="i.png" alt="I"></a></p>'
    assert md(linked, include_links=True, include_images=True) == "[see \\[1\\]](u) [![I](i.png)](v)"


def test_images_dropped_by_default_and_included_on_request():
    markup = '<p>A <img src="i/p.png" alt="A [pic]"> <img src="data:image/png;base64,xx" alt="d"></p>'
    assert md(markup) == "A"
    assert md(markup, include_images=True, url="https://ex.com/") == "A ![A (pic)](https://ex.com/i/p.png)"


def test_scripts_styles_templates_and_form_controls_dropped():
    markup = (
        "<p>Keep<script>var x = 1;</script><style>p{}</style><noscript>ns</noscript>"
        "<template>tpl</template></p><form><label>Name</label><input value='v'><select><option>o</option>"
        "</select><textarea>t</textarea><button>Go</button></form>"
    )
    assert md(markup) == "Keep\n\nName"


def test_hidden_elements_dropped():
    markup = (
        '<p>A<span hidden>1</span><span aria-hidden="true">2</span><span style="color:red; display : none">3'
        '</span><span style="visibility:hidden">4</span><span aria-hidden="false">B</span></p>'
    )
    assert md(markup) == "AB"


def test_custom_wrapper_elements_are_transparent():
    markup = (
        "<p><cc-alg-uc-text>inline</cc-alg-uc-text> text</p><cc-alg-uc-text>bare <b>run</b></cc-alg-uc-text>"
    )
    assert md(markup) == "inline text\n\nbare **run**"


# ---- escaping and emphasis ------------------------------------------------------------------------------


def test_line_start_markers_are_escaped():
    markup = "<p># not a heading</p><p>- dash</p><p>+ plus</p><p>* star</p><p>1. one</p><p>2) two</p><p>&gt; gt</p>"
    assert (
        md(markup)
        == "\\# not a heading\n\n\\- dash\n\n\\+ plus\n\n\\* star\n\n1\\. one\n\n2\\) two\n\n\\> gt"
    )


def test_ordinary_text_is_not_littered_with_backslashes():
    text = "C# and #tag, 5 * 3 = 15, snake_case_name, $5 or $10, a-b, 2021 was [odd] (yes) +1 <x>"
    assert md(f"<p>{text.replace('<', '&lt;').replace('>', '&gt;')}</p>") == text


def test_emphasis_forming_pairs_are_escaped():
    assert (
        md("<p>*not italic* and _not either_ and 2*3*4</p>")
        == "\\*not italic\\* and \\_not either\\_ and 2\\*3\\*4"
    )


def test_emphasis_markup_and_option():
    markup = "<p>A<b> bold </b>and <i>it</i><em></em> and <strong><b>once</b></strong>.</p>"
    assert md(markup) == "A **bold** and *it* and **once**."
    assert md(markup, emphasis=False) == "A bold and it and once."
    assert html_to_markdown(markup, options=MarkdownOptions(emphasis=False)) == "A bold and it and once."


def test_block_inside_inline_span_keeps_text():
    assert md("<p><b>x<div>y</div>z</b></p>") == "x\n\ny\n\nz"


# ---- inputs and robustness ------------------------------------------------------------------------------


def test_full_document_and_element_input():
    doc = "<!DOCTYPE html><html><head><title>T</title><style>x</style></head><body><p>Body</p></body></html>"
    assert md(doc) == "Body"
    root = html.fromstring("<div><p>One</p><!-- c --><p>Two</p></div>")
    before = etree.tostring(root)
    assert html_to_markdown(root) == "One\n\nTwo"
    assert html_to_markdown(etree.ElementTree(root)) == "One\n\nTwo"
    assert etree.tostring(root) == before  # the caller's tree is not modified


@pytest.mark.parametrize("empty", ["", "   \n\t", None, b"", "<div> </div>", "<!-- only a comment -->"])
def test_empty_input(empty):
    assert html_to_markdown(empty) == ""


def test_encoding_declaration_control_chars_and_surrogates():
    assert md('<?xml version="1.0" encoding="utf-8"?><p>x</p>') == "x"
    assert md("<p>a\x00b\x01c\x7f</p>") == "abc"
    assert md("<p>x\ud800y</p>") == "x?y"  # a lone surrogate does not cut the text
    assert html_to_markdown("<p>é</p>".encode()) == "é"


@pytest.mark.parametrize("name", sorted(HOSTILE_MARKUP))
def test_hostile_markup_keeps_content(name):
    """Deep nesting and a huge flat paragraph convert whole; how fast is ``bench/markdown.py --hostile``."""
    markup, last_words = HOSTILE_MARKUP[name]
    out = md(markup)
    assert out.split()[-1] in last_words
    if markup.startswith("<p>word"):
        assert out.startswith("word word") and out.count("word") == 200_000 and out.endswith("x\n\nx")


@pytest.mark.parametrize("tag", HOSTILE_CHAIN_TAGS)
def test_deep_nesting_element_input(tag):
    root, _chain = element_chain(tag)
    assert "end" in html_to_markdown(root, include_links=True)


def test_binary_junk_and_tag_soup_never_raise(caplog):
    rng = random.Random(7)
    pieces = [
        "<p>", "</p>", "<li>", "<ul>", "<table>", "<td>", "<tr>", "<pre>", "<code>", "<b>", "</b>", "<math>",
        "<mi>", "<mfrac>", "<br>", "<blockquote>", "<h2>", "<a href='x'>", "*", "_", "#", "|", "`", "text",
        "&amp;", "&#0;", "<!--", "-->", "<script type='math/tex'>", "</script>", "<dl><dt>", "<dd>",
    ]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="dripper.markdown"):
        for _ in range(300):
            soup = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 60)))
            assert isinstance(md(soup, include_links=True, include_images=True), str)
            junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 400)))
            assert isinstance(html_to_markdown(junk), str)
            assert isinstance(md(junk.decode("latin-1")), str)
    assert not caplog.records  # no input fell back to the plain-text path


def test_output_has_no_trailing_spaces_or_stacked_blank_lines():
    markup = (
        "<div><p>a </p>\n\n<br><br><p> b<br> </p><ul><li><p>c </p><p></p></li></ul><pre>x  \n\n\n</pre></div>"
    )
    out = md(markup)
    assert out == "a\n\nb\n\n- c\n\n```\nx\n```"
    assert all(line == line.rstrip() for line in out.split("\n"))


def test_control_characters_of_a_tree_do_not_reach_the_markdown():
    """lxml's parser keeps ``&#26;`` and raw control characters in the tree the pipeline reconstructs."""
    from lxml import etree as lxml_etree

    tree = lxml_etree.fromstring(
        "<div><p>alpha &#26; beta&#11;</p><p>gamma&#1;</p></div>", lxml_etree.HTMLParser()
    )
    assert html_to_markdown(tree) == "alpha  beta\n\ngamma"
