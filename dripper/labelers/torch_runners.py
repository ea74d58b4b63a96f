"""Forward passes for :class:`~dripper.labelers.torch_decoder.ConstrainedDecoder`, and model loading.

:class:`SlotRunner` runs Llama-family models (Qwen2/Qwen3/Llama/Mistral) on a slot KV cache of our own,
so a batch of sequences of different lengths decodes together and rejected draft tokens cost nothing;
:class:`SequentialRunner` runs any other causal LM through transformers' own forward and cache, one
sequence at a time. torch and transformers are imported when a runner is built.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dripper.labelers.lm_common import install_hint
from dripper.labelers.torch_options import DecodeRow, EngineOptions


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

    def __init__(self, model: Any, feed_margin: int, cuda_graphs: bool = True) -> None:
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
        # Decode steps padded to bucketed shapes (CUDA graphs need static shapes); CPU tests turn it on to
        # check that padding changes no answer.
        self.bucketing = self.device.type == "cuda" and cuda_graphs
        self.graphs = DecodeGraphs(self) if self.bucketing else None
        self.slots = 0
        self.length = 0
        self.keys: list[Any] = []
        self.values: list[Any] = []

    def groups(self, rows: list[DecodeRow], options: EngineOptions) -> Iterator[list[DecodeRow]]:
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
        if self.graphs is not None:
            self.graphs.clear()  # captured against the old cache tensors
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.slots, self.length = slots, length
        self.lengths = [0] * slots
        # Padded decode steps run rows up to the batch bucket: spare slots take their (discarded) writes.
        rows = _bucket(slots) if self.bucketing and slots else slots
        # Zeroed: masked positions still multiply their values by 0, and uninitialised memory may hold NaN.
        shape = (rows, length + 1, self.kv_heads, self.head_dim)  # the last position takes padding writes
        for _ in self.backbone.layers:
            self.keys.append(torch.zeros(shape, device=self.device, dtype=self.dtype))
            self.values.append(torch.zeros(shape, device=self.device, dtype=self.dtype))

    def truncate(self, slot: int, length: int) -> None:
        self.lengths[slot] = length

    def move(self, source: int, target: int, length: int) -> None:
        """Copy a sequence's first ``length`` cached tokens to another slot (compaction of active slots)."""
        for keys, values in zip(self.keys, self.values, strict=True):
            keys[target, :length] = keys[source, :length]
            values[target, :length] = values[source, :length]
        self.lengths[target], self.lengths[source] = length, 0

    def forward(
        self, slots: list[int], starts: list[int], inputs: list[list[int]], causal_fresh: bool
    ) -> Any:
        """Feed ``inputs[i]`` to slot ``slots[i]`` after its first ``starts[i]`` tokens.

        Returns the final hidden states ``[rows, width, hidden]`` (after the last norm) with row ``i`` for
        ``inputs[i]``; ``rows`` and ``width`` may be padded past ``len(inputs)`` and the longest input.
        """
        import numpy as np

        batch = len(slots)
        width = max(len(tokens) for tokens in inputs)
        span = max(start + len(tokens) for start, tokens in zip(starts, inputs, strict=True))
        fresh = causal_fresh and batch == 1
        contiguous = slots == list(range(slots[0], slots[0] + batch))
        padded = self.bucketing and not fresh and contiguous and slots[0] == 0
        rows, cols = (_bucket(batch), _bucket(width)) if padded else (batch, width)
        if padded:
            span = min(_span_bucket(span), self.length)
        # One host buffer for the step's ids, positions, cache write positions and slots; one copy.
        meta = np.zeros((4, rows, cols), dtype=np.int64)
        meta[2] = self.length  # padding writes go to the spare last position, never read
        meta[3] = np.arange(rows)[:, None]
        for i, (start, tokens) in enumerate(zip(starts, inputs, strict=True)):
            if start + len(tokens) > self.length:
                raise RuntimeError(
                    f"slot cache of {self.length} tokens is too short for {start + len(tokens)}"
                )
            end = start + len(tokens)
            meta[0, i, : len(tokens)] = tokens
            # Padding repeats the last real position: a padded query is never read, and positions past the
            # sequence could reach beyond max_position_embeddings, where a dynamic RoPE (HunYuan's)
            # recomputes its frequencies for every later call, as transformers' dynamic_rope_update does.
            meta[1, i, : len(tokens)] = np.arange(start, end)
            meta[1, i, len(tokens) :] = end - 1
            meta[2, i, : len(tokens)] = meta[1, i, : len(tokens)]
            meta[3, i] = slots[i]
            self.lengths[slots[i]] = end
        device_meta = to_device(meta, self.device)
        if fresh:
            return self._step(device_meta, span, None, fresh=True)
        first = slots[0] if contiguous else None
        if padded and self.graphs is not None:
            hidden = self.graphs.run(device_meta, span)
            if hidden is not None:
                return hidden
        return self._step(device_meta, span, first)

    def _step(self, meta: Any, span: int, first: int | None, fresh: bool = False) -> Any:
        """The model on one step's inputs: ``meta`` holds ids, positions, write positions and slots.

        ``first``: the slot of row 0 when rows sit in consecutive slots (the cache is read as one view),
        else ``None`` (gathered). ``fresh``: one sequence from position 0 (causal attention, no mask).
        Captured by :class:`DecodeGraphs` as is: no host sync, shapes fixed by ``meta`` and ``span``.
        """
        torch = self.torch
        token_ids, positions, write_at, slot_rows = meta[0], meta[1], meta[2], meta[3]
        batch, width = token_ids.shape
        hidden = self.backbone.embed_tokens(token_ids)
        cos, sin = self.backbone.rotary_emb(hidden, positions)
        cos, sin = cos.unsqueeze(2), (sin * self.rope_signs.to(sin.dtype)).unsqueeze(2)
        half = self.head_dim // 2
        mask = None
        if not fresh:  # built once per step, shaped for the grouped query heads of every layer
            groups = self.heads // self.kv_heads
            key_positions = torch.arange(span, device=self.device)
            mask = key_positions[None, None, :] <= positions[:, :, None]  # [batch, width, span]
            mask = mask[:, None, None].expand(batch, 1, groups, width, span).reshape(batch, 1, -1, span)
        norms = self.qk_norm
        slot_index = slot_rows[:, 0]
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
            keys[slot_rows, write_at] = k
            values[slot_rows, write_at] = v
            if fresh:
                out = self._attend_causal(q, k, v)
            else:
                if first is not None:  # a view: no copy of the batch's K/V span
                    cached_k, cached_v = (
                        keys[first : first + batch, :span],
                        values[first : first + batch, :span],
                    )
                else:
                    cached_k, cached_v = keys[slot_index, :span], values[slot_index, :span]
                out = self._attend(q, cached_k, cached_v, mask)
            hidden = residual + attention.o_proj(out.reshape(batch, width, self.heads * self.head_dim))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        return self.backbone.norm(hidden)

    def _attend_causal(self, q: Any, k: Any, v: Any) -> Any:
        """A fresh sequence: plain causal attention, GQA in the kernel (flash kernels on CUDA)."""
        functional = self.torch.nn.functional
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        out = functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=self.scale, enable_gqa=self.heads != self.kv_heads
        )
        return out.transpose(1, 2)

    def _attend(self, q: Any, k: Any, v: Any, mask: Any) -> Any:
        """Scaled dot-product attention; query heads grouped onto their KV head without copying the cache."""
        functional = self.torch.nn.functional
        batch, width = q.shape[0], q.shape[1]
        groups = self.heads // self.kv_heads
        k, v = k.transpose(1, 2), v.transpose(1, 2)  # [batch, kv_heads, span, dim]
        # [batch, kv_heads, groups * width, dim]: head h = kv_head * groups + g, as transformers' repeat_kv.
        q = q.view(batch, width, self.kv_heads, groups, self.head_dim).permute(0, 2, 3, 1, 4)
        q = q.reshape(batch, self.kv_heads, groups * width, self.head_dim)
        out = functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        out = out.view(batch, self.kv_heads, groups, width, self.head_dim).permute(0, 3, 1, 2, 4)
        return out.reshape(batch, width, self.heads, self.head_dim)


