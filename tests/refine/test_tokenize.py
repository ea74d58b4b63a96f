"""Megatron tokens: files Megatron-core reads, row-aligned with the corpus, decoding back to the text."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from dripper.refine.tokenize import (
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


QWEN = Path(__file__).resolve().parents[2] / ".cache" / "models" / "qwen-tokenizer"


def test_qwen_tokenizer_gives_int32_tokens_when_present():
    if not (QWEN / "tokenizer.json").exists():
        pytest.skip("the Qwen tokenizer under .cache/ is not built here")
    info = check_tokenizer(str(QWEN), "<|endoftext|>")
    assert info["vocab_size"] > 65536 and info["dtype"] == "int32" and info["eos_id"] == 151643


def _token_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.suffix in (".bin", ".idx")}


def test_tokenize_corpus_gives_the_refine_steps_tokens(refined, tiny_tokenizer, tmp_path):
    """The two front ends of one tokenize path: the refinement's ``tokenize`` step and ``tokenize_corpus``
    (``dripper run tokenize``, the tokenize task) write the same bytes and the same summary."""
    from dripper.refine.tokenize import tokenize_corpus

    tokens = tmp_path / "tokens"
    summary = tokenize_corpus(str(refined.output_root / "corpus"), str(tokens), tiny_tokenizer)
    reference = refined.output_root / "tokens"
    assert _token_files(tokens) == _token_files(reference)
    assert sorted(p.name for p in tokens.glob("*.done")) == ["part-00000.done", "part-00001.done"]
    expected = json.loads((reference / "_summary.json").read_text())
    for data in (summary, expected):
        data["megatron_data_path"] = [Path(p).name for p in data["megatron_data_path"]]
        for part in data["parts"]:
            part["prefix"] = Path(part["prefix"]).name
    assert summary == expected


def _write_corpus(folder: Path, parts: dict[str, list[str]]) -> None:
    import pyarrow as pa

    folder.mkdir(parents=True)
    for name, texts in parts.items():
        rows = [{"id": f"{name}/{i}", "text": t, "extractor": "x"} for i, t in enumerate(texts)]
        pq.write_table(pa.Table.from_pylist(rows), folder / f"{name}.parquet")


def test_tokenize_corpus_keeps_every_row_and_resumes_per_file(tiny_tokenizer, tmp_path):
    """Empty texts still get their sequence (the EOS alone: datatrove's own readers would drop them and
    shift every later row); finished files are kept on a rerun, new ones are tokenized; another tokenizer is
    refused."""
    from dripper.refine.tokenize import tokenize_corpus

    corpus, tokens = tmp_path / "corpus", tmp_path / "tokens"
    _write_corpus(corpus, {"part-00000": ["Hello world.", "", "Again."], "part-00003": [""]})
    summary = tokenize_corpus(str(corpus), str(tokens), tiny_tokenizer)
    assert [(p["name"], p["documents"]) for p in summary["parts"]] == [("part-00000", 3), ("part-00003", 1)]
    eos = load_tokenizer_file(tiny_tokenizer).token_to_id("<|endoftext|>")
    assert [ids.tolist() for ids in read_token_documents(str(tokens / "part-00000"))][1] == [eos]
    kept = (tokens / "part-00000.bin").stat().st_mtime_ns
    _write_corpus(tmp_path / "more", {"part-00004": ["New text."]})
    (tmp_path / "more" / "part-00004.parquet").rename(corpus / "part-00004.parquet")
    summary = tokenize_corpus(str(corpus), str(tokens), tiny_tokenizer)
    assert summary["documents"] == 5 and (tokens / "part-00000.bin").stat().st_mtime_ns == kept
    other = tmp_path / "other.json"
    other.write_text((Path(tiny_tokenizer) / "tokenizer.json").read_text())
    with pytest.raises(ValueError, match="mix two vocabularies"):
        tokenize_corpus(str(corpus), str(tokens), str(other))


def test_tokenize_corpus_on_s3(tiny_tokenizer, tmp_path, s3_options, s3_filesystem):
    from dripper.refine.tokenize import tokenize_corpus

    _write_corpus(tmp_path / "corpus", {"part-00000": ["One.", "Two."], "part-00001": ["Three."]})
    s3_filesystem.mkdir("tokenize-run", region_name="eu-west-1")
    s3_filesystem.put(str(tmp_path / "corpus"), "tokenize-run/x/", recursive=True)
    local = tokenize_corpus(str(tmp_path / "corpus"), str(tmp_path / "tokens"), tiny_tokenizer)
    remote = tokenize_corpus(
        "s3://tokenize-run/x/corpus", "s3://tokenize-run/x/tokens", tiny_tokenizer, storage_options=s3_options
    )
    assert remote["megatron_data_path"] == [f"s3://tokenize-run/x/tokens/part-0000{i}" for i in (0, 1)]
    assert remote["documents"] == local["documents"] == 3 and remote["tokens"] == local["tokens"]
    for name, data in _token_files(tmp_path / "tokens").items():
        assert s3_filesystem.cat(f"tokenize-run/x/tokens/{name}") == data


def test_a_lost_document_fails_the_file(tiny_tokenizer, tmp_path, monkeypatch):
    """Were a reader to drop a row, the token file would no longer be row-aligned: an error, and no
    ``.done`` marker (a rerun tokenizes the file again)."""
    from dripper.refine import tokenize

    read_file = tokenize.CorpusFileReader.read_file

    def dropping(self, filepath):
        yield from (doc for doc in read_file(self, filepath) if doc.text)

    monkeypatch.setattr(tokenize.CorpusFileReader, "read_file", dropping)
    _write_corpus(tmp_path / "corpus", {"part-00000": ["Hello.", "", "Again."]})
    with pytest.raises(RuntimeError, match="2 sequences for the 3 rows"):
        tokenize.tokenize_corpus(str(tmp_path / "corpus"), str(tmp_path / "tokens"), tiny_tokenizer)
    assert not (tmp_path / "tokens" / "part-00000.done").exists()
