"""Export a training checkpoint to a Hugging Face ``LlamaForCausalLM`` folder, checked by comparing logits.

The checkpoint is loaded into a single-process Megatron model (tensor and pipeline size 1: the distributed
checkpoint reshards whatever layout it was written with), its weights are renamed and split into Llama's
(``linear_qkv`` into q/k/v per query group, ``linear_fc1`` into gate/up), and both models score the same
tokens; the export fails when their logits differ by more than ``atol``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from dripper.pretrain.checkpoint import load_model_weights, read_meta, resolve_checkpoint
from dripper.pretrain.config import ModelConfig


@dataclass(frozen=True, slots=True)
class ExportResult:
    out_dir: Path
    checkpoint: Path
    step: int
    max_abs_logit_diff: float | None


def llama_config(model: ModelConfig, tokenizer=None):
    """The ``transformers.LlamaConfig`` equivalent to ``model``."""
    from transformers import LlamaConfig

    special = {}
    if tokenizer is not None:
        special = {
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        }
    return LlamaConfig(
        vocab_size=model.vocab_size,
        hidden_size=model.hidden_size,
        intermediate_size=model.ffn_hidden_size,
        num_hidden_layers=model.num_layers,
        num_attention_heads=model.num_attention_heads,
        num_key_value_heads=model.num_query_groups,
        head_dim=model.head_dim,
        max_position_embeddings=model.seq_length,
        rms_norm_eps=model.norm_eps,
        rope_theta=model.rope_theta,
        tie_word_embeddings=model.tie_embeddings,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        initializer_range=model.init_std,
        torch_dtype="float32",
        **special,
    )


def megatron_to_llama_state_dict(
    state: dict[str, torch.Tensor], model: ModelConfig
) -> dict[str, torch.Tensor]:
    """Rename and split a TP=1, PP=1 Megatron ``GPTModel`` state dict into Llama's parameter names.

    Megatron's fused QKV weight is laid out per query group: ``[q heads of the group, k, v]`` rows of
    ``head_dim`` each; its ``linear_fc1`` is ``[gate; up]`` (the SwiGLU halves, gate first).
    """
    head_dim, groups = model.head_dim, model.num_query_groups
    heads_per_group = model.num_attention_heads // groups
    hidden = model.hidden_size
    out: dict[str, torch.Tensor] = {"model.embed_tokens.weight": state["embedding.word_embeddings.weight"]}
    for layer in range(model.num_layers):
        src, dst = f"decoder.layers.{layer}.", f"model.layers.{layer}."
        qkv = state[src + "self_attention.linear_qkv.weight"].view(
            groups, heads_per_group + 2, head_dim, hidden
        )
        out[dst + "self_attn.q_proj.weight"] = qkv[:, :heads_per_group].reshape(-1, hidden)
        out[dst + "self_attn.k_proj.weight"] = qkv[:, heads_per_group].reshape(-1, hidden)
        out[dst + "self_attn.v_proj.weight"] = qkv[:, heads_per_group + 1].reshape(-1, hidden)
        out[dst + "self_attn.o_proj.weight"] = state[src + "self_attention.linear_proj.weight"]
        gate, up = state[src + "mlp.linear_fc1.weight"].chunk(2, dim=0)
        out[dst + "mlp.gate_proj.weight"] = gate
        out[dst + "mlp.up_proj.weight"] = up
        out[dst + "mlp.down_proj.weight"] = state[src + "mlp.linear_fc2.weight"]
        out[dst + "input_layernorm.weight"] = state[src + "input_layernorm.weight"]
        out[dst + "post_attention_layernorm.weight"] = state[src + "pre_mlp_layernorm.weight"]
    out["model.norm.weight"] = state["decoder.final_layernorm.weight"]
    if not model.tie_embeddings:
        out["lm_head.weight"] = state["output_layer.weight"]
    return {name: tensor.detach().to(torch.float32).contiguous().clone() for name, tensor in out.items()}


def load_megatron_model(checkpoint: Path):
    """A single-process, fp32, CPU-or-GPU Megatron model with the checkpoint's weights, and its config."""
    from dripper.pretrain.model import build_model, init_parallel, set_seed

    meta = read_meta(checkpoint)
    state = init_parallel(1, 1, "auto")
    set_seed(0)  # registers Megatron's tensor-parallel RNG state, which building the model forks
    model = build_model(meta.model, "fp32", state.device)
    load_model_weights(model, checkpoint)
    model.eval()
    return model, meta


