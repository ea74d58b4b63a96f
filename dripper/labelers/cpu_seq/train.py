"""Training the ``cpu_seq`` network with torch on CPU (the ``cpu-train`` extra; never at run time).

:func:`fit_network` trains on pages with their tree logits (out of fold: a page's logits come from trees
that did not see it) and returns a numpy :class:`SeqNetwork`. Seeded and single-threaded by default, so
the same data, seed and thread count give the same weights. Every page weighs the same, as for the trees
(``dripper.labelers.cpu.fit``: spread over its labelled text blocks, groups scaled by size^-0.5).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from dripper.labelers.cpu.fit import block_weights, page_multipliers
from dripper.labelers.cpu.training_set import PageExample
from dripper.labelers.cpu_seq.network import LOGIT_CLIP, NetworkConfig, SeqNetwork, numeric_inputs
from dripper.labelers.cpu_seq.tokens import BlockTokens

__all__ = ["SeqTrainParams", "build_module", "fit_network", "module_to_network"]


@dataclass(frozen=True)
class SeqTrainParams:
    """Hyper-parameters of one network fit.

    The defaults are the best of the settings measured on 2026-12-06 (``docs/cpu-labeler.md``: none of them
    beat the trees alone out of fold); larger tables, more epochs and higher rates fitted the training
    sites and scored worse on unseen ones.

    Attributes:
        config: The network's shapes (``n_numeric`` is set from the data).
        epochs: Passes over the training windows.
        batch: Windows per step.
        learning_rate, weight_decay: AdamW's.
        dropout: Dropout of the token embeddings and of the dense layer while training (none at run time).
        char_weight, source_balance, snippet_weight: Page and block weights, as for the trees.
        threads: torch threads (1: deterministic and polite on a shared machine).
    """

    config: NetworkConfig = NetworkConfig()
    epochs: int = 3
    batch: int = 16
    learning_rate: float = 1e-3
    weight_decay: float = 1e-2
    dropout: float = 0.3
    char_weight: float = 0.5
    source_balance: float = 0.5
    snippet_weight: float = 1.0
    threads: int = 1


def build_module(config: NetworkConfig, seed: int = 0, dropout: float = 0.0):
    """The torch module whose parameters :class:`SeqNetwork` reads (names as in ``network.py``).

    The head's last layer starts at zero, so an untrained module answers the trees' logit (the skip).
    """
    import torch
    from torch import nn

    class SeqModule(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Parameter(torch.randn(config.buckets, config.embedding) * 0.05)
            self.dense = nn.Linear(2 * config.embedding + config.n_numeric, config.hidden)
            self.gru = nn.GRU(config.hidden, config.gru, batch_first=True, bidirectional=True)
            self.head1 = nn.Linear(config.hidden + 2 * config.gru, config.head)
            self.head2 = nn.Linear(config.head, 1)
            self.tree_weight = nn.Parameter(torch.ones(1))
            self.dropout = nn.Dropout(dropout)
            nn.init.zeros_(self.head2.weight)
            nn.init.zeros_(self.head2.bias)
            self.register_buffer("numeric_mean", torch.zeros(config.n_numeric))
            self.register_buffer("numeric_scale", torch.ones(config.n_numeric))

        def block_inputs(self, numeric, text_ids, text_offsets, markup_ids, markup_offsets):
            """Dense layer output and tree logit of a flat run of blocks (offsets without the end)."""
            x_numeric = ((numeric - self.numeric_mean) / self.numeric_scale).clamp(-10.0, 10.0)
            bag = nn.functional.embedding_bag
            text = bag(text_ids, self.embedding, text_offsets, mode="mean")
            markup = bag(markup_ids, self.embedding, markup_offsets, mode="mean")
            tokens = self.dropout(torch.cat([text, markup], dim=1))
            dense = self.dropout(torch.relu(self.dense(torch.cat([tokens, x_numeric], dim=1))))
            return dense, numeric[:, -1].clamp(-LOGIT_CLIP, LOGIT_CLIP)

        def forward(self, dense_windows, lengths):
            """Logits without the tree skip ``(windows, steps)`` of padded windows of dense outputs."""
            packed = nn.utils.rnn.pack_padded_sequence(
                dense_windows, lengths, batch_first=True, enforce_sorted=False
            )
            out, _ = self.gru(packed)
            out, _ = nn.utils.rnn.pad_packed_sequence(
                out, batch_first=True, total_length=dense_windows.shape[1]
            )
            both = torch.cat([dense_windows, out], dim=2)
            return self.head2(torch.relu(self.head1(both)))[..., 0]

    torch.manual_seed(seed)
    return SeqModule()


def module_to_network(module, config: NetworkConfig, metadata: dict | None = None) -> SeqNetwork:
    """The numpy network of a trained module (float32; ``save`` stores float16)."""
    params = {
        name: value.detach().cpu().numpy().astype(np.float32) for name, value in module.state_dict().items()
    }
    return SeqNetwork(config, params, dict(metadata or {}))


@dataclass
class _Page:
    numeric: np.ndarray
    text_ids: np.ndarray
    text_offsets: np.ndarray
    markup_ids: np.ndarray
    markup_offsets: np.ndarray
    labels: np.ndarray
    weights: np.ndarray


def _prepare(pages, tokens, logits, indexes, params: SeqTrainParams) -> list[_Page]:
    buckets = params.config.buckets
    multipliers = page_multipliers(pages, indexes, params.source_balance)
    out = []
    for index, multiplier in zip(indexes, multipliers, strict=True):
        page, token = pages[index], tokens[index]
        weights = block_weights(page, params.char_weight) * multiplier / 100.0
        keep = page.features.chars > 0
        if page.known is not None:
            keep &= page.known
            weights = weights * params.snippet_weight
        weights = np.where(keep, weights, 0.0).astype(np.float32)
        numeric = numeric_inputs(page.features, logits[index])
        out.append(
            _Page(
                numeric,
                (token.text_ids % buckets).astype(np.int64),
                token.text_offsets,
                (token.markup_ids % buckets).astype(np.int64),
                token.markup_offsets,
                page.labels.astype(np.float32),
                weights,
            )
        )
    return out


def _window_units(
    prepared: list[_Page], config: NetworkConfig, rng
) -> list[tuple[int, int, int, np.ndarray]]:
    """One epoch's training windows: (page, start, length, trained positions).

    Training reads each page in windows that do not overlap, cut at a random offset per page and epoch,
    and learns from every block of each: half the work of scoring overlapping windows' owned blocks, and
    the random cuts teach the GRU to answer near a window's edge too (at run time an owned block has more
    context than this, never less than a window's half minus the overlap).
    """
    units = []
    length = config.window
    for k, page in enumerate(prepared):
        n = page.numeric.shape[0]
        offset = int(rng.integers(0, length)) if n > length else 0
        starts = [0] + list(range(length - offset, n, length)) if offset else list(range(0, n, length))
        for start in starts:
            end = min(n, start + length if start or not offset else length - offset)
            if page.weights[start:end].sum() > 0:
                units.append((k, start, end - start, np.arange(end - start)))
    return units


def _batch_tensors(batch, prepared: list[_Page]):
    import torch

    numeric, labels, weights = [], [], []
    text_ids, text_offsets, markup_ids, markup_offsets = [], [], [], []
    text_base = markup_base = 0
    for k, start, length, owned in batch:
        page = prepared[k]
        end = start + length
        numeric.append(page.numeric[start:end])
        t0, t1 = page.text_offsets[start], page.text_offsets[end]
        text_ids.append(page.text_ids[t0:t1])
        text_offsets.append(page.text_offsets[start:end] - t0 + text_base)
        text_base += t1 - t0
        m0, m1 = page.markup_offsets[start], page.markup_offsets[end]
        markup_ids.append(page.markup_ids[m0:m1])
        markup_offsets.append(page.markup_offsets[start:end] - m0 + markup_base)
        markup_base += m1 - m0
        mask = np.zeros(length, np.float32)
        mask[owned] = 1.0
        labels.append(page.labels[start:end])
        weights.append(page.weights[start:end] * mask)
    cat = np.concatenate
    return (
        torch.from_numpy(cat(numeric)),
        torch.from_numpy(cat(text_ids)),
        torch.from_numpy(cat(text_offsets)),
        torch.from_numpy(cat(markup_ids)),
        torch.from_numpy(cat(markup_offsets)),
        torch.from_numpy(cat(labels)),
        torch.from_numpy(cat(weights)),
        [length for _, _, length, _ in batch],
    )


def fit_network(
    pages: Sequence[PageExample],
    tokens: Sequence[BlockTokens],
    logits: Sequence[np.ndarray],
    indexes: Sequence[int],
    params: SeqTrainParams | None = None,
    seed: int = 0,
    quiet: bool = False,
    metadata: dict | None = None,
) -> SeqNetwork:
    """Train a network on ``pages[indexes]``.

    Args:
        pages, tokens: The training pages and their tokens (raw hashes or already bucketed).
        logits: Per page, ``(n_blocks, 2)`` stage-1 and stage-2 tree logits (out of fold).
        indexes: The pages to train on.
        params: Hyper-parameters (default :class:`SeqTrainParams`).
        seed: Seeds the initial weights and the order of the windows.
    """
    import torch

    params = params or SeqTrainParams()
    torch.set_num_threads(params.threads)
    prepared = _prepare(pages, tokens, logits, list(indexes), params)
    config = replace(params.config, n_numeric=prepared[0].numeric.shape[1])
    module = build_module(config, seed, params.dropout)
    stacked = np.concatenate([page.numeric for page in prepared]).astype(np.float64)
    mean, scale = stacked.mean(axis=0), stacked.std(axis=0)
    scale = np.where(scale > 1e-6, scale, 1.0)
    mean[-2:], scale[-2:] = 0.0, 4.0  # the tree logits keep their meaning (0 = undecided)
    module.numeric_mean.copy_(torch.from_numpy(mean.astype(np.float32)))
    module.numeric_scale.copy_(torch.from_numpy(scale.astype(np.float32)))
    rng = np.random.default_rng(seed)
    units = _window_units(prepared, config, rng)
    optimizer = torch.optim.AdamW(
        module.parameters(), lr=params.learning_rate, weight_decay=params.weight_decay
    )
    # Later epochs cut the pages elsewhere, into about as many windows: a margin keeps the schedule whole.
    steps = params.epochs * (
        (len(units) + params.batch - 1) // params.batch + len(prepared) // params.batch + 2
    )
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, params.learning_rate, total_steps=steps)
    started = time.perf_counter()
    for epoch in range(params.epochs):
        if epoch:
            units = _window_units(prepared, config, rng)
        order = rng.permutation(len(units))
        total, weight_sum = 0.0, 0.0
        for offset in range(0, len(order), params.batch):
            batch = [units[i] for i in order[offset : offset + params.batch]]
            numeric, t_ids, t_off, m_ids, m_off, labels, weights, lengths = _batch_tensors(batch, prepared)
            dense, tree_logit = module.block_inputs(numeric, t_ids, t_off, m_ids, m_off)
            padded = torch.nn.utils.rnn.pad_sequence(torch.split(dense, lengths), batch_first=True)
            scores = module(padded, torch.tensor(lengths))
            mask = torch.arange(padded.shape[1])[None, :] < torch.tensor(lengths)[:, None]
            logit = scores[mask] + module.tree_weight * tree_logit
            loss_each = torch.nn.functional.binary_cross_entropy_with_logits(logit, labels, reduction="none")
            loss = (loss_each * weights).sum() / weights.sum().clamp_min(1e-6)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
            optimizer.step()
            if schedule.last_epoch < steps - 1:
                schedule.step()
            total += float((loss_each * weights).sum().detach())
            weight_sum += float(weights.sum())
        if not quiet:
            print(
                f"[{time.strftime('%H:%M:%S')}] epoch {epoch + 1}/{params.epochs}: loss {total / weight_sum:.4f} "
                f"({len(units)} windows, {time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    module.eval()
    return module_to_network(module, config, metadata)
