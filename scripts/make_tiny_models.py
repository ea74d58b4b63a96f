"""Build Qwen's real tokenizer and tiny random-weight Qwen3/HunYuan models locally, with no model download.

Qwen's BPE ranks ship inside the ``dashscope`` wheel on PyPI (``dashscope/resources/qwen.tiktoken``); the
wheel is fetched once with ``pip download`` (a registry, not a model hub) and only that file is read. With
Qwen's pre-tokenizer regex and Qwen3's added tokens it becomes a Hugging Face fast tokenizer whose ids
equal the real Qwen3 tokenizer's, so prompt lengths in tests and benchmarks are the real ones.

Everything lands under ``.cache/`` in the repository (which ignores itself through ``.cache/.gitignore``):

- ``.cache/models/qwen-tokenizer``: the tokenizer alone (with a Qwen3-style chat template);
- ``.cache/models/tiny-qwen3``: a 2-layer Qwen3 (hidden 128, head_dim 64, vocab 151,936) with
  random weights, float32, for the tests (vLLM's CPU attention needs head_dim 64);
- ``.cache/models/tiny-hunyuan``: the same shape as a HunYuanDenseV1 (the architecture of the v1.1 weights,
  ``MinerU-HTML-v1.1-hunyuan0.5B-compact``): query/key RMSNorm after RoPE, RoPE with HunYuan's fixed NTK
  ``alpha``. It keeps Qwen's tokenizer (HunYuan's own is not obtainable without a model download), so its
  vocabulary is Qwen's, not HunYuan's 120,818.

Usage: ``python scripts/make_tiny_models.py [--cache DIR] [--force]``. Safe to rerun: existing outputs
are kept unless ``--force``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = REPO / ".cache"
DASHSCOPE_PIN = "dashscope==2.0.2"
TIKTOKEN_MEMBER = "dashscope/resources/qwen.tiktoken"
TOKENIZER_DIR = "models/qwen-tokenizer"
TINY_MODEL_DIR = "models/tiny-qwen3"
TINY_HUNYUAN_DIR = "models/tiny-hunyuan"

# Qwen2/Qwen3's pre-tokenizer: single digits, letters with one leading non-letter, punctuation runs.
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen3's added tokens from id 151,643 on: (content, special).
QWEN3_ADDED_TOKENS = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
]
QWEN_VOCAB_SIZE = 151_936
# The ChatML turns Qwen3's template renders for system/user/assistant messages, with its
# ``enable_thinking=False`` generation prompt (an empty think block). Tools are not needed here.
QWEN3_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


def _log(message: str) -> None:
    print(f"[make_tiny_models] {message}", file=sys.stderr)


def ensure_cache_dir(cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    ignore = cache / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# Built by scripts/make_tiny_models.py; never committed.\n*\n")
    return cache


def qwen_tiktoken_file(cache: Path) -> Path:
    """``qwen.tiktoken`` read out of the dashscope wheel (downloaded with pip once, then cached)."""
    target = cache / "qwen" / "qwen.tiktoken"
    if target.exists():
        return target
    wheels = cache / "wheels"
    found = sorted(wheels.glob("dashscope-*.whl")) if wheels.exists() else []
    if not found:
        _log(f"pip download {DASHSCOPE_PIN} --no-deps (Qwen's BPE ranks ship inside that wheel)")
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", DASHSCOPE_PIN, "--no-deps", "-q", "-d", str(wheels)],
            check=True,
        )
        found = sorted(wheels.glob("dashscope-*.whl"))
        if not found:
            raise SystemExit(f"pip download left no dashscope wheel in {wheels}")
    with zipfile.ZipFile(found[-1]) as wheel:
        data = wheel.read(TIKTOKEN_MEMBER)
    lines = data.splitlines()
    if len(lines) != 151_643:
        raise SystemExit(f"{found[-1].name}: {TIKTOKEN_MEMBER} has {len(lines)} ranks, expected 151,643")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    _log(f"qwen.tiktoken sha256 {hashlib.sha256(data).hexdigest()[:16]}…, {len(lines)} ranks")
    return target


def build_tokenizer(cache: Path, force: bool = False) -> Path:
    """Save Qwen3's tokenizer (fast, byte-level BPE) under ``cache/models/qwen-tokenizer``."""
    out = cache / TOKENIZER_DIR
    if (out / "tokenizer.json").exists() and not force:
        return out
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = qwen_tiktoken_file(cache)
    backend = TikTokenConverter(vocab_file=str(ranks), pattern=QWEN_PATTERN).converted()
    backend.normalizer = normalizers.NFC()  # as Qwen2/Qwen3's tokenizer.json
    for content, special in QWEN3_ADDED_TOKENS:
        token = AddedToken(content, normalized=False, special=special)
        if special:
            backend.add_special_tokens([token])
        else:
            backend.add_tokens([token])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=262_144,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = QWEN3_CHAT_TEMPLATE
    ids = tokenizer.convert_tokens_to_ids([content for content, _ in QWEN3_ADDED_TOKENS])
    if ids != list(range(151_643, 151_643 + len(QWEN3_ADDED_TOKENS))):
        raise SystemExit(f"added token ids are {ids[:3]}…, expected 151643…")
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    _log(f"tokenizer saved to {out} ({len(tokenizer)} tokens)")
    return out


