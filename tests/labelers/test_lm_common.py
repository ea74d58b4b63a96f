"""Planning pages into context windows, assembling labels from window answers, locating model files."""

from __future__ import annotations

import pytest

from dripper.labelers.lm_common import CallPlanner, LMAnswer, resolve_model_dir
from dripper.labelers.lm_prompts import PromptRenderer, window_html
from dripper.prompt import answer_format


def test_windows_renumber_ids_and_cover_every_block(tiny_tokenizer, sample_pages):
    from dripper.labelers.base import LabelRequest
    from dripper.types import Page

    page = max(sample_pages, key=lambda page: page.n_blocks)
    planner = CallPlanner(PromptRenderer(tiny_tokenizer, answer_format("compact")), 1024)
    calls, failures = planner.plan([LabelRequest(Page("p", ""), page)])
    if failures:  # a single block too long for 1024 tokens: the page fails, with the reason
        assert "alone needs" in failures[0]
        return
    assert len(calls) > 1
    assert [call.first_block for call in calls] == [0] + [
        sum(c.n_blocks for c in calls[:i]) for i in range(1, len(calls))
    ]
    assert sum(call.n_blocks for call in calls) == page.n_blocks
    for call in calls:
        assert len(call.prompt_ids) + call.max_tokens <= 1024
        assert (
            f'_item_id="{call.n_blocks}"' in call.prompt
            and f'_item_id="{call.n_blocks + 1}"' not in call.prompt
        )
    answers = [
        LMAnswer(text=answer_format("compact").format_labels([i % 3 == 0 for i in range(call.n_blocks)]))
        for call in calls
    ]
    (labels,) = planner.assemble(1, calls, answers, failures)
    expected = [i % 3 == 0 for call in calls for i in range(call.n_blocks)]
    assert labels.main == expected


def test_a_block_longer_than_the_context_fails_the_page(tiny_tokenizer):
    from dripper.labelers.base import LabelRequest
    from dripper.types import Block, Page, SimplifiedPage

    long_text = " ".join(f"word{i}" for i in range(900))
    pieces = ['<p _item_id="1">short</p>', f'<p _item_id="2">{long_text}</p>']
    page = SimplifiedPage(
        "p", window_html(pieces, 1), [Block(i + 1, "p", piece, "") for i, piece in enumerate(pieces)]
    )
    planner = CallPlanner(PromptRenderer(tiny_tokenizer, answer_format("compact")), 1024)
    calls, failures = planner.plan([LabelRequest(Page("p", ""), page)])
    assert calls == [] or all(call.first_block == 0 for call in calls)
    assert "block 2 alone needs" in failures[0]
    assert planner.assemble(1, calls, [], failures)[0].failure.startswith("block 2 alone needs")


def test_unknown_model_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="huggingface-cli download no-such/model --revision abc"):
        resolve_model_dir("no-such/model", "abc")
