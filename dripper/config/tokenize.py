"""The tokenize stage's config: the tokenizer and the end-of-document token."""

from __future__ import annotations

from dripper.config.settings import StageConfig, setting


class TokenizeStageConfig(StageConfig):
    """``corpus/`` → ``tokens/`` (Megatron ``.bin``/``.idx``).

    Attributes:
        tokenizer: A local ``tokenizer.json`` or its folder (empty: no tokens).
        eos_token: Appended to each document (empty: nothing).
    """

    stage = "tokenize"
    form_prefix = "tokenize_"
    form_section = "Refinement"

    tokenizer: str | None = setting(
        None,
        "Local tokenizer.json (or its folder) for the Megatron tokens; empty: no tokens",
        title="Tokenizer",
        prefixed=False,
        env="DRIPPER_TOKENIZER",
    )
    eos_token: str = setting(
        "<|endoftext|>", "Token appended to each document (empty: none)", title="End-of-document token"
    )
