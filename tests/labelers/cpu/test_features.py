"""Block features: deterministic, finite, and the same for a page and its twin in another script."""

from __future__ import annotations

import numpy as np
import pytest

from dripper.labelers.cpu.features import (
    CONTEXT_FEATURE_NAMES,
    FEATURE_NAMES,
    class_tokens,
    context_features,
    page_features,
)
from dripper.simplify import simplify_html

PAGE = """<html><head><title>{title}</title></head><body>
<div class="site-header"><ul class="main-menu"><li><a href="/">{menu1}</a></li><li><a href="/b">{menu2}</a></li>
<li><a href="/c">{menu3}</a></li></ul></div>
<div id="content"><article class="post">
<h1 class="entry-title">{title}</h1>
<p>{para1}</p>
<p>{para2}</p>
</article>
<div class="comments"><p>{comment}</p></div></div>
<aside class="sidebar"><h3>{related}</h3><ul><li><a href="/x">{menu1}</a></li><li><a href="/y">{menu2}</a></li></ul></aside>
<div class="footer">© 2024 {menu3}</div>
</body></html>"""

ENGLISH = {
    "title": "Rivers of the north",
    "menu1": "Home",
    "menu2": "News",
    "menu3": "Contact",
    "para1": "The northern rivers freeze every winter. Fishermen wait for the ice to break, and boats stay "
    "on the shore until April.",
    "para2": "In spring the water rises quickly. Villages along the banks prepare sandbags, and the roads are "
    "closed for weeks.",
    "comment": "Great article, thanks!",
    "related": "Related",
}
CHINESE = {
    "title": "北方的河流",
    "menu1": "首页",
    "menu2": "新闻",
    "menu3": "联系",
    "para1": "北方的河流每年冬天都会结冰。渔民们等待冰面破裂，船只一直停在岸边，直到四月才重新下水。",
    "para2": "春天，河水迅速上涨。沿岸的村庄准备沙袋，道路会封闭好几个星期，居民们只能绕道而行。",
    "comment": "好文章，谢谢！",
    "related": "相关",
}
RUSSIAN = {
    "title": "Реки севера",
    "menu1": "Главная",
    "menu2": "Новости",
    "menu3": "Контакты",
    "para1": "Северные реки замерзают каждую зиму. Рыбаки ждут, когда сломается лёд, и лодки стоят на "
    "берегу до апреля.",
    "para2": "Весной вода быстро поднимается. Деревни на берегах готовят мешки с песком, а дороги закрыты "
    "неделями.",
    "comment": "Отличная статья, спасибо!",
    "related": "Похожие",
}


def _features(words: dict):
    page = simplify_html(PAGE.format(**words), "t")
    return page, page_features(page)


def _column(name: str) -> int:
    return FEATURE_NAMES.index(name)


def test_shape_names_and_finite():
    page, features = _features(ENGLISH)
    assert features.values.shape == (page.n_blocks, len(FEATURE_NAMES))
    assert features.values.dtype == np.float32
    assert np.isfinite(features.values).all()
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)
    assert features.containers.shape[0] == page.n_blocks
    context = context_features(features, np.linspace(0, 1, page.n_blocks))
    assert context.shape == (page.n_blocks, len(CONTEXT_FEATURE_NAMES))
    assert np.isfinite(context).all()


def test_deterministic():
    _, first = _features(ENGLISH)
    _, second = _features(ENGLISH)
    assert np.array_equal(first.values, second.values)
    assert np.array_equal(first.containers, second.containers)
    assert np.array_equal(first.signatures, second.signatures)


def _block(page, text_start: str) -> int:
    return next(i for i, block in enumerate(page.blocks) if block.text.startswith(text_start))


