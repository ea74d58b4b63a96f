"""Helpers shared by the pretraining tests and the lm-eval tests: a toy tokenizer, corpora, a tiny trained model.

Everything is built from the bundled sample pages (``data/sample/pages.jsonl.gz``); nothing is downloaded.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SAMPLE_PAGES = REPO / "data" / "sample" / "pages.jsonl.gz"


@dataclass(frozen=True)
class ToyCorpus:
    tokenizer: Path
    tokens_root: Path  # {root}/tokens/<extractor>/part-00000.{bin,idx}, like the refinement stage writes
    extractors: tuple[str, ...]


def sample_texts() -> list[str]:
    with gzip.open(SAMPLE_PAGES, "rt", encoding="utf-8") as lines:
        return [text for line in lines if (text := json.loads(line).get("ground_truth_text"))]


def make_toy_corpus(root: Path, vocab_size: int = 512) -> ToyCorpus:
    """A BPE tokenizer fitted on the sample and two 'extractor' corpora (halves of the sample)."""
    from dripper.pretrain.toy import train_tokenizer, write_corpus

    texts = sample_texts()
    tokenizer = train_tokenizer(texts, root / "tokenizer", vocab_size)
    half = len(texts) // 2
    write_corpus(texts[:half], tokenizer, root / "tokens" / "alpha" / "part-00000")
    write_corpus(texts[half:], tokenizer, root / "tokens" / "beta" / "part-00000")
    return ToyCorpus(tokenizer=tokenizer, tokens_root=root / "tokens", extractors=("alpha", "beta"))


def tiny_train_config(corpus: ToyCorpus, out_dir: Path, steps: int, **overrides):
    from dripper.pretrain.config import TrainConfig

    options = {
        "out_dir": out_dir,
        "data": [str(corpus.tokens_root / name) for name in corpus.extractors],
        "data_weights": [0.5, 0.5],
        "tokenizer": corpus.tokenizer,
        "model": "tiny",
        "train_steps": steps,
        "micro_batch_size": 4,
        "global_batch_size": 8,
        "save_interval": 4,
        "keep_checkpoints": 0,
        "lr": 5e-3,
        "min_lr": 5e-4,
        "warmup_steps": 2,
        "device": "cpu",
        "precision": "fp32",
    }
    options.update(overrides)
    return TrainConfig(**options)
