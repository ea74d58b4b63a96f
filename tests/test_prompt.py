from __future__ import annotations

import re

import pytest

from dripper.prompt import AnswerParseError, answer_format, build_prompt


def test_short_compact_prompt_ends_with_the_html():
    prompt = build_prompt('<p _item_id="1">x</p>')
    assert prompt.startswith('As an HTML expert, classify elements with "_item_id"')
    assert prompt.endswith('Input HTML:\n<p _item_id="1">x</p>')
    assert "{_item_id}{category}" in prompt


def test_v0_prompt_ends_with_no_think():
    assert build_prompt("<p>x</p>", "v0").endswith("/no_think\n")
    with pytest.raises(ValueError, match="unknown prompt version"):
        build_prompt("x", "v9")


@pytest.mark.parametrize("name", ["compact", "json"])
def test_regex_admits_exactly_well_formed_answers(name):
    fmt = answer_format(name)
    labels = [True, False, True]
    answer = fmt.format_labels(labels)
    assert re.fullmatch(fmt.regex(3), answer)
    assert not re.fullmatch(fmt.regex(2), answer)
    assert fmt.parse(answer, 3) == labels


def test_compact_regex_allows_whitespace_inside_the_wrapper_only():
    fmt = answer_format("compact")
    assert re.fullmatch(fmt.regex(2), "<answer>\n1main2other </answer>")
    assert not re.fullmatch(fmt.regex(2), "<answer>1main 2other</answer>")


def test_parser_is_tolerant_of_form_strict_on_ids():
    compact = answer_format("compact")
    assert compact.parse("1main2other", 2) == [True, False]
    with pytest.raises(AnswerParseError, match="missing"):
        compact.parse("<answer>1main</answer>", 2)
    with pytest.raises(AnswerParseError, match="both"):
        compact.parse("1main1other2main", 2)
    json_format = answer_format("json")
    assert json_format.parse('</think>\n\n{"1":"main","2":"other"', 2) == [True, False]  # truncated
    assert json_format.parse('{"1": "other", "2": "main"}', 2) == [False, True]
    with pytest.raises(AnswerParseError):
        json_format.parse("no labels at all", 1)
