"""Forward passes for :class:`~dripper.labelers.torch_decoder.ConstrainedDecoder`, and model loading.

:class:`SlotRunner` runs Llama-family models (Qwen2/Qwen3/Llama/Mistral) on a slot KV cache of our own,
so a batch of sequences of different lengths decodes together and rejected draft tokens cost nothing;
:class:`SequentialRunner` runs any other causal LM through transformers' own forward and cache, one
sequence at a time. torch and transformers are imported when a runner is built.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dripper.labelers.lm_common import install_hint

if TYPE_CHECKING:
    from dripper.labelers.torch_decoder import EngineOptions, _Row


class SlotRunner:
    """Forward passes of a Llama-family or HunYuanDenseV1 model over a slot KV cache (one slot per sequence).

    Each layer keeps ``K, V`` of shape ``[slots, length, kv_heads, head_dim]``; a sequence's tokens sit at
    positions ``0..len-1`` of its slot, so rejecting draft tokens is just a shorter length. The model's own
    modules compute norms, projections, RoPE and MLPs; only attention and the cache are ours.

    The architectures differ only in their per-head query/key RMSNorm: Qwen3's ``q_norm``/``k_norm`` come
    before RoPE, HunYuanDenseV1's ``query_layernorm``/``key_layernorm`` after it (as transformers 5.19's
    ``HunYuanDenseV1Attention`` applies them, whatever the config's ``use_qk_norm`` says); Llama, Mistral
    and Qwen2 have none. HunYuan's RoPE (dynamic NTK with a fixed ``alpha``) is its own ``rotary_emb``.
    """

    def __init__(self, model: Any, feed_margin: int) -> None:
        import torch

        self.torch = torch
        self.backbone = model.model
        config = model.config
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.scale = self.head_dim**-0.5
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.feed_margin = feed_margin
        # rotate_half(x) = cat(-x2, x1) = roll(x, half) * [-1…, +1…]: the signs are folded into sin once
        # per forward pass (a flip by ±1 is exact, so the result is bit for bit the same).
        self.rope_signs = torch.ones(self.head_dim, device=self.device, dtype=self.dtype)
        self.rope_signs[: self.head_dim // 2] = -1
        first = self.backbone.layers[0].self_attn
        if hasattr(first, "q_norm"):
            self.qk_norm = ("q_norm", "k_norm", "before_rope")
        elif hasattr(first, "query_layernorm"):
            self.qk_norm = ("query_layernorm", "key_layernorm", "after_rope")
        else:
            self.qk_norm = None
        if config.model_type == "hunyuan_v1_dense" and self.qk_norm is None:
            # Another transformers version naming them otherwise: refuse rather than silently skip them.
            raise ValueError("HunYuanDenseV1 attention without query_layernorm/key_layernorm")
        self.slots = 0
        self.length = 0
        self.keys: list[Any] = []
        self.values: list[Any] = []

    def groups(self, rows: list[_Row], options: EngineOptions) -> Iterator[list[_Row]]:
        """Rows (longest first) in groups of similar need, each with a cache sized for it."""
        capacity = options.kv_cache_tokens or self._default_capacity()
        start = 0
        while start < len(rows):
            need = len(rows[start].call.prompt_ids) + rows[start].call.max_tokens + self.feed_margin
            end = start + 1
            while end < len(rows) and len(rows[end].call.prompt_ids) + rows[end].call.max_tokens > need // 2:
                end += 1
            slots = max(1, min(options.max_batch, end - start, capacity // need))
            self._allocate(slots, need)
            yield rows[start:end]
            start = end
        self._allocate(0, 0)

    def _default_capacity(self) -> int:
        torch = self.torch
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            per_token = 2 * len(self.backbone.layers) * self.kv_heads * self.head_dim * self.dtype.itemsize
            return max(4096, int(free * 0.5) // per_token)
        return 1 << 20

    def _allocate(self, slots: int, length: int) -> None:
        torch = self.torch
        self.keys, self.values = [], []
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.slots, self.length = slots, length
        self.lengths = [0] * slots
        # Zeroed: masked positions still multiply their values by 0, and uninitialised memory may hold NaN.
        shape = (slots, length + 1, self.kv_heads, self.head_dim)  # the last position takes padding writes
        for _ in self.backbone.layers:
            self.keys.append(torch.zeros(shape, device=self.device, dtype=self.dtype))
            self.values.append(torch.zeros(shape, device=self.device, dtype=self.dtype))

    def truncate(self, slot: int, length: int) -> None:
        self.lengths[slot] = length

    def forward(
        self, slots: list[int], starts: list[int], inputs: list[list[int]], causal_fresh: bool
    ) -> Any:
        """Feed ``inputs[i]`` to slot ``slots[i]`` after its first ``starts[i]`` tokens.

        Returns the final hidden states ``[len(slots), max input length, hidden]`` (after the last norm).
        """
        torch = self.torch
        width = max(len(tokens) for tokens in inputs)
        batch = len(slots)
        token_ids = torch.zeros((batch, width), dtype=torch.long)
        positions = torch.zeros((batch, width), dtype=torch.long)
        write_at = torch.full((batch, width), self.length, dtype=torch.long)
        for i, (start, tokens) in enumerate(zip(starts, inputs, strict=True)):
            if start + len(tokens) > self.length:
                raise RuntimeError(
                    f"slot cache of {self.length} tokens is too short for {start + len(tokens)}"
                )
            token_ids[i, : len(tokens)] = torch.tensor(tokens)
            # Padding repeats the last real position: a padded query is never read, and positions past the
            # sequence could reach beyond max_position_embeddings, where a dynamic RoPE (HunYuan's)
            # recomputes its frequencies for every later call, as transformers' dynamic_rope_update does.
            positions[i, : len(tokens)] = torch.arange(start, start + len(tokens))
            positions[i, len(tokens) :] = start + len(tokens) - 1
            write_at[i, : len(tokens)] = positions[i, : len(tokens)]
            self.lengths[slots[i]] = start + len(tokens)
        token_ids, positions, write_at = (t.to(self.device) for t in (token_ids, positions, write_at))
        slot_index = torch.tensor(slots, device=self.device)
        hidden = self.backbone.embed_tokens(token_ids)
        cos, sin = self.backbone.rotary_emb(hidden, positions)
        cos, sin = cos.unsqueeze(2), (sin * self.rope_signs.to(sin.dtype)).unsqueeze(2)
        half = self.head_dim // 2
        span = max(start + len(tokens) for start, tokens in zip(starts, inputs, strict=True))
        mask = None
        if not (causal_fresh and batch == 1):
            key_positions = torch.arange(span, device=self.device)
            mask = key_positions[None, None, :] <= positions[:, :, None]  # [batch, width, span]
        contiguous = slots == list(range(slots[0], slots[0] + batch))
        norms = self.qk_norm
        for layer, keys, values in zip(self.backbone.layers, self.keys, self.values, strict=True):
            attention = layer.self_attn
            residual = hidden
            hidden = layer.input_layernorm(hidden)
            q = attention.q_proj(hidden).view(batch, width, self.heads, self.head_dim)
            k = attention.k_proj(hidden).view(batch, width, self.kv_heads, self.head_dim)
            v = attention.v_proj(hidden).view(batch, width, self.kv_heads, self.head_dim)
            if norms is not None and norms[2] == "before_rope":
                q, k = getattr(attention, norms[0])(q), getattr(attention, norms[1])(k)
            q = q * cos + q.roll(half, dims=-1) * sin
            k = k * cos + k.roll(half, dims=-1) * sin
            if norms is not None and norms[2] == "after_rope":
                q, k = getattr(attention, norms[0])(q), getattr(attention, norms[1])(k)
            keys[slot_index[:, None], write_at] = k
            values[slot_index[:, None], write_at] = v
            if contiguous:
                cached_k = keys[slots[0] : slots[0] + batch, :span]
                cached_v = values[slots[0] : slots[0] + batch, :span]
            else:
                cached_k, cached_v = keys[slot_index, :span], values[slot_index, :span]
            out = self._attend(q, cached_k, cached_v, mask)
            hidden = residual + attention.o_proj(out.reshape(batch, width, self.heads * self.head_dim))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        return self.backbone.norm(hidden)

    def _attend(self, q: Any, k: Any, v: Any, mask: Any) -> Any:
        """Scaled dot-product attention; query heads grouped onto their KV head without copying the cache."""
        functional = self.torch.nn.functional
        batch, width = q.shape[0], q.shape[1]
        groups = self.heads // self.kv_heads
        k, v = k.transpose(1, 2), v.transpose(1, 2)  # [batch, kv_heads, span, dim]
        if mask is None:  # a fresh sequence: plain causal attention (flash kernels on CUDA)
            q = q.transpose(1, 2)
            if groups > 1:
                k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
            out = functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
            return out.transpose(1, 2)
        # [batch, kv_heads, groups * width, dim]: head h = kv_head * groups + g, as transformers' repeat_kv.
        q = q.view(batch, width, self.kv_heads, groups, self.head_dim).permute(0, 2, 3, 1, 4)
        q = q.reshape(batch, self.kv_heads, groups * width, self.head_dim)
        grouped_mask = mask[:, None, None].expand(batch, 1, groups, width, mask.shape[-1])
        grouped_mask = grouped_mask.reshape(batch, 1, groups * width, mask.shape[-1])
        out = functional.scaled_dot_product_attention(q, k, v, attn_mask=grouped_mask, scale=self.scale)
        out = out.view(batch, self.kv_heads, groups, width, self.head_dim).permute(0, 3, 1, 2, 4)
        return out.reshape(batch, width, self.heads, self.head_dim)


class SequentialRunner:
    """Any transformers causal LM through its own forward and cache, one sequence at a time (slow path)."""

    def __init__(self, model: Any) -> None:
        import torch

        self.torch = torch
        self.model = model
        self.slots = 1
        self.caches: dict[int, Any] = {}
        self.device = next(model.parameters()).device

    def groups(self, rows: list[_Row], options: EngineOptions) -> Iterator[list[_Row]]:
        for row in rows:
            yield [row]

    def truncate(self, slot: int, length: int) -> None:
        cache = self.caches.get(slot)
        if cache is not None and cache.get_seq_length() > length:
            cache.crop(length)

    def forward(
        self, slots: list[int], starts: list[int], inputs: list[list[int]], causal_fresh: bool
    ) -> Any:
        from transformers import DynamicCache

        torch = self.torch
        outputs = []
        width = max(len(tokens) for tokens in inputs)
        for slot, start, tokens in zip(slots, starts, inputs, strict=True):
            if start == 0:
                self.caches[slot] = DynamicCache()
            cache = self.caches[slot]
            if cache.get_seq_length() > start:
                cache.crop(start)
            ids = torch.tensor([tokens], device=self.device)
            result = self.model.model(input_ids=ids, past_key_values=cache, use_cache=True)
            hidden = result.last_hidden_state[0]
            outputs.append(torch.nn.functional.pad(hidden, (0, 0, 0, width - len(tokens))))
        return torch.stack(outputs)


def load_causal_lm(
    model_dir: Any, device: str = "auto", dtype: str = "auto", trust_remote_code: bool = False
) -> Any:
    """A transformers causal LM from local files, in eval mode on ``device`` (``auto``: CUDA if present)."""
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as error:
        raise ImportError(install_hint("torch and transformers", "lm")) from error
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    model = AutoModelForCausalLM.from_pretrained(
        str(model_dir),
        dtype=getattr(torch, dtype),
        local_files_only=True,
        trust_remote_code=trust_remote_code,
    )
    return model.to(device).eval()
