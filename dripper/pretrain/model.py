"""Megatron-core GPT models from :class:`dripper.pretrain.config.ModelConfig`, and process-group set-up.

The layer spec is Megatron-core's local (no Transformer Engine) spec with RMSNorm and a SwiGLU MLP; the
core attention is :class:`SDPACoreAttention`, torch's fused scaled-dot-product attention (flash attention
on Hopper), instead of Megatron's unfused local attention that materialises the ``seq x seq`` scores.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dripper.pretrain.config import ModelConfig


@dataclass(frozen=True, slots=True)
class ParallelState:
    """This process's place in the Megatron grid."""

    rank: int
    world_size: int
    local_rank: int
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    dp_rank: int
    tp_rank: int
    pp_rank: int
    device: torch.device

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pipeline_parallel - 1


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda but torch sees no GPU; use --device cpu with the tiny model")
    return torch.device(device)


def init_parallel(
    tensor_parallel: int = 1, pipeline_parallel: int = 1, device: str = "auto"
) -> ParallelState:
    """Initialise ``torch.distributed`` (NCCL on GPU, gloo on CPU) and Megatron's model-parallel groups.

    Under ``torchrun`` the rank and world size come from its environment; a plain process becomes a world
    of one on a free loopback port. Idempotent: a second call returns the existing state (the sizes must
    match).
    """
    from megatron.core import parallel_state

    target = resolve_device(device)
    if target.type == "cpu":
        from dripper.pretrain.cpu_compat import apply_cpu_patches

        apply_cpu_patches()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if target.type == "cuda":
        torch.cuda.set_device(local_rank)
        target = torch.device("cuda", local_rank)
    if not torch.distributed.is_initialized():
        # Megatron's groups outlive a process group someone else destroyed (vLLM's shutdown does, in a
        # process that trained before): they belong to the dead world, so they are dropped and rebuilt.
        if parallel_state.model_parallel_is_initialized():
            parallel_state.destroy_model_parallel()
        backend = "nccl" if target.type == "cuda" else "gloo"
        timeout = datetime.timedelta(minutes=30)
        if "RANK" in os.environ:  # torchrun's (or Slurm's) world: its rendezvous variables
            torch.distributed.init_process_group(backend=backend, timeout=timeout)
        else:
            # A world of one needs no rendezvous: an in-process store, no port, and nothing written to
            # os.environ (a loopback port picked here and left in the environment was inherited by the
            # process's children, whose own world of one then failed to bind it).
            store = torch.distributed.HashStore()
            torch.distributed.init_process_group(
                backend=backend, store=store, rank=0, world_size=1, timeout=timeout
            )
    world_size = torch.distributed.get_world_size()
    if world_size % (tensor_parallel * pipeline_parallel):
        raise ValueError(
            f"world size {world_size} is not divisible by tensor_parallel {tensor_parallel} x "
            f"pipeline_parallel {pipeline_parallel}"
        )
    if pipeline_parallel > 1 and target.type != "cuda":
        raise ValueError("pipeline_parallel > 1 needs GPUs (Megatron's pipeline schedules are CUDA-only)")
    if parallel_state.model_parallel_is_initialized():
        if (
            parallel_state.get_tensor_model_parallel_world_size() != tensor_parallel
            or parallel_state.get_pipeline_model_parallel_world_size() != pipeline_parallel
        ):
            raise RuntimeError("model parallel groups already initialised with other sizes in this process")
    else:
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=tensor_parallel, pipeline_model_parallel_size=pipeline_parallel
        )
    return ParallelState(
        rank=torch.distributed.get_rank(),
        world_size=world_size,
        local_rank=local_rank,
        tensor_parallel=tensor_parallel,
        pipeline_parallel=pipeline_parallel,
        data_parallel=parallel_state.get_data_parallel_world_size(),
        dp_rank=parallel_state.get_data_parallel_rank(),
        tp_rank=parallel_state.get_tensor_model_parallel_rank(),
        pp_rank=parallel_state.get_pipeline_model_parallel_rank(),
        device=target,
    )


