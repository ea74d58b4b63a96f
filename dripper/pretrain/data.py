"""Training data: a weighted blend of Megatron indexed datasets (``.bin``/``.idx``) as GPT samples.

The refinement stage writes one or more indexed datasets per extractor under ``{root}/tokens/<extractor>/``.
A blend names dataset prefixes or folders, each with a weight; Megatron-core's
``BlendedMegatronDatasetBuilder`` turns it into fixed-length samples (documents concatenated, separated by
the end-of-document token the writer appended), shuffled with the run's seed and cached under the run folder.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True, slots=True)
class TokenizerInfo:
    """What the GPT dataset and the model need from a tokenizer (duck-types Megatron's tokenizer base)."""

    vocab_size: int
    eod: int
    pad: int

    @property
    def eos_id(self) -> int:
        return self.eod

    @property
    def unique_identifiers(self) -> dict[str, int | str]:
        # Part of the dataset cache key Megatron derives from its config.
        return {"class": type(self).__name__, "vocab_size": self.vocab_size, "eod": self.eod, "pad": self.pad}


def load_hf_tokenizer(path: Path | str):
    """A Hugging Face tokenizer from a local folder (never the Hub)."""
    from transformers import AutoTokenizer

    path = Path(path)
    if not (path / "tokenizer.json").exists() and not (path / "tokenizer_config.json").exists():
        raise FileNotFoundError(
            f"{path}: no tokenizer.json or tokenizer_config.json; pass a tokenizer folder"
        )
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def _fast_tokenizer_info(path: Path) -> TokenizerInfo | None:
    """:func:`tokenizer_info` read with the ``tokenizers`` library from ``tokenizer.json`` and the EOS token
    named in ``tokenizer_config.json``: no ``transformers`` import, which is most of a short training run's
    start-up. ``None`` when those files cannot say (the caller asks ``transformers``)."""
    import json

    files = path / "tokenizer.json", path / "tokenizer_config.json"
    if not all(file.is_file() for file in files):
        return None
    config = json.loads(files[1].read_text(encoding="utf-8"))
    eos = config.get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    if not isinstance(eos, str):
        return None
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(files[0]))
    except Exception:  # noqa: BLE001 - a file this tokenizers version cannot read: transformers decides
        return None
    eod = tokenizer.token_to_id(eos)
    if eod is None:
        return None
    # transformers' len() counts the config's added tokens too, where tokenizer.json lacks one.
    added = [int(key) for key in config.get("added_tokens_decoder") or {}]
    size = max([tokenizer.get_vocab_size(with_added_tokens=True), *(i + 1 for i in added)])
    return TokenizerInfo(vocab_size=size, eod=int(eod), pad=-1)


def tokenizer_info(path: Path | str) -> TokenizerInfo:
    """Vocabulary size and end-of-document id of the tokenizer in ``path``.

    The end-of-document id is the tokenizer's EOS token (``<|endoftext|>`` style tokenizers set it too).
    """
    fast = _fast_tokenizer_info(Path(path))
    if fast is not None:
        return fast
    tokenizer = load_hf_tokenizer(path)
    eod = tokenizer.eos_token_id
    if eod is None:
        raise ValueError(f"{path}: the tokenizer has no eos_token; set one (the end-of-document separator)")
    # Pad ids never occur in the indexed data here; a value past the vocabulary keeps Megatron's
    # pad masking from touching real tokens.
    return TokenizerInfo(vocab_size=len(tokenizer), eod=int(eod), pad=-1)


def find_prefixes(folder: Path | str) -> list[str]:
    """Every indexed dataset under ``folder`` (recursively), as sorted ``.bin``/``.idx`` path prefixes."""
    folder = Path(folder)
    prefixes = sorted(
        str(idx.with_suffix("")) for idx in folder.rglob("*.idx") if idx.with_suffix(".bin").exists()
    )
    if not prefixes:
        raise FileNotFoundError(f"{folder}: no .bin/.idx pair found (expected the refinement stage's tokens)")
    return prefixes


