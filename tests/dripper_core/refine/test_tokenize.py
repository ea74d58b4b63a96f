"""Megatron tokens: files Megatron-core reads, row-aligned with the corpus, decoding back to the text."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from dripper_core.refine.tokenize import (
    check_tokenizer,
    load_tokenizer_file,
    read_index,
    read_token_documents,
    resolve_tokenizer_file,
)


def corpus_part(refined, name: str) -> list[dict]:
    return pq.read_table(refined.output_root / "corpus" / f"{name}.parquet").to_pylist()


def test_tokens_round_trip(refined, tiny_tokenizer):
    tokenizer = load_tokenizer_file(tiny_tokenizer)
    eos = tokenizer.token_to_id("<|endoftext|>")
    checked = 0
    for part in ("part-00000", "part-00001"):
        rows = corpus_part(refined, part)
        prefix = str(refined.output_root / "tokens" / part)
        sequences = list(read_token_documents(prefix))
        assert len(sequences) == len(rows)
        for row, ids in zip(rows[:5], sequences[:5], strict=True):
            assert ids[-1] == eos
            assert tokenizer.decode(ids[:-1].tolist()) == tokenizer.normalizer.normalize_str(row["text"])
            assert len(ids) - 1 == row["token_count"]
            checked += 1
    assert checked == 10


def test_tokens_summary(refined, tiny_tokenizer):
    summary = json.loads((refined.output_root / "tokens" / "_summary.json").read_text())
    assert summary == refined.summary["tokens"]
    assert summary["documents"] == refined.summary["documents_out"]
    assert summary["tokens"] == refined.summary["tokens_out"] + summary["documents"]  # + one EOS each
    assert summary["dtype"] == "uint16" and summary["vocab_size"] == 1000
    assert summary["megatron_data_path"] == [
        str(refined.output_root / "tokens" / p) for p in ("part-00000", "part-00001")
    ]
    index = read_index(str(refined.output_root / "tokens" / "part-00000.idx"))
    assert index["version"] == 1 and index["dtype"] == np.uint16
    assert list(index["document_indices"]) == list(range(len(index["sequence_lengths"]) + 1))


def test_megatron_core_reads_the_files(refined):
    indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    prefix = str(refined.output_root / "tokens" / "part-00001")
    dataset = indexed.IndexedDataset(prefix, mmap=True)
    ours = list(read_token_documents(prefix))
    assert len(dataset) == len(ours) == len(corpus_part(refined, "part-00001"))
    for i in (0, len(ours) - 1):
        assert np.array_equal(dataset[i], ours[i])


def test_tokenizer_must_be_local(tmp_path):
    with pytest.raises(FileNotFoundError, match="offline"):
        resolve_tokenizer_file("Qwen/Qwen3-0.6B")
    (tmp_path / "vocab.txt").write_text("a\n")
    with pytest.raises(FileNotFoundError, match="without tokenizer.json"):
        resolve_tokenizer_file(tmp_path)


def test_eos_must_be_in_the_vocabulary(tiny_tokenizer):
    assert check_tokenizer(tiny_tokenizer, "<|endoftext|>")["eos_id"] == 0
    with pytest.raises(ValueError, match="not in the vocabulary"):
        check_tokenizer(tiny_tokenizer, "</s>")


QWEN = Path(__file__).resolve().parents[3] / ".cache" / "models" / "qwen-tokenizer"


def test_qwen_tokenizer_gives_int32_tokens_when_present():
    if not (QWEN / "tokenizer.json").exists():
        pytest.skip("the Qwen tokenizer under .cache/ is not built here")
    info = check_tokenizer(str(QWEN), "<|endoftext|>")
    assert info["vocab_size"] > 65536 and info["dtype"] == "int32" and info["eos_id"] == 151643