@torch.no_grad()
def compare_logits(megatron_model, hf_model, tokens: torch.Tensor) -> float:
    """Max absolute difference of the two models' logits on ``tokens`` (``[batch, seq]``)."""
    device = next(hf_model.parameters()).device
    tokens = tokens.to(device)
    position_ids = torch.arange(tokens.size(1), device=device).unsqueeze(0).expand_as(tokens)
    reference = megatron_model(tokens, position_ids, None).float()
    exported = hf_model(input_ids=tokens).logits.float()
    return float((reference - exported).abs().max())


def export_checkpoint(
    checkpoint: Path | str,
    out_dir: Path | str,
    tokenizer: Path | str | None = None,
    verify: bool = True,
    atol: float = 1e-3,
    seed: int = 0,
) -> ExportResult:
    """Write the checkpoint as a Hugging Face Llama model folder (safetensors, config, tokenizer files).

    Args:
        checkpoint: A checkpoint folder, or a run folder (its latest checkpoint is taken).
        out_dir: Folder to write; replaced if it exists.
        tokenizer: Tokenizer folder to copy in; default: the one the run trained with.
        verify: Compare the logits of the Megatron and the exported model on random tokens.
        atol: Largest accepted absolute logit difference.
        seed: Seed of the random verification tokens.

    Raises:
        ValueError: When the logits differ by more than ``atol``.
    """
    from transformers import AutoTokenizer, LlamaForCausalLM

    checkpoint = resolve_checkpoint(Path(checkpoint))
    out_dir = Path(out_dir)
    megatron_model, meta = load_megatron_model(checkpoint)
    tokenizer_dir = Path(tokenizer or meta.train.get("tokenizer", ""))
    hf_tokenizer = None
    if tokenizer_dir and (tokenizer_dir / "tokenizer.json").exists():
        hf_tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    config = llama_config(meta.model, hf_tokenizer)
    state = megatron_to_llama_state_dict(megatron_model.state_dict(), meta.model)
    hf_model = LlamaForCausalLM(config)
    missing, unexpected = hf_model.load_state_dict(state, strict=False)
    missing = [name for name in missing if not (meta.model.tie_embeddings and name == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"weight mapping mismatch: missing {missing}, unexpected {unexpected}")
    if meta.model.tie_embeddings:
        hf_model.tie_weights()
    hf_model.eval()
    hf_model.to(next(megatron_model.parameters()).device)

    diff = None
    if verify:
        generator = torch.Generator().manual_seed(seed)
        tokens = torch.randint(
            0, meta.model.vocab_size, (2, min(32, meta.model.seq_length)), generator=generator
        )
        diff = compare_logits(megatron_model, hf_model, tokens)
        if diff > atol:
            raise ValueError(
                f"{checkpoint}: exported logits differ by {diff:.3g} > atol {atol}; not writing {out_dir}"
            )

    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    hf_model.to("cpu").save_pretrained(str(out_dir), safe_serialization=True)
    if hf_tokenizer is not None:
        hf_tokenizer.save_pretrained(str(out_dir))
    (out_dir / "export.json").write_text(
        json.dumps(
            {
                "checkpoint": str(checkpoint),
                "step": meta.step,
                # Training tokens seen up to this checkpoint: the x axis of scores over training.
                "tokens": meta.consumed_samples * meta.model.seq_length,
                "max_abs_logit_diff": diff,
                "atol": atol,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    return ExportResult(out_dir=out_dir, checkpoint=checkpoint, step=meta.step, max_abs_logit_diff=diff)


def export_every_checkpoint(
    run_dir: Path | str,
    out_root: Path | str,
    tokenizer: Path | str | None = None,
    verify: bool = True,
    atol: float = 1e-3,
) -> list[ExportResult]:
    """Export each complete checkpoint of a run folder to ``{out_root}/iter_XXXXXXX`` (oldest first);
    checkpoints already exported (same step in their ``export.json``) are kept as they are."""
    from dripper.pretrain.checkpoint import META

    run_dir = Path(run_dir)
    root = run_dir / "checkpoints" if (run_dir / "checkpoints").is_dir() else run_dir
    checkpoints = sorted(p for p in root.glob("iter_???????") if (p / META).exists())
    if not checkpoints:
        raise FileNotFoundError(f"{run_dir}: no complete checkpoint (iter_*/{META})")
    results = []
    for checkpoint in checkpoints:
        out_dir = Path(out_root) / checkpoint.name
        done = out_dir / "export.json"
        if done.exists() and (out_dir / "config.json").exists():
            data = json.loads(done.read_text(encoding="utf-8"))
            if data.get("checkpoint") == str(checkpoint):
                results.append(
                    ExportResult(out_dir, checkpoint, int(data["step"]), data.get("max_abs_logit_diff"))
                )
                continue
        results.append(export_checkpoint(checkpoint, out_dir, tokenizer=tokenizer, verify=verify, atol=atol))
    return results
