"""ROUGE-5 on jieba tokens, Markdown normalisation and snippet scoring."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dripper.eval.metrics import (
    SnippetCounts,
    normalize_markdown,
    prepare_ground_truth,
    prepare_reference,
    rouge_n,
    score_page,
    score_snippets,
    tokenize,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


# --- tokenisation ----------------------------------------------------------------------------------------


def test_tokenize_keeps_each_whitespace_character_as_a_token():
    assert tokenize("Hello  world,\nNew") == ["Hello", " ", " ", "world", ",", "\n", "New"]


def test_tokenize_segments_chinese_into_words():
    assert tokenize("我爱北京天安门") == ["我", "爱", "北京", "天安门"]


def test_jieba_initialisation_is_silent():
    # jieba prints "Building prefix dict…" to stderr on first use unless silenced.
    code = "from dripper.eval.metrics import tokenize; assert tokenize('北京天安门')"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


# --- ROUGE-5 edge cases and hand-computed values ----------------------------------------------------------


def test_identical_texts_score_one():
    text = "The quick brown fox jumps over the lazy dog."
    assert rouge_n(text, text).f1 == 1.0


@pytest.mark.parametrize(("prediction", "reference"), [("", ""), ("  \n", "\t"), ("", " ")])
def test_both_blank_after_strip_score_one(prediction, reference):
    score = rouge_n(prediction, reference)
    assert (score.precision, score.recall, score.f1) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize(
    ("prediction", "reference"),
    [("", "some real content here and more"), ("some real content here and more", "   ")],
)
def test_one_blank_side_scores_zero(prediction, reference):
    assert rouge_n(prediction, reference).f1 == 0.0


def test_fewer_than_five_tokens_scores_zero_even_when_identical():
    # "alpha beta" is 3 tokens (the space counts): no 5-grams on either side.
    assert rouge_n("alpha beta", "alpha beta").f1 == 0.0


def test_five_tokens_is_enough_for_one_ngram():
    assert rouge_n("alpha beta gamma", "alpha beta gamma").f1 == 1.0


def test_hand_computed_partial_overlap():
    # 7 tokens each → 3 five-grams each; the first two are shared: P = R = F1 = 2/3.
    score = rouge_n("alpha beta gamma epsilon", "alpha beta gamma delta")
    assert score.precision == pytest.approx(2 / 3)
    assert score.recall == pytest.approx(2 / 3)
    assert score.f1 == pytest.approx(2 / 3)


def test_overlap_is_a_multiset_intersection():
    # Reference: 1 five-gram; prediction: 7 five-grams, the reference's twice → overlap min(1, 2) = 1.
    score = rouge_n("one two three one two three", "one two three")
    assert score.precision == pytest.approx(1 / 7)
    assert score.recall == 1.0
    assert score.f1 == pytest.approx(2 * (1 / 7) / (1 / 7 + 1))


def test_no_lowercasing():
    assert rouge_n("Alpha beta gamma", "alpha beta gamma").f1 == 0.0


def test_whitespace_layout_changes_the_raw_score():
    assert rouge_n("alpha beta gamma delta", "alpha  beta gamma delta").f1 < 1.0


def test_prepared_reference_gives_the_same_score():
    reference = "The quick brown fox jumps over the lazy dog."
    prediction = "A quick brown fox jumps over the lazy cat."
    assert rouge_n(prediction, prepare_reference(reference)) == rouge_n(prediction, reference)


# --- normalisation ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("# Title\n\n## Sub  title", "Title Sub title"),
        ("- one\n* two\n+ three\n• four", "one two three four"),
        ("1. first\n2) second\n10. tenth", "first second tenth"),
        ("> quoted\n> > nested - dash", "quoted nested - dash"),
        ("> - quoted bullet", "quoted bullet"),
        ("para\n\n---\n\n* * *\n___\nend", "para end"),
        ("**bold** and _it_ and `code` and ***both***", "bold and it and code and both"),
        ("| a | b |\n|---|---|\n| 1 | 2 |", "a b --- --- 1 2"),
        ("```python\nx = 1\n```", "python x = 1"),
        ("  lots \t of\n\n\nspace  ", "lots of space"),
        ("#hashtag stays", "#hashtag stays"),
        ("2024 was a year", "2024 was a year"),
        (r"1\. escaped \* stays", r"1\. escaped \ stays"),
    ],
)
def test_normalize_markdown(markdown, expected):
    assert normalize_markdown(markdown) == expected


def test_normalised_score_ignores_markdown_markup():
    reference = "The quick brown fox jumps over the lazy dog while the farmer watches."
    prediction = "## The quick **brown fox** jumps\nover the lazy dog while the *farmer* watches."
    scores = score_page(prediction, reference)
    assert scores["rouge_f1_norm"] == 1.0
    assert scores["rouge_f1"] < 1.0


# --- snippets ---------------------------------------------------------------------------------------------


def test_snippets_match_through_markup_and_line_breaks():
    prediction = "## Heading\n\nThe **quick brown**\nfox jumps.\n\n- Footer link"
    counts = score_snippets(prediction, ["quick brown fox", "absent text"], ["Footer link", "not here"])
    assert counts == SnippetCounts(true_positives=1, false_negatives=1, false_positives=1, true_negatives=1)


def test_snippets_that_normalise_to_nothing_are_ignored():
    assert score_snippets("anything", ["  ", "**"], [""]).total == 0


def test_snippet_micro_precision_recall_f1():
    total = SnippetCounts(3, 1, 0, 2) + SnippetCounts(1, 0, 2, 0)  # tp=4 fn=1 fp=2
    precision, recall, f1 = total.precision_recall_f1()
    assert precision == pytest.approx(4 / 6)
    assert recall == pytest.approx(4 / 5)
    assert f1 == pytest.approx(2 * (4 / 6) * (4 / 5) / (4 / 6 + 4 / 5))


def test_snippet_scores_are_zero_without_hits():
    assert SnippetCounts().precision_recall_f1() == (0.0, 0.0, 0.0)


# --- one page ---------------------------------------------------------------------------------------------


def test_score_page_full_text_only():
    scores = score_page("alpha beta gamma epsilon", "alpha beta gamma delta")
    assert set(scores) == {"rouge_p", "rouge_r", "rouge_f1", "rouge_f1_norm"}
    assert scores["rouge_f1"] == pytest.approx(2 / 3)


def test_score_page_snippet_only():
    scores = score_page("keep this text", None, ["keep this"], ["drop"])
    assert "rouge_f1" not in scores
    assert (scores["snip_tp"], scores["snip_fn"], scores["snip_fp"], scores["snip_tn"]) == (1, 0, 0, 1)
    assert scores["snip_f1"] == 1.0


def test_score_page_with_prepared_ground_truth_scores_both_kinds():
    prepared = prepare_ground_truth("alpha beta gamma delta", ["gamma"], ["omega"])
    scores = score_page("alpha beta gamma delta omega", prepared)
    assert scores["rouge_r"] == 1.0
    assert scores["snip_fp"] == 1
