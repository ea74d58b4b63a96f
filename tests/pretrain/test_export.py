"""The exported Hugging Face Llama model computes the Megatron model's logits."""

from __future__ import annotations

import json

import pytest
import torch

from tests.pretrain import make_toy_corpus, sample_texts, tiny_train_config

pytest.importorskip("megatron.core")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from dripper.pretrain.train import train

    corpus = make_toy_corpus(tmp_path_factory.mktemp("toy"))
    config = tiny_train_config(corpus, tmp_path_factory.mktemp("run"), steps=3)
    return corpus, train(config)


def test_exported_logits_match_megatron_on_real_text(trained, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dripper.pretrain.export import compare_logits, export_checkpoint, load_megatron_model

    corpus, result = trained
    exported = export_checkpoint(result.out_dir, tmp_path / "hf")
    assert exported.step == 3 and exported.max_abs_logit_diff < 1e-4
    assert json.loads((tmp_path / "hf" / "export.json").read_text())["step"] == 3

    hf_model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf", local_files_only=True)
    assert hf_model.config.model_type == "llama"
    assert hf_model.config.num_key_value_heads == 2 and hf_model.config.vocab_size == 512
    assert tokenizer.eos_token == "<|endoftext|>"
    tokens = torch.tensor([tokenizer(sample_texts()[0])["input_ids"][:48]])
    megatron_model, _ = load_megatron_model(result.checkpoint)
    assert compare_logits(megatron_model, hf_model, tokens) < 1e-4
    # Trained weights, not a fresh initialisation: the logits carry the training signal.
    fresh = AutoModelForCausalLM.from_config(hf_model.config).eval()
    assert compare_logits(megatron_model, fresh, tokens) > 1e-2


def test_llama_state_dict_splits_grouped_qkv_and_swiglu():
    from dripper.pretrain.config import TINY
    from dripper.pretrain.export import megatron_to_llama_state_dict

    model = TINY.with_vocab(16)
    h, hd, groups = model.hidden_size, model.head_dim, model.num_query_groups
    per_group = model.num_attention_heads // groups
    # Row r of the fused QKV weight holds the value r: the split must pick rows by group layout.
    qkv = torch.arange((per_group + 2) * groups * hd, dtype=torch.float32).unsqueeze(1).expand(-1, h)
    state = {
        "embedding.word_embeddings.weight": torch.zeros(16, h),
        "decoder.final_layernorm.weight": torch.ones(h),
    }
    state["output_layer.weight"] = torch.zeros(16, h)
    for layer in range(model.num_layers):
        prefix = f"decoder.layers.{layer}."
        state[prefix + "self_attention.linear_qkv.weight"] = qkv
        state[prefix + "self_attention.linear_proj.weight"] = torch.zeros(h, h)
        state[prefix + "mlp.linear_fc1.weight"] = torch.cat(
            [torch.zeros(model.ffn_hidden_size, h), torch.ones(model.ffn_hidden_size, h)]
        )
        state[prefix + "mlp.linear_fc2.weight"] = torch.zeros(h, model.ffn_hidden_size)
        state[prefix + "input_layernorm.weight"] = torch.ones(h)
        state[prefix + "pre_mlp_layernorm.weight"] = torch.ones(h)
    out = megatron_to_llama_state_dict(state, model)
    rows = lambda name: out[f"model.layers.0.self_attn.{name}.weight"][:, 0].long().tolist()  # noqa: E731
    block = (per_group + 2) * hd
    expected_q = [g * block + i for g in range(groups) for i in range(per_group * hd)]
    expected_k = [g * block + per_group * hd + i for g in range(groups) for i in range(hd)]
    expected_v = [g * block + (per_group + 1) * hd + i for g in range(groups) for i in range(hd)]
    assert (rows("q_proj"), rows("k_proj"), rows("v_proj")) == (expected_q, expected_k, expected_v)
    assert (
        out["model.layers.0.mlp.gate_proj.weight"].sum() == 0
        and out["model.layers.0.mlp.up_proj.weight"].min() == 1
    )
    assert "lm_head.weight" in out
