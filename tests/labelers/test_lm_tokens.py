"""Token-level answer semantics (vLLM's structured outputs) and label confidences."""

from __future__ import annotations

import random

import pytest

from dripper.labelers.lm_common import stop_token_ids
from dripper.labelers.lm_prompts import PromptRenderer
from dripper.labelers.lm_tokens import AnswerAutomaton, TokenVocabulary, label_margins, token_bytes_table
from dripper.prompt import answer_format


@pytest.fixture(scope="module")
def vocabulary(tiny_tokenizer):
    return TokenVocabulary(token_bytes_table(tiny_tokenizer, 151_936), stop_token_ids(tiny_tokenizer))


@pytest.mark.parametrize("format_name", ["compact", "json"])
def test_automaton_masks_equal_xgrammar(tiny_tokenizer, vocabulary, format_name):
    """Our token-level semantics are vLLM's (xgrammar): the same allowed set at every step of random answers."""
    xgr = pytest.importorskip("xgrammar")
    import numpy as np

    renderer = PromptRenderer(tiny_tokenizer, answer_format(format_name))
    regex = renderer.answer_regex(14)
    compiled = xgr.GrammarCompiler(
        xgr.TokenizerInfo.from_huggingface(tiny_tokenizer, vocab_size=151_936)
    ).compile_regex(regex)
    automaton = AnswerAutomaton(regex, vocabulary)
    rng = random.Random(7)
    for _ in range(3):
        matcher, bitmask = xgr.GrammarMatcher(compiled), xgr.allocate_token_bitmask(1, 151_936)
        state = automaton.start
        while True:
            matcher.fill_next_token_bitmask(bitmask)
            bits = np.unpackbits(bitmask[0].numpy().view(np.uint8), bitorder="little")[:151_936]
            allowed = automaton.allowed(state)
            assert set(np.nonzero(bits)[0].tolist()) == set(allowed)
            if automaton.finished(state):
                assert matcher.accept_token(tiny_tokenizer.eos_token_id)
                break
            text_tokens = [
                t
                for t in allowed
                if vocabulary.token_bytes[t] and vocabulary.token_bytes[t].strip(b" \t\n\r\x0b\x0c\xc2\xa0")
            ]
            token = rng.choice(text_tokens or list(allowed))
            assert matcher.accept_token(token)
            state = automaton.advance(state, token)


def test_automaton_forces_only_single_choices(vocabulary, tiny_tokenizer):
    automaton = AnswerAutomaton(r"<answer>\s*1(main|other)12(main|other)\s*</answer>", vocabulary)
    state = automaton.start
    for token in tiny_tokenizer("<answer>1main", add_special_tokens=False)["input_ids"]:
        state = automaton.advance(state, token)
    one, two = tiny_tokenizer.convert_tokens_to_ids(["1", "2"])
    assert automaton.allowed(state) == (one,)  # forced: digits are single tokens in Qwen's vocabulary
    state = automaton.advance(state, one)
    assert automaton.allowed(state) == (two,)
    state = automaton.advance(state, two)
    words = {vocabulary.token_bytes[t] for t in automaton.allowed(state)}
    assert {b"m", b"ma", b"main", b"o", b"other"} <= words  # partial label tokens are choices too
    assert automaton.advance(state, tiny_tokenizer.convert_tokens_to_ids("<")) is None


def test_label_margins_from_candidates():
    fmt = answer_format("compact")
    chosen = [b"<answer>", b"1", b"ma", b"in", b"2", b"other", b"</answer>"]
    candidates = [
        {b"<answer>": 0.0},
        {b"1": 0.0},
        {b"ma": -0.2, b"m": -1.0, b"other": -2.5, b"o": -3.0},
        {b"in": 0.0},
        {b"2": 0.0},
        {b"other": -0.1, b"main": -0.7},
        {b"</answer>": 0.0},
    ]
    assert label_margins(fmt, chosen, candidates, 2) == pytest.approx([2.3, -0.6])
    assert label_margins(fmt, chosen, candidates, 3) is None