def _bucket(size: int) -> int:
    """Padded batch or width: the next power of two (at most 2x the work, few distinct shapes)."""
    return 1 << max(size - 1, 0).bit_length()


def _span_bucket(span: int) -> int:
    """Padded attention span: a quarter octave up (at most 25% more attention, ~4 shapes per doubling)."""
    step = max(1 << max(span.bit_length() - 3, 0), 64)
    return -(-span // step) * step


def to_device(values: Any, device: Any) -> Any:
    """A list or numpy array of int64 on ``device``: on CUDA from pinned memory, without blocking the host."""
    import torch

    tensor = torch.as_tensor(values, dtype=torch.long)
    if device.type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


class DecodeGraphs:
    """CUDA graphs of :meth:`SlotRunner._step`, one per padded (rows, width, span), captured on first use.

    A decode step of a 28-layer model is ~1,800 small kernels; replaying a graph launches them at once, so
    the step costs GPU time rather than Python time. Graphs read the step's inputs from a static buffer and
    share one memory pool; they are dropped when the cache is reallocated. Past ``limit`` shapes, or after
    a capture fails (a module that syncs, say), steps run eagerly: same answers, slower.
    """

    def __init__(self, runner: SlotRunner, limit: int = 96) -> None:
        self.runner = runner
        self.limit = limit
        self.graphs: dict[tuple[int, int, int], tuple[Any, Any, Any]] = {}
        self.pool = None
        self.failed: str | None = None

    def clear(self) -> None:
        self.graphs.clear()

    def run(self, meta: Any, span: int) -> Any | None:
        """Replay the graph for this shape (capturing it first); ``None``: run the step eagerly."""
        if self.failed is not None:
            return None
        key = (meta.shape[1], meta.shape[2], span)
        entry = self.graphs.get(key)
        if entry is None:
            if len(self.graphs) >= self.limit:
                return None
            try:
                entry = self._capture(meta, span)
            except Exception as error:  # noqa: BLE001 - recorded; eager steps give the same answers
                self.failed = f"{type(error).__name__}: {error}"
                return None
            self.graphs[key] = entry
        graph, static_meta, output = entry
        static_meta.copy_(meta, non_blocking=True)
        graph.replay()
        return output

    def _capture(self, meta: Any, span: int) -> tuple[Any, Any, Any]:
        torch = self.runner.torch
        static_meta = meta.clone()
        # Warm-up on a side stream (lazy initialisation must not be captured), as torch's docs advise. Its
        # writes go to the step's own positions and are rewritten by the replay with the same values.
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self.runner._step(static_meta, span, 0)
        torch.cuda.current_stream().wait_stream(stream)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            output = self.runner._step(static_meta, span, 0)
        return graph, static_meta, output


class SequentialRunner:
    """Any transformers causal LM through its own forward and cache, one sequence at a time (slow path)."""

    def __init__(self, model: Any) -> None:
        import torch

        self.torch = torch
        self.model = model
        self.slots = 1
        self.caches: dict[int, Any] = {}
        self.device = next(model.parameters()).device

    def groups(self, rows: list[DecodeRow], options: EngineOptions) -> Iterator[list[DecodeRow]]:
        for row in rows:
            yield [row]

    def move(self, source: int, target: int, length: int) -> None:
        self.caches[target] = self.caches.pop(source)
        self.truncate(target, length)

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