def qwen3_config(hidden_size: int, layers: int, heads: int, kv_heads: int, intermediate: int, **extra):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=QWEN_VOCAB_SIZE,
        hidden_size=hidden_size,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=64 if hidden_size < 1024 else 128,
        max_position_embeddings=40_960,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=151_643,
        eos_token_id=151_645,
        **extra,
    )


def hunyuan_config(hidden_size: int, layers: int, heads: int, kv_heads: int, intermediate: int, **extra):
    """A HunYuanDenseV1 config as the released HunYuan-0.5B's (RoPE base 10,000 with NTK ``alpha`` 1000,
    RMSNorm eps 1e-5, query/key norms), with Qwen's vocabulary and special ids."""
    from transformers import HunYuanDenseV1Config

    return HunYuanDenseV1Config(
        vocab_size=QWEN_VOCAB_SIZE,
        hidden_size=hidden_size,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=64 if hidden_size < 1024 else 128,
        max_position_embeddings=32_768,
        # As the release's rope_scaling {"type": "dynamic", "alpha": 1000, "factor": 1}: a fixed base of
        # 10,000 * 1000 ** (d / (d - 2)) while positions stay below max_position_embeddings.
        rope_parameters={"rope_type": "dynamic", "rope_theta": 10_000.0, "alpha": 1000.0, "factor": 1.0},
        rms_norm_eps=1e-5,
        use_qk_norm=True,  # what vLLM's own HunYuan code reads; transformers applies the norms regardless
        tie_word_embeddings=True,
        bos_token_id=151_643,
        eos_token_id=151_645,
        pad_token_id=151_643,
        **extra,
    )


ARCHITECTURES = {"qwen3": qwen3_config, "hunyuan": hunyuan_config}


def causal_lm(config):
    """The transformers causal-LM class of ``config`` (Qwen3 or HunYuanDenseV1), unbuilt."""
    from transformers import HunYuanDenseV1ForCausalLM, Qwen3ForCausalLM

    return {"qwen3": Qwen3ForCausalLM, "hunyuan_v1_dense": HunYuanDenseV1ForCausalLM}[config.model_type]


