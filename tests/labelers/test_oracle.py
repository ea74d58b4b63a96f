"""The ``oracle`` labeler: hand-made pages with a known ground truth, labels asserted block by block."""

import pytest

from dripper.labelers import LabelRequest, build_labeler
from dripper.labelers.oracle import OracleLabeler, OracleOptions, align_blocks, alignment_tokens
from dripper.simplify import SimplifyOptions, simplify_html
from dripper.types import Page

NEWS_PAGE = """<html><head><title>Example News</title></head><body>
<div class="top"><div><a href="/">Home</a></div>
<div><a href="/a">Rangers win the cup after dramatic overtime</a></div><div><a href="/b">Weather</a></div></div>
<div class="story"><h1>Rangers win the cup after dramatic overtime</h1>
<div class="byline">By Jane Doe</div>
<p>The Rangers won the championship on Tuesday night after a dramatic overtime goal by the captain.</p>
<h2>Reaction</h2>
<p>Fans poured into the streets of the city to celebrate the first title in decades. Read more</p>
<p>The mayor promised a parade for the team next week, and said the whole city would come home to cheer.</p>
</div>
<div class="side"><h3>Related</h3>
<p>Rangers win the cup after dramatic overtime: The Rangers won the championship on Tuesday night after a
dramatic overtime goal.</p></div>
<div class="foot"><p>Copyright 2024 Example News. All rights reserved. Share this story with friends at home.</p></div>
</body></html>"""

NEWS_BODY = """The Rangers won the championship on Tuesday night after a dramatic overtime goal by the captain.

Reaction

Fans poured into the streets of the city to celebrate the first title in decades.

The mayor promised a parade for the team next week, and said the whole city would come home to cheer."""

NEWS_TITLE = "Rangers win the cup after dramatic overtime"


def label(html: str, ground_truth: str | None) -> dict[str, bool]:
    """Labels of a page through the registered labeler, keyed by block text (texts in these pages are unique
    except where a test says otherwise)."""
    simplified = simplify_html(html)
    labeler = build_labeler("oracle")
    (result,) = labeler([LabelRequest(Page(doc_id="t", html=html, ground_truth=ground_truth), simplified)])
    assert result.failure is None
    return {block.text: flag for block, flag in zip(simplified.blocks, result.main, strict=True)}


def labels_in_order(html: str, ground_truth: str) -> list[tuple[str, bool]]:
    simplified = simplify_html(html)
    alignment = align_blocks(ground_truth, [block.text for block in simplified.blocks])
    return [(block.text, flag) for block, flag in zip(simplified.blocks, alignment.main, strict=True)]


def test_navigation_duplicate_of_the_headline_loses_to_the_article_heading():
    labels = labels_in_order(NEWS_PAGE, NEWS_TITLE + "\n\n" + NEWS_BODY)
    assert labels == [
        ("Home", False),
        (NEWS_TITLE, False),  # the navigation link
        ("Weather", False),
        (NEWS_TITLE, True),  # the <h1>
        ("By Jane Doe", False),
        (
            "The Rangers won the championship on Tuesday night after a dramatic overtime goal by the captain.",
            True,
        ),
        ("Reaction", True),
        ("Fans poured into the streets of the city to celebrate the first title in decades. Read more", True),
        (
            "The mayor promised a parade for the team next week, and said the whole city would come home to cheer.",
            True,
        ),
        ("Related", False),
        (
            "Rangers win the cup after dramatic overtime: The Rangers won the championship on Tuesday night after "
            "a dramatic overtime goal.",
            False,  # the teaser repeats title and lede: their ground truth is already taken
        ),
        ("Copyright 2024 Example News. All rights reserved. Share this story with friends at home.", False),
    ]


def test_title_follows_the_ground_truth():
    without_title = labels_in_order(NEWS_PAGE, NEWS_BODY)
    assert [flag for text, flag in without_title if text == NEWS_TITLE] == [False, False]
    with_title = labels_in_order(NEWS_PAGE, NEWS_TITLE + "\n\n" + NEWS_BODY)
    assert [flag for text, flag in with_title if text == NEWS_TITLE] == [False, True]