def count_tokens(prefix: str) -> int:
    """Tokens in one indexed dataset (read from its ``.idx``)."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    if Path(f"{prefix}.bin").stat().st_size == 0:  # an empty pair (Megatron cannot memory-map it)
        return 0
    # Keep the dataset alive while summing: its arrays are views of a memory map it closes when collected.
    dataset = IndexedDataset(prefix)
    total = int(dataset.sequence_lengths.sum())
    del dataset
    return total


def resolve_blend(
    data: Sequence[str], weights: Sequence[float] | None = None
) -> tuple[list[str], list[float] | None]:
    """Expand folders into their datasets and spread each entry's weight over them by token count.

    Args:
        data: Dataset prefixes or folders holding ``.bin``/``.idx`` pairs.
        weights: One non-negative weight per entry, or ``None`` to let Megatron weight by size.

    Returns:
        ``(prefixes, weights)`` as ``GPTDatasetConfig.blend`` takes them (weights sum to 1, or ``None``).
    """
    prefixes: list[str] = []
    expanded: list[float] = []
    for index, entry in enumerate(data):
        path = Path(entry)
        if path.is_dir():
            members = find_prefixes(path)
        elif Path(f"{entry}.idx").exists() and Path(f"{entry}.bin").exists():
            members = [str(path)]
        else:
            raise FileNotFoundError(
                f"--data {entry}: neither a folder nor a prefix of an existing .bin/.idx pair"
            )
        # A refinement task that kept no document writes an empty pair; Megatron cannot sample from it.
        sizes = {prefix: count_tokens(prefix) for prefix in members}
        members = [prefix for prefix in members if sizes[prefix] > 0]
        if not members:
            raise ValueError(f"--data {entry}: its indexed datasets hold no tokens")
        prefixes.extend(members)
        if weights is not None:
            weight = float(weights[index])
            if weight < 0:
                raise ValueError(f"--data-weights {weight} for {entry}: weights must not be negative")
            total = sum(sizes[prefix] for prefix in members)
            expanded.extend(weight * sizes[prefix] / total for prefix in members)
    if weights is None:
        return prefixes, None
    total_weight = sum(expanded)
    if total_weight <= 0:
        raise ValueError("--data-weights sum to zero")
    return prefixes, [w / total_weight for w in expanded]


def subset_corpus(
    prefixes: Sequence[str], max_tokens: int, out_prefix: Path | str, seed: int = 0
) -> dict[str, Any]:
    """Write a seeded random subset of the documents of ``prefixes`` holding at most ``max_tokens`` tokens
    as one indexed dataset ``out_prefix`` (documents in their original order).

    Documents are drawn in a random order (``seed``, fixed across training seeds, so every run of an arm
    trains on the same unique text) and kept while they fit. When the data holds no more than
    ``max_tokens``, nothing is written. An existing subset written with the same inputs is reused (a resumed
    run). Returns ``{"prefix", "tokens", "documents", "corpus_tokens", "corpus_documents"}``; ``prefix`` is
    ``None`` when the data is kept whole.
    """
    import json

    from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder

    out_prefix = Path(out_prefix)
    datasets = [IndexedDataset(prefix) for prefix in prefixes]
    lengths = [np.asarray(d.sequence_lengths, dtype=np.int64) for d in datasets]
    corpus_tokens = int(sum(int(length.sum()) for length in lengths))
    corpus_documents = int(sum(len(length) for length in lengths))
    whole = {"prefix": None, "tokens": corpus_tokens, "documents": corpus_documents,
             "corpus_tokens": corpus_tokens, "corpus_documents": corpus_documents}  # fmt: skip
    if corpus_tokens <= max_tokens:
        return whole
    meta_path = out_prefix.with_suffix(".json")
    key = {"prefixes": [str(p) for p in prefixes], "max_tokens": int(max_tokens), "seed": int(seed),
           "corpus_tokens": corpus_tokens}  # fmt: skip
    if meta_path.exists() and Path(f"{out_prefix}.idx").exists():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("key") == key:
            return meta["result"]
    documents = [(i, j) for i, length in enumerate(lengths) for j in range(len(length))]
    order = np.random.default_rng(seed).permutation(len(documents))
    chosen, total = [], 0
    for index in order:
        i, j = documents[index]
        size = int(lengths[i][j])
        if total + size <= max_tokens:
            chosen.append((i, j))
            total += size
    if not chosen:
        raise ValueError(f"--data-token-limit {max_tokens}: smaller than every document of the data")
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    dtype = max((d.index.dtype for d in datasets), key=lambda t: np.dtype(t).itemsize)
    builder = IndexedDatasetBuilder(f"{out_prefix}.bin", dtype=dtype)
    for i, j in sorted(chosen):
        builder.add_document(
            torch.from_numpy(np.asarray(datasets[i][j], dtype=np.int64)), [int(lengths[i][j])]
        )
    builder.finalize(f"{out_prefix}.idx")
    result = {"prefix": str(out_prefix), "tokens": total, "documents": len(chosen),
              "corpus_tokens": corpus_tokens, "corpus_documents": corpus_documents}  # fmt: skip
    meta_path.write_text(json.dumps({"key": key, "result": result}, indent=1), encoding="utf-8")
    del datasets
    return result


def build_gpt_dataset(
    prefixes: Sequence[str],
    weights: Sequence[float] | None,
    num_samples: int,
    seq_length: int,
    tokenizer: TokenizerInfo,
    seed: int,
    cache_dir: Path | str | None = None,
    eod_mask_loss: bool = False,
):
    """Megatron's blended GPT training dataset with ``num_samples`` samples of ``seq_length`` tokens.

    Each item is a dict of 1-D tensors: ``tokens``, ``labels`` (tokens shifted by one), ``loss_mask`` and
    ``position_ids``. Call on every rank after :func:`dripper.pretrain.model.init_parallel`.
    """
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    config = GPTDatasetConfig(
        random_seed=seed,
        sequence_length=seq_length,
        blend=(list(prefixes), list(weights) if weights is not None else None),
        split="100,0,0",
        path_to_cache=str(cache_dir) if cache_dir else None,
        tokenizer=tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=eod_mask_loss,
        create_attention_mask=False,
        mid_level_dataset_surplus=0.05,
    )
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [num_samples, 0, 0], lambda: True, config).build()
    return train


class MicroBatchSampler:
    """Index batches for one data-parallel rank, starting after ``consumed_samples`` (for resuming).

    Samples are taken in order in global batches of ``micro_batch_size * data_parallel`` consecutive
    indices; rank ``r`` gets the ``r``-th slice of each. The dataset itself is already shuffled.
    """

    def __init__(
        self, total_samples: int, consumed_samples: int, micro_batch_size: int, dp_rank: int, dp_size: int
    ) -> None:
        self.total_samples = total_samples
        self.consumed_samples = consumed_samples
        self.micro_batch_size = micro_batch_size
        self.dp_rank = dp_rank
        self.dp_size = dp_size

    def __iter__(self) -> Iterator[list[int]]:
        step = self.micro_batch_size * self.dp_size
        start = self.consumed_samples
        while start + step <= self.total_samples:
            first = start + self.dp_rank * self.micro_batch_size
            yield list(range(first, first + self.micro_batch_size))
            start += step

    def __len__(self) -> int:
        return max(0, (self.total_samples - self.consumed_samples) // (self.micro_batch_size * self.dp_size))


def micro_batches(
    dataset: Any,
    consumed_samples: int,
    micro_batch_size: int,
    dp_rank: int,
    dp_size: int,
    num_workers: int = 0,
) -> Iterator[dict[str, torch.Tensor]]:
    """Iterate this rank's micro-batches (dicts of ``[micro_batch, seq]`` tensors) from ``consumed_samples``."""
    sampler = MicroBatchSampler(len(dataset), consumed_samples, micro_batch_size, dp_rank, dp_size)
    loader = torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, num_workers=num_workers, pin_memory=torch.cuda.is_available()
    )
    return iter(loader)


def write_indexed_dataset(
    documents: Iterable[Sequence[int]], prefix: Path | str, vocab_size: int, eod: int | None = None
) -> Path:
    """Write token-id documents as a Megatron indexed dataset ``{prefix}.bin``/``{prefix}.idx``.

    ``eod`` is appended to every document when given. Returns the prefix. (The refinement stage writes the
    real corpora; this serves tests and small local experiments.)
    """
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=DType.optimal_dtype(vocab_size))
    for document in documents:
        ids = list(document) + ([eod] if eod is not None else [])
        builder.add_document(torch.tensor(np.asarray(ids, dtype=np.int64)), [len(ids)])
    builder.finalize(f"{prefix}.idx")
    return prefix