@pytest.mark.parametrize("words", [CHINESE, RUSSIAN], ids=["zh", "ru"])
def test_language_agnostic(words):
    """The same page in another script: same segmentation, same structural features, and the text
    statistics tell running text from links alike."""
    english, english_features = _features(ENGLISH)
    other, other_features = _features(words)
    assert [block.tag for block in english.blocks] == [block.tag for block in other.blocks]
    structural = [
        i
        for i, name in enumerate(FEATURE_NAMES)
        if name.startswith(("tag_", "kw_", "anc_", "depth", "page_n_", "signature_count"))
        or name in ("position", "n_links", "n_list_items", "best_container_inside", "after_first_h1")
    ]
    assert np.array_equal(english_features.values[:, structural], other_features.values[:, structural])
    for page, features, words_used in ((english, english_features, ENGLISH), (other, other_features, words)):
        paragraph = _block(page, words_used["para1"][:6])
        menu = _block(page, words_used["menu1"])
        values = features.values
        assert values[paragraph, _column("sentence_punct_share")] > 0
        assert values[paragraph, _column("dense")] == 1.0
        assert values[paragraph, _column("link_share")] == 0.0
        assert values[menu, _column("link_share")] > 0.9
        assert values[menu, _column("dense")] == 0.0
        assert values[paragraph, _column("kw_content")] > 0
        assert values[menu, _column("kw_nav")] > 0
        assert values[paragraph, _column("best_container_inside")] == 1.0
        assert values[menu, _column("best_container_inside")] == 0.0
    zh_paragraph = _block(other, words["para1"][:6])
    if words is CHINESE:
        assert other_features.values[zh_paragraph, _column("cjk_share")] > 0.9


def test_class_tokens_split_compounds_and_camel_case():
    assert class_tokens("postContent main_area-2 navBar") == ["post", "content", "main", "area", "nav", "bar"]


def test_page_without_blocks():
    page = simplify_html("<html><body><script>var x = 1;</script></body></html>", "empty")
    features = page_features(page)
    assert features.values.shape == (page.n_blocks, len(FEATURE_NAMES))
    assert context_features(features, np.zeros(page.n_blocks)).shape[0] == page.n_blocks


def test_same_features_from_the_serialised_mapping_view():
    """The data plane's extract stage re-parses the mapping HTML of its shards: same features."""
    from dripper.types import SimplifiedPage

    page, features = _features(ENGLISH)
    stored = SimplifiedPage(
        doc_id=page.doc_id,
        simplified_html=page.simplified_html,
        blocks=page.blocks,
        mapping_html=page.mapping_markup(),
    )
    assert np.array_equal(page_features(stored).values, features.values)


TEASERS = """<html><head><title>Harbour opens</title></head><body>
<nav class="menu"><a href="/">Home</a> <a href="/news">News</a></nav>
<main><article class="story"><h1>Harbour opens</h1>
<div itemprop="articleBody">
<p>The new harbour opened on Monday, after six years of work, and the first ferries docked at noon.</p>
<p>Fishermen, traders and families came to watch, and the mayor thanked the workers by name.</p>
<p>The old quay, built in 1890, will become a museum; its cranes stay where they stood.</p>
</div></article>
<section class="related">{cards}</section>
<section class="comments">
<div class="comment"><p>Finally, after all these years of waiting, we have a harbour again in town.</p>
<div class="comment"><p>Agreed, although the parking near the quay is still far too small for the crowds.</p></div></div>
</section></main></body></html>"""
CARD = (
    '<div class="card"><h3><a href="/s{n}">Another story about the coast, number {n}</a></h3>'
    "<p>A short teaser line of the story.</p></div>"
)


def test_structure_features_see_cards_comments_and_the_article_body():
    page = simplify_html(TEASERS.format(cards="".join(CARD.format(n=n) for n in range(5))), "teasers")
    values = page_features(page).values
    article = _block(page, "The new harbour")
    card = _block(page, "Another story about the coast, number 2")
    reply = _block(page, "Agreed")
    first_comment = _block(page, "Finally")
    # schema.org body markup, and the page marks one
    assert values[article, _column("item_body")] == 1.0 and values[card, _column("item_body")] == 0.0
    assert (values[:, _column("page_has_item_body")] == 1.0).all()
    # five sibling cards of one template; the article's paragraphs are three of one template
    assert values[card, _column("repeat_max_log")] == pytest.approx(np.log(5))
    assert values[card, _column("link_title")] == 1.0 and values[article, _column("link_title")] == 0.0
    assert values[card, _column("c2_link_titles")] == pytest.approx(np.log1p(5))  # the cards' section
    assert values[article, _column("c2_link_titles")] == 0.0
    # a reply nests one comment template inside another
    assert values[reply, _column("nested_repeats")] >= 1 > values[first_comment, _column("nested_repeats")]
    # the Readability-style candidate is the article body; the cards lie past its end
    assert values[article, _column("in_candidate")] > 0 and values[card, _column("in_candidate")] == 0
    assert values[card, _column("after_candidate")] > 0 == values[article, _column("after_candidate")]
    assert 0 < values[article, _column("candidate_text_share")] < 1


