"""The numpy network against the torch module it was trained as, and its windows."""

from __future__ import annotations

import numpy as np
import pytest

from dripper.labelers.cpu_seq.network import NetworkConfig, SeqNetwork, windows
from dripper.labelers.cpu_seq.tokens import BlockTokens


@pytest.mark.parametrize("n_blocks", [0, 1, 2, 31, 32, 33, 100, 1000, 20_000])
@pytest.mark.parametrize(("length", "stride"), [(32, 16), (32, 32), (128, 64), (7, 3)])
def test_windows_cover_every_block_once(n_blocks, length, stride):
    starts, owner = windows(n_blocks, length, stride)
    assert owner.shape == (n_blocks,)
    position = np.arange(n_blocks) - starts[owner]
    assert (position >= 0).all() and (position < length).all()  # every block inside its owner
    assert starts[-1] + length >= n_blocks  # the last window reaches the page's end
    if n_blocks > length:
        assert (np.diff(starts) <= stride).all() and starts[-1] == n_blocks - length
        # An inner block keeps some context on both sides of its owner window.
        inner = (np.arange(n_blocks) >= length) & (np.arange(n_blocks) < n_blocks - length)
        margin = np.minimum(position, length - 1 - position)[inner]
        assert (margin >= (length - stride) // 2 - 1).all()


def _random_page(n_blocks: int, n_features: int, buckets: int, seed: int):
    rng = np.random.default_rng(seed)
    numeric = rng.normal(size=(n_blocks, n_features)).astype(np.float32)
    numeric[:, -2:] *= 4.0

    def bags():
        counts = rng.integers(1, 6, size=n_blocks)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return rng.integers(0, buckets, size=int(offsets[-1])).astype(np.int64), offsets

    text_ids, text_offsets = bags()
    markup_ids, markup_offsets = bags()
    return numeric, BlockTokens(text_ids, text_offsets, markup_ids, markup_offsets)


def _torch_logits(module, config, numeric, tokens):
    """The torch module over the same windows, each block from its owner window."""
    import torch

    with torch.no_grad():
        dense, tree = module.block_inputs(
            torch.from_numpy(numeric),
            torch.from_numpy(tokens.text_ids),
            torch.from_numpy(tokens.text_offsets[:-1]),
            torch.from_numpy(tokens.markup_ids),
            torch.from_numpy(tokens.markup_offsets[:-1]),
        )
        starts, owner = windows(numeric.shape[0], config.window, config.stride)
        pieces = [dense[s : s + config.window] for s in starts.tolist()]
        lengths = torch.tensor([len(piece) for piece in pieces])
        padded = torch.nn.utils.rnn.pad_sequence(pieces, batch_first=True)
        scores = module(padded, lengths).numpy()
        position = np.arange(numeric.shape[0]) - starts[owner]
        return scores[owner, position] + float(module.tree_weight) * tree.numpy()


def test_numpy_network_equals_torch_module(tmp_path):
    torch = pytest.importorskip("torch")
    from dripper.labelers.cpu_seq.train import build_module, module_to_network

    torch.set_num_threads(1)
    config = NetworkConfig(
        buckets=512, embedding=8, n_numeric=12, hidden=16, gru=8, head=8, window=32, stride=16
    )
    module = build_module(config, seed=3)
    with torch.no_grad():  # non-trivial standardisation and skip weight
        module.numeric_mean.uniform_(-0.5, 0.5)
        module.numeric_scale.uniform_(0.5, 2.0)
        module.tree_weight.fill_(0.7)
        module.head2.weight.normal_(0.0, 0.5)  # the head starts at zero: give the GRU's path a say
        module.head2.bias.fill_(0.1)
    module.eval()
    network = module_to_network(module, config)
    pages = [_random_page(n, 12, 512, seed) for seed, n in enumerate((1, 5, 32, 100, 257))]
    got = network.logits(pages)  # all pages in one batch: padding must not leak between windows
    for (numeric, tokens), logits in zip(pages, got, strict=True):
        expected = _torch_logits(module, config, numeric, tokens)
        assert logits.shape == (numeric.shape[0],)
        np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=0)
    # One page alone scores as in the batch.
    np.testing.assert_allclose(network.logits([pages[3]])[0], got[3], atol=1e-5, rtol=0)

    # The file keeps float16 weights: close to, not equal to, the float32 network.
    loaded = SeqNetwork.load(network.save(tmp_path / "net.npz"))
    assert loaded.config == config
    np.testing.assert_allclose(loaded.logits(pages)[4], got[4], atol=0.05)


def test_load_rejects_another_file(tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, header=np.array('{"format": "other", "format_version": 1}'))
    with pytest.raises(ValueError, match="not a cpu_seq model"):
        SeqNetwork.load(path)
    with pytest.raises(FileNotFoundError, match="train one"):
        SeqNetwork.load(tmp_path / "missing.npz")