def shape_label_preferences(
    model,
    tokenizer,
    constant: float = 1.0,
    penalty: float = 4.0,
    partial_labels: bool = True,
    digit_scale: float = 10.0,
) -> None:
    """Make a random model behave like a labeler in *structure*, not in judgement.

    Random weights loop on the whitespace the answer regex allows (``<answer>\\s*``) and give every block
    the same label. Three edits fix that, all in weights the architecture has:

    - a constant hidden dimension (0) in every embedding, which no layer writes to, is a bias handle for
      the LM head: whitespace-only tokens (U+00A0 and partial UTF-8 included) get ``-penalty``, the whole
      words ``main``/``other`` a small bonus (partial spellings still occur);
    - digit embeddings ×``digit_scale`` (10), so the hidden state where a label is chosen depends on the
      block id (a smaller scale: labels in longer runs, as a trained labeler's);
    - the label tokens' head rows ×5, so that dependence decides labels (they vary across blocks);
    - with ``partial_labels=False``, partial spellings (``m``, ``oth``…) get ``-penalty`` too, so labels are
      written as whole words, as a trained labeler writes them (the benchmark model).

    Needs untied embeddings.
    """
    import torch

    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    label_tokens = [
        tokenizer.convert_tokens_to_ids(t) for t in ("m", "ma", "mai", "main", "o", "ot", "oth", "other")
    ]
    digits = tokenizer.convert_tokens_to_ids(list("0123456789"))
    with torch.no_grad():
        embed[:, 0] = constant
        head[:, 0] = 0.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        # Every token decoded in one Rust call (151k Python decode calls took seconds); same texts.
        texts = tokenizer.backend_tokenizer.decode_batch(
            [[token_id] for token_id in range(len(tokenizer))], skip_special_tokens=False
        )
        texts = [text.replace("\ufffd", " ") for text in texts]
        blank = [token_id for token_id, text in enumerate(texts) if text and not text.strip()]
        head[torch.tensor(blank, device=head.device), 0] = -penalty
        embed[digits, 1:] *= digit_scale
        head[label_tokens, 1:] *= 5.0
        for word in ("main", "other"):
            head[tokenizer.convert_tokens_to_ids(word), 0] = penalty / 8
        if not partial_labels:
            for token_id in label_tokens:
                if tokenizer.convert_ids_to_tokens(token_id) not in ("main", "other"):
                    head[token_id, 0] = -penalty


def vary_query_key_norms(model, scale: float = 0.5) -> None:
    """Random per-channel weights in HunYuan's query/key RMSNorms (initialised to ones).

    With unit weights a per-head RMSNorm commutes with RoPE (a rotation of channel pairs keeps the RMS), so
    norms applied on the wrong side of RoPE would go unnoticed; uneven weights make the order matter.
    """
    import torch

    with torch.no_grad():
        for layer in model.model.layers:
            for norm in (layer.self_attn.query_layernorm, layer.self_attn.key_layernorm):
                norm.weight.mul_(1 + scale * torch.randn_like(norm.weight))


def build_tiny_model(
    cache: Path,
    tokenizer_dir: Path,
    name: str = TINY_MODEL_DIR,
    hidden_size: int = 128,
    layers: int = 2,
    seed: int = 0,
    initializer_range: float = 0.05,
    force: bool = False,
    architecture: str = "qwen3",
) -> Path:
    """A random-weight Qwen3 or HunYuanDenseV1 (``architecture``) with Qwen's vocabulary, saved with its
    tokenizer (float32)."""
    out = cache / name
    if (out / "config.json").exists() and not force:
        return out
    import torch
    from transformers import AutoTokenizer, GenerationConfig

    torch.manual_seed(seed)
    config = ARCHITECTURES[architecture](
        hidden_size,
        layers,
        heads=hidden_size // 64,
        kv_heads=1,
        intermediate=hidden_size * 2,
        initializer_range=initializer_range,
    )
    config.tie_word_embeddings = False
    config.dtype = torch.float32
    model = causal_lm(config)(config).eval()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    shape_label_preferences(model, tokenizer)
    if architecture == "hunyuan":
        vary_query_key_norms(model)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    GenerationConfig(
        bos_token_id=151_643, eos_token_id=[151_645, 151_643], pad_token_id=151_643
    ).save_pretrained(out)
    (out / "dripper_tiny.json").write_text(
        json.dumps({"architecture": architecture, "seed": seed, "hidden_size": hidden_size}) + "\n"
    )
    _log(f"tiny model saved to {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="cache folder (default: .cache)")
    parser.add_argument("--force", action="store_true", help="rebuild what exists")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the tiny model")
    args = parser.parse_args(argv)
    cache = ensure_cache_dir(args.cache)
    tokenizer_dir = build_tokenizer(cache, args.force)
    build_tiny_model(cache, tokenizer_dir, seed=args.seed, force=args.force)
    build_tiny_model(
        cache, tokenizer_dir, TINY_HUNYUAN_DIR, seed=args.seed, force=args.force, architecture="hunyuan"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