def test_context_features_place_blocks_against_the_main_run():
    page = simplify_html(TEASERS.format(cards=CARD.format(n=1)), "teasers")
    features = page_features(page)
    article = [_block(page, start) for start in ("The new harbour", "Fishermen", "The old quay")]
    assert min(article) > 0
    p = np.zeros(page.n_blocks)
    p[article] = 0.9
    context = context_features(features, p)
    before = context[:, CONTEXT_FEATURE_NAMES.index("main_before")]
    after = context[:, CONTEXT_FEATURE_NAMES.index("main_after")]
    assert np.all(np.diff(before) >= 0) and np.all(np.diff(after) <= 0)
    last = page.n_blocks - 1
    assert before[last] == pytest.approx(1.0) and after[last] == 0.0
    assert before[0] == 0.0 and after[0] == pytest.approx(1.0)


def test_context_features_weigh_comments_against_the_text_outside_them():
    page = simplify_html(TEASERS.format(cards=""), "teasers")
    features = page_features(page)
    article = [_block(page, start) for start in ("The new harbour", "Fishermen", "The old quay")]
    comments = [_block(page, start) for start in ("Finally", "Agreed")]
    p = np.zeros(page.n_blocks)
    p[article + comments] = 1.0
    context = context_features(features, p)
    outside = context[:, CONTEXT_FEATURE_NAMES.index("main_before_outside_comments")]
    share = context[:, CONTEXT_FEATURE_NAMES.index("page_comment_main_share")]
    chars = features.chars
    article_share = chars[article].sum() / chars[article + comments].sum()
    # under an article, a comment has all of the article's text before it; the article has none
    assert outside[comments[0]] == pytest.approx(article_share) and outside[article[0]] == 0.0
    assert share[0] == pytest.approx(1 - article_share)
    # a page whose likely text is all in the comments (a thread): nothing outside them, all of it inside
    p[article] = 0.0
    context = context_features(features, p)
    assert context[comments[1], CONTEXT_FEATURE_NAMES.index("main_before_outside_comments")] == 0.0
    assert context[0, CONTEXT_FEATURE_NAMES.index("page_comment_main_share")] == pytest.approx(1.0)


POST = '<div class="post"><p>Post {n}: the valve still leaks after the repair, and the manual says nothing.</p></div>'
FORUM = (
    """<html><head><title>Valve leaks</title></head><body><div class="thread">{posts}</div></body></html>"""
)


def test_group_features_tell_replies_under_an_article_from_the_posts_of_a_forum():
    cards = "".join(CARD.format(n=n) for n in range(5))
    article_page = simplify_html(TEASERS.format(cards=cards), "teasers")
    article_values = page_features(article_page).values
    card = _block(article_page, "Another story about the coast, number 3")
    article = _block(article_page, "The new harbour")
    # the cards are one group of five, after the article's text, and the candidate (the article) is not in it
    assert article_values[card, _column("group_repeat_log")] == pytest.approx(np.log(5))
    assert 0 < article_values[card, _column("group_text_share")] < 1
    assert article_values[card, _column("text_before_group_share")] > 0.2
    assert article_values[card, _column("candidate_in_group")] == 0.0
    # the article's paragraphs repeat a template without class words: not a group
    assert article_values[article, _column("group_repeat_log")] == 0.0
    forum_page = simplify_html(FORUM.format(posts="".join(POST.format(n=n) for n in range(4))), "forum")
    forum_values = page_features(forum_page).values
    post = _block(forum_page, "Post 2")
    # a forum's posts are the page: the group holds all its text, and the candidate lies inside it
    assert forum_values[post, _column("group_repeat_log")] == pytest.approx(np.log(4))
    assert forum_values[post, _column("group_text_share")] == pytest.approx(1.0)
    assert forum_values[post, _column("text_before_group_share")] == 0.0
    assert forum_values[post, _column("candidate_in_group")] == pytest.approx(1.0)


def test_taxonomy_classes_do_not_name_the_element():
    tagged = '<article class="post type-post hentry category-product-reviews tag-comment-moderation">'
    page = simplify_html(
        f"<html><body>{tagged}<p>{ENGLISH['para1']}</p></article>"
        f'<div class="comments"><p>{ENGLISH["para2"]}</p></div></body></html>',
        "tagged",
    )
    values = page_features(page).values
    body, comment = _block(page, "The northern"), _block(page, "In spring")
    # "reviews" and "comment" here are the post's tags, not what the article is; the real comment box is
    assert values[body, _column("kw_comment")] == 0.0 < values[body, _column("kw_content")]
    assert values[comment, _column("kw_comment")] > 0
