"""The sequence labeler's network, evaluated with numpy alone (no torch at run time).

Per block: the mean embedding of its hashed text tokens and of its markup tokens (one table), the
standardised block features of the ``cpu`` labeler and the logits of its two tree stages → a dense layer →
a bidirectional GRU across the page's blocks → a small head, plus the tree logit times a learned weight
(a skip, so training starts from the trees' answer and learns where the page's sequence says otherwise).

Long pages are read in overlapping windows of blocks (:func:`windows`): every block is scored in the window
where it lies furthest from an edge, so each sees at least ``(length - stride) / 2`` blocks of context on
both sides where the page has them, and no block is dropped. All windows of a batch of pages run through
the GRU together, one numpy step per position, so the Python loop is as long as a window, not a page.

The GRU follows ``torch.nn.GRU``'s equations exactly (gate order r, z, n; ``b_hn`` inside the reset
product), so a model trained with torch (``train.py``) gives the same scores here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dripper.labelers.cpu_seq.tokens import BlockTokens

if TYPE_CHECKING:
    from dripper.labelers.cpu.features import PageFeatures

__all__ = ["FORMAT", "NetworkConfig", "SeqNetwork", "numeric_inputs", "windows"]

FORMAT = "dripper-cpu-seq-labeler"
FORMAT_VERSION = 1
#: Tree logits are clipped here before use: a leaf sum past it says nothing more.
LOGIT_CLIP = 12.0


def numeric_inputs(features: PageFeatures, logits: np.ndarray) -> np.ndarray:
    """The network's numeric inputs of a page, float32: its block features, then the two tree logits."""
    return np.concatenate([features.values, logits], axis=1).astype(np.float32)


@dataclass(frozen=True)
class NetworkConfig:
    """Shapes of the network and of its windows.

    Attributes:
        buckets: Rows of the hashed-token embedding table.
        embedding: Width of a token embedding.
        n_numeric: Block features plus the two tree logits.
        hidden: Width of the dense layer before the GRU.
        gru: Hidden size of each GRU direction.
        head: Width of the head's hidden layer.
        window: Blocks per window; ``stride``: blocks between window starts (``< window``: overlap).
    """

    buckets: int = 1 << 13
    embedding: int = 16
    n_numeric: int = 0
    hidden: int = 64
    gru: int = 48
    head: int = 32
    window: int = 128
    stride: int = 64

    def __post_init__(self) -> None:
        if not 0 < self.stride <= self.window:
            raise ValueError(f"window {self.window}, stride {self.stride}: need 0 < stride <= window")


