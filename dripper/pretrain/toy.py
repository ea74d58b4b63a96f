"""A small local tokenizer and token corpus, for smoke runs and tests without the refinement stage.

``train_tokenizer`` fits a byte-level BPE (``tokenizers``) on local text and saves it as a Hugging Face
tokenizer folder; ``write_corpus`` tokenizes documents into a Megatron indexed dataset with that tokenizer.
Nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from dripper.pretrain.data import write_indexed_dataset

EOD_TOKEN = "<|endoftext|>"


def train_tokenizer(texts: Iterable[str], out_dir: Path | str, vocab_size: int = 512) -> Path:
    """Fit a byte-level BPE of ``vocab_size`` on ``texts``; save it (with ``<|endoftext|>`` as EOS) in ``out_dir``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOD_TOKEN, pad_token=EOD_TOKEN)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    wrapped.save_pretrained(str(out_dir))
    return out_dir


def write_corpus(texts: Sequence[str], tokenizer_dir: Path | str, prefix: Path | str) -> Path:
    """Tokenize ``texts`` (one document each, EOD appended) into ``{prefix}.bin``/``{prefix}.idx``."""
    from dripper.pretrain.data import load_hf_tokenizer

    tokenizer = load_hf_tokenizer(tokenizer_dir)
    documents = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts if text.strip()]
    return write_indexed_dataset(documents, prefix, vocab_size=len(tokenizer), eod=tokenizer.eos_token_id)