def test_short_block_needs_its_place_in_the_ground_truth():
    labels = label(NEWS_PAGE, NEWS_BODY)
    # "Reaction" is a whole line of the ground truth between two main paragraphs; "Home" occurs in the ground
    # truth ("come home to cheer") but not where the navigation sits.
    assert labels["Reaction"] is True
    assert labels["Home"] is False
    assert labels["Weather"] is False


def test_partial_blocks_need_enough_coverage():
    html = """<html><body>
    <p>Alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma.</p>
    <p>Subscribe now to our newsletter for daily updates, exclusive offers, prizes and much more fun stuff
    delivered straight to your inbox every single morning: alpha beta gamma.</p>
    <p>Tau upsilon phi chi psi omega are the last letters. Continue reading</p>
    </body></html>"""
    ground_truth = (
        "Alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma.\n\n"
        "Tau upsilon phi chi psi omega are the last letters."
    )
    labels = label(html, ground_truth)
    assert labels[
        "Alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma."
    ]
    assert labels["Tau upsilon phi chi psi omega are the last letters. Continue reading"]
    assert not any(flag for text, flag in labels.items() if text.startswith("Subscribe"))


def test_cjk_text_aligns_by_character():
    html = """<html><body>
    <div class="menu"><div><a href="/">首页</a></div><div><a href="/n">新闻</a></div></div>
    <h1>北京举办国际科技博览会</h1>
    <p>本届博览会吸引了来自三十多个国家的企业参展，展示了人工智能、新能源和生物医药等领域的最新成果。</p>
    <p>主办方表示，博览会期间还将举行多场论坛，邀请专家学者共同探讨科技创新的未来方向。</p>
    <div class="related"><p>热门推荐：明天天气晴朗，适合出行。</p></div>
    <p>版权所有 © 2024 新闻网</p>
    </body></html>"""
    ground_truth = (
        "北京举办国际科技博览会\n\n"
        "本届博览会吸引了来自三十多个国家的企业参展，展示了人工智能、新能源和生物医药等领域的最新成果。\n\n"
        "主办方表示，博览会期间还将举行多场论坛，邀请专家学者共同探讨科技创新的未来方向。"
    )
    labels = label(html, ground_truth)
    assert labels["北京举办国际科技博览会"]
    assert labels[
        "本届博览会吸引了来自三十多个国家的企业参展，展示了人工智能、新能源和生物医药等领域的最新成果。"
    ]
    assert labels["主办方表示，博览会期间还将举行多场论坛，邀请专家学者共同探讨科技创新的未来方向。"]
    assert not labels["首页"]
    assert not labels["新闻"]
    assert not labels["热门推荐：明天天气晴朗，适合出行。"]
    assert not labels["版权所有 © 2024 新闻网"]


def test_markdown_ground_truth_with_links_lists_and_headings():
    html = """<html><body>
    <div class="crumbs"><a href="/">Docs</a> / <a href="/install">Install</a></div>
    <h2>Install</h2>
    <p>Install the package with <a href="https://pip.pypa.io">pip</a> into a fresh virtual environment first.</p>
    <ol><li>Create the environment</li><li>Activate it</li><li>Run the installer</li></ol>
    <p>Was this page helpful? Yes No</p>
    </body></html>"""
    ground_truth = (
        "## Install\n\n"
        "Install the package with [pip](https://pip.pypa.io) into a fresh virtual environment first.\n\n"
        "1. Create the environment\n2. Activate it\n3. Run the installer\n"
    )
    labels = label(html, ground_truth)
    assert labels["Install"]
    assert labels["Install the package with pip into a fresh virtual environment first."]
    list_text = next(text for text in labels if text.startswith("Create the environment"))
    assert labels[list_text]
    assert not labels["Docs / Install"]
    assert not labels["Was this page helpful? Yes No"]