def windows(n_blocks: int, length: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Window starts for a page of ``n_blocks`` and, per block, the window that scores it.

    Windows start every ``stride`` blocks, the last one ends at the page's end; a page shorter than
    ``length`` is one window. Each block is owned by the window where it lies furthest from the window's
    inner edges (in an overlap: up to the midpoint, the earlier window), so every block has one owner.

    Returns:
        ``(starts, owner)``: ``starts`` ``(n_windows,)``, ``owner`` ``(n_blocks,)`` window indexes.
    """
    if n_blocks <= length:
        return np.zeros(1, dtype=np.int64), np.zeros(n_blocks, dtype=np.int64)
    last = n_blocks - length
    starts = np.unique(np.append(np.arange(0, last, stride), last)).astype(np.int64)
    # In the overlap of windows k and k+1 a block is further from k's right edge than from k+1's left
    # edge up to the midpoint of the two: the last block window k owns.
    bounds = (starts[:-1] + length - 1 + starts[1:]) // 2
    owner = np.searchsorted(bounds, np.arange(n_blocks), side="left")
    return starts, owner.astype(np.int64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow warnings, same value


def _bag_means(table: np.ndarray, ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    counts = np.diff(offsets).astype(np.float32)
    sums = np.add.reduceat(table[ids], offsets[:-1], axis=0)  # every bag holds at least one id
    return sums / counts[:, None]


@dataclass
class SeqNetwork:
    """The network's weights (float32 at run time; stored as float16) and its configuration.

    ``params`` names follow the torch module of ``train.py`` (``embedding``, ``dense.weight``,
    ``gru.weight_ih_l0``, ``gru.weight_ih_l0_reverse``…, ``head1.weight``, ``head2.weight``,
    ``tree_weight``); ``numeric_mean`` / ``numeric_scale`` standardise the numeric inputs.
    """

    config: NetworkConfig
    params: dict[str, np.ndarray]
    metadata: dict[str, Any] = field(default_factory=dict)

    def block_inputs(self, numeric: np.ndarray, tokens: BlockTokens) -> tuple[np.ndarray, np.ndarray]:
        """The dense layer's output ``(n, hidden)`` and the tree logit ``(n,)`` of a page's blocks.

        ``numeric`` is ``(n, n_numeric)``: the block features, then the stage-1 and stage-2 tree logits.
        """
        p = self.params
        table = p["embedding"]
        x_numeric = (np.asarray(numeric, np.float32) - p["numeric_mean"]) / p["numeric_scale"]
        x_numeric = np.clip(x_numeric, -10.0, 10.0)
        text = _bag_means(table, tokens.text_ids, tokens.text_offsets)
        markup = _bag_means(table, tokens.markup_ids, tokens.markup_offsets)
        x = np.concatenate([text, markup, x_numeric], axis=1)
        dense = np.maximum(x @ p["dense.weight"].T + p["dense.bias"], 0.0)
        tree_logit = np.clip(np.asarray(numeric[:, -1], np.float32), -LOGIT_CLIP, LOGIT_CLIP)
        return dense, tree_logit

    def _gru(self, x: np.ndarray, mask: np.ndarray, suffix: str) -> np.ndarray:
        """One GRU direction over ``x`` ``(windows, steps, in)``; masked steps leave the state as it was."""
        p = self.params
        w_ih, w_hh = p[f"gru.weight_ih_l0{suffix}"], p[f"gru.weight_hh_l0{suffix}"]
        b_ih, b_hh = p[f"gru.bias_ih_l0{suffix}"], p[f"gru.bias_hh_l0{suffix}"]
        size = w_hh.shape[1]
        gates_x = x @ w_ih.T + b_ih
        h = np.zeros((x.shape[0], size), np.float32)
        out = np.zeros((x.shape[0], x.shape[1], size), np.float32)
        steps = range(x.shape[1] - 1, -1, -1) if suffix else range(x.shape[1])
        for t in steps:
            gx = gates_x[:, t]
            gh = h @ w_hh.T + b_hh
            r = _sigmoid(gx[:, :size] + gh[:, :size])
            z = _sigmoid(gx[:, size : 2 * size] + gh[:, size : 2 * size])
            n = np.tanh(gx[:, 2 * size :] + r * gh[:, 2 * size :])
            new = (1.0 - z) * n + z * h
            h = np.where(mask[:, t, None], new, h)
            out[:, t] = h
        return out

    def logits(self, pages: Sequence[tuple[np.ndarray, BlockTokens]]) -> list[np.ndarray]:
        """Main-content logits of every block of every page ``(numeric, tokens)``: all windows together."""
        cfg, p = self.config, self.params
        prepared = [self.block_inputs(numeric, tokens) for numeric, tokens in pages]
        plan = []  # per page: (first window row, starts, owner)
        rows = 0
        for dense, _ in prepared:
            starts, owner = windows(dense.shape[0], cfg.window, cfg.stride)
            plan.append((rows, starts, owner))
            rows += len(starts)
        steps = min(cfg.window, max((dense.shape[0] for dense, _ in prepared), default=0))
        if rows == 0 or steps == 0:
            return [np.zeros(0, np.float32) for _ in pages]
        x = np.zeros((rows, steps, cfg.hidden), np.float32)
        mask = np.zeros((rows, steps), bool)
        for (dense, _), (first, starts, _) in zip(prepared, plan, strict=True):
            for k, start in enumerate(starts.tolist()):
                piece = dense[start : start + steps]
                x[first + k, : len(piece)] = piece
                mask[first + k, : len(piece)] = True
        both = np.concatenate([x, self._gru(x, mask, ""), self._gru(x, mask, "_reverse")], axis=2)
        hidden = np.maximum(both @ p["head1.weight"].T + p["head1.bias"], 0.0)
        scores = (hidden @ p["head2.weight"].T + p["head2.bias"])[..., 0]
        out = []
        for (dense, tree_logit), (first, starts, owner) in zip(prepared, plan, strict=True):
            position = np.arange(dense.shape[0]) - starts[owner]
            out.append(scores[first + owner, position] + p["tree_weight"][0] * tree_logit)
        return out

    def probabilities(self, pages: Sequence[tuple[np.ndarray, BlockTokens]]) -> list[np.ndarray]:
        """Main-content probability of every block of every page."""
        return [_sigmoid(logit.astype(np.float64)) for logit in self.logits(pages)]

    # -- the file ---------------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the network as a ``.npz`` file: float16 weights, the configuration and metadata as JSON."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = {"format": FORMAT, "format_version": FORMAT_VERSION, "config": self.config.__dict__}
        header["metadata"] = self.metadata
        arrays = {name: value.astype(np.float16) for name, value in self.params.items()}
        # The standardisation stays float32: a float16 mean of a large feature loses the small differences.
        for name in ("numeric_mean", "numeric_scale"):
            arrays[name] = self.params[name].astype(np.float32)
        with path.open("wb") as handle:
            np.savez_compressed(handle, header=np.array(json.dumps(header)), **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> SeqNetwork:
        """Read a file written by :meth:`save` (no pickle: ``allow_pickle=False``)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(
                f"cpu_seq model {path} does not exist; train one with "
                "`dripper train-labeler --kind cpu_seq --data PAGES.jsonl.gz --output MODEL.npz`"
            )
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(str(data["header"]))
            params = {name: data[name].astype(np.float32) for name in data.files if name != "header"}
        if header.get("format") != FORMAT or header.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{path}: not a cpu_seq model of format version {FORMAT_VERSION} "
                f"({header.get('format')!r} v{header.get('format_version')}); retrain it"
            )
        return cls(NetworkConfig(**header["config"]), params, dict(header.get("metadata") or {}))
