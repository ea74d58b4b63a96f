"""Prompts exactly as the released weights expect them (v1.1 compact, v1.0 JSON), and page windows."""

from __future__ import annotations

from dripper.labelers.lm_prompts import JSON_FORCED_PREFIX, PromptRenderer, window_html
from dripper.prompt import answer_format, build_prompt


def test_compact_prompt_is_templated_twice(tiny_tokenizer):
    renderer = PromptRenderer(tiny_tokenizer, answer_format("compact"))
    prompt = renderer.render('<p _item_id="1">x</p>')
    inner = build_prompt('<p _item_id="1">x</p>', "short_compact")
    assert prompt == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        f"<|im_start|>user\n<|im_start|>user\n{inner}<|im_end|>\n<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert renderer.answer_regex(2) == r"<answer>\s*1(main|other)2(main|other)\s*</answer>"


def test_json_prompt_is_raw_with_the_forced_think_close(tiny_tokenizer):
    renderer = PromptRenderer(tiny_tokenizer, answer_format("json"))
    prompt = renderer.render('<p _item_id="1">x</p>')
    assert prompt == build_prompt('<p _item_id="1">x</p>', "v0") + JSON_FORCED_PREFIX
    # v1.0's state machine forced the </think> token and "\n\n": the same two ids end the prompt.
    assert renderer.encode(prompt)[-2:] == tiny_tokenizer.convert_tokens_to_ids(["</think>", "ĊĊ"])
    assert renderer.answer_regex(2) == r'\{"1":"(main|other)","2":"(main|other)"\}'


def test_one_window_renders_the_page_exactly(sample_pages):
    for page in sample_pages:
        pieces = [block.simplified_html for block in page.blocks]
        assert window_html(pieces, 1) == page.simplified_html