def test_out_of_order_content_is_recovered():
    # The byline sits after the body in the DOM but first in the ground truth.
    html = """<html><body>
    <p>Scientists have found a new species of frog in the rain forests of the northern mountains this spring.</p>
    <p>The tiny frog is smaller than a fingernail and sings at a pitch too high for most people to hear.</p>
    <div class="meta">Written by Maria Lopez, science correspondent for the daily paper</div>
    <div class="more">More stories from our science desk every week in your inbox</div>
    </body></html>"""
    ground_truth = (
        "Written by Maria Lopez, science correspondent for the daily paper\n\n"
        "Scientists have found a new species of frog in the rain forests of the northern mountains this spring.\n"
        "The tiny frog is smaller than a fingernail and sings at a pitch too high for most people to hear."
    )
    labels = label(html, ground_truth)
    assert labels["Written by Maria Lopez, science correspondent for the daily paper"]
    assert not labels["More stories from our science desk every week in your inbox"]
    assert sum(labels.values()) == 3


def test_empty_ground_truth_labels_everything_other():
    labels = label(NEWS_PAGE, "  \n")
    assert not any(labels.values())


def test_missing_ground_truth_fails_the_page():
    simplified = simplify_html(NEWS_PAGE)
    labeler = OracleLabeler()
    (result,) = labeler([LabelRequest(Page(doc_id="t", html=NEWS_PAGE), simplified)])
    assert result.main is None
    assert result.failure == "no ground truth"
    assert labeler.stats.failures["no ground truth"] == 1


def test_confidence_is_block_coverage():
    simplified = simplify_html(NEWS_PAGE)
    (result,) = OracleLabeler()(
        [LabelRequest(Page(doc_id="t", html=NEWS_PAGE, ground_truth=NEWS_BODY), simplified)]
    )
    by_text = dict(zip((block.text for block in simplified.blocks), result.confidence, strict=True))
    assert by_text["Weather"] == 0.0
    assert by_text[
        "Fans poured into the streets of the city to celebrate the first title in decades. Read more"
    ] == (
        pytest.approx(15 / 17)  # all but "read more"
    )


def test_batch_labels_pages_independently_and_deterministically():
    simplified = simplify_html(NEWS_PAGE)
    requests = [
        LabelRequest(Page(doc_id="a", html=NEWS_PAGE, ground_truth=NEWS_BODY), simplified),
        LabelRequest(Page(doc_id="b", html=NEWS_PAGE), simplified),
        LabelRequest(Page(doc_id="c", html=NEWS_PAGE, ground_truth=NEWS_BODY), simplified),
    ]
    first, missing, third = OracleLabeler().label_batch(requests)
    assert first.main == third.main and sum(first.main) == 4
    assert missing.main is None


def test_page_without_blocks():
    alignment = align_blocks("Some ground truth text here.", [])
    assert alignment.main == [] and alignment.token_f1 == 0.0


def test_alignment_tokens():
    assert alignment_tokens("The Plain DealerSun News") == ["the", "plain", "dealer", "sun", "news"]
    assert alignment_tokens("COVID-19 in 2020s, ＡＢＣ!") == ["covid", "19", "in", "2020", "s", "abc"]
    assert alignment_tokens("北京abc") == ["北", "京", "abc"]
    assert alignment_tokens("“Quoted” — text…") == ["quoted", "text"]


def test_options_are_validated_and_reach_the_labeler():
    with pytest.raises(ValueError, match="anchor_size"):
        OracleOptions(anchor_size=0)
    assert build_labeler("oracle", anchor_size=4).options.anchor_size == 4


def test_blocks_without_text_fail_instead_of_labelling_everything_other():
    simplified = simplify_html(NEWS_PAGE, options=SimplifyOptions(block_text=False))
    (result,) = OracleLabeler()(
        [LabelRequest(Page(doc_id="t", html=NEWS_PAGE, ground_truth=NEWS_BODY), simplified)]
    )
    assert result.main is None
    assert "block_text=True" in result.failure