def set_seed(seed: int) -> None:
    """Seed torch, and Megatron's tensor-parallel RNG tracker (patched on CPU)."""
    from megatron.core import tensor_parallel

    torch.manual_seed(seed)
    tensor_parallel.model_parallel_cuda_manual_seed(seed)


def _sdpa_core_attention_class() -> type:
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    class SDPACoreAttention(DotProductAttention):
        """Causal attention through ``torch.nn.functional.scaled_dot_product_attention``.

        Takes Megatron's ``[seq, batch, heads, head_dim]`` query and ``[seq, batch, groups, head_dim]``
        key/value (grouped-query attention) and returns ``[seq, batch, heads * head_dim]``, as
        ``DotProductAttention`` does. Masks other than causal are not supported (the GPT datasets here use
        no attention mask).
        """

        def forward(
            self,
            query: torch.Tensor,
            key: torch.Tensor,
            value: torch.Tensor,
            attention_mask: torch.Tensor | None,
            attn_mask_type: object = None,
            attention_bias: torch.Tensor | None = None,
            packed_seq_params: object = None,
        ) -> torch.Tensor:
            if packed_seq_params is not None or attention_bias is not None:
                raise NotImplementedError("SDPACoreAttention supports plain causal attention only")
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
            context = F.scaled_dot_product_attention(
                q,
                k,
                v,
                is_causal=True,
                scale=self.softmax_scale,
                dropout_p=self.attention_dropout.p if self.training else 0.0,
                enable_gqa=q.size(1) != k.size(1),
            )
            seq, batch = context.size(2), context.size(0)
            return context.permute(2, 0, 1, 3).reshape(seq, batch, -1)

    return SDPACoreAttention


def transformer_config(model: ModelConfig, precision: str = "fp32", use_cpu_initialization: bool = False):
    """Megatron's ``TransformerConfig`` for a Llama-style model; fusions needing Apex/TE are off."""
    from megatron.core import parallel_state
    from megatron.core.transformer.transformer_config import TransformerConfig

    tp = parallel_state.get_tensor_model_parallel_world_size() if parallel_state.is_initialized() else 1
    pp = parallel_state.get_pipeline_model_parallel_world_size() if parallel_state.is_initialized() else 1
    return TransformerConfig(
        num_layers=model.num_layers,
        hidden_size=model.hidden_size,
        ffn_hidden_size=model.ffn_hidden_size,
        num_attention_heads=model.num_attention_heads,
        num_query_groups=model.num_query_groups,
        kv_channels=model.head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=model.norm_eps,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        init_method_std=model.init_std,
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        # Parameters stay fp32 (master weights); bf16 comes from autocast in the training step.
        params_dtype=torch.float32,
        # Under autocast Megatron casts the residual stream to the matmul dtype (bias_dropout_add), so the
        # activations sent between pipeline stages are bf16.
        pipeline_dtype=torch.bfloat16 if precision == "bf16" else torch.float32,
        use_cpu_initialization=use_cpu_initialization,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        gradient_accumulation_fusion=False,
        apply_rope_fusion=False,
        persist_layer_norm=False,
        bias_activation_fusion=False,
    )


def build_model(
    model: ModelConfig,
    precision: str = "fp32",
    device: torch.device | str = "cpu",
):
    """Build this rank's Megatron ``GPTModel`` (its pipeline stage, its tensor-parallel shard) on ``device``.

    ``model.vocab_size`` must be set (padded for tensor parallelism). Requires :func:`init_parallel`.
    """
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    if model.vocab_size is None:
        raise ValueError("model.vocab_size is not set; use ModelConfig.with_vocab(padded tokenizer size)")
    device = torch.device(device)
    config = transformer_config(model, precision, use_cpu_initialization=device.type == "cpu")
    spec = get_gpt_layer_local_spec(normalization="RMSNorm")
    spec.submodules.self_attention.submodules.core_attention = _sdpa_core_attention_class()
    gpt = GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=model.vocab_size,
        max_sequence_length=model.seq_length,
        pre_process=parallel_state.is_pipeline_first_stage(),
        post_process=parallel_state.is_pipeline_last_stage(),
        share_embeddings_and_output_weights=model.tie_embeddings,
        position_embedding_type="rope",
        rotary_base=int(model.rope_theta),
    )
    return gpt.to(device)
