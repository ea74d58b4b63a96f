"""Tokens in Megatron's indexed format: ``{root}/tokens/part-NNNNN.bin`` and ``.idx``, one pair per task.

:class:`MegatronTokenWriter` is datatrove's ``MegatronDocumentTokenizer`` with a tokenizer that must be a
local file (``tokenizer.json``, or a folder holding one: nothing is fetched from the Hub) and Megatron-style
file names. Each document is one sequence (its tokens, then ``eos_token``), in corpus order: sequence ``i``
of ``part-00003`` is row ``i`` of ``corpus/part-00003``.

The files are what Megatron-core's ``IndexedDataset(prefix)`` reads (the ``.idx`` holds the header
``MMIDIDX``, version 1, the dtype code, sequence lengths, byte offsets and document indices). Token ids are
``uint16`` for vocabularies up to 65,536 and ``int32`` above (Qwen's 151k). :func:`read_token_documents`
reads them back without torch; :func:`write_tokens_summary` lists the prefixes for training
(``tokens/_summary.json``).
"""

from __future__ import annotations

import json
import os
import posixpath
import struct
import time
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import numpy as np
from datatrove.pipeline.tokens.megatron_tokenizer import MegatronDocumentTokenizer, MegatronTokenizedFile
from datatrove.utils.batching import batched

from dripper_core.io.storage import filesystem_for, is_local, join_path

__all__ = [
    "TOKENS_SUMMARY_NAME",
    "MegatronTokenWriter",
    "load_tokenizer_file",
    "read_index",
    "read_token_documents",
    "resolve_tokenizer_file",
    "tokenize_corpus",
    "write_tokens_summary",
]

TOKENS_SUMMARY_NAME = "_summary.json"
_INDEX_HEADER = b"MMIDIDX\x00\x00"
#: Megatron-core's ``DType`` codes.
_DTYPES = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}


def resolve_tokenizer_file(path: str | os.PathLike[str]) -> str:
    """The ``tokenizer.json`` at ``path`` (a file, or a folder holding one); never a Hub name."""
    path = os.fspath(path)
    candidate = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(candidate):
        hint = (
            "a folder without tokenizer.json (a slow tokenizer? save it with "
            "transformers' AutoTokenizer.from_pretrained(dir).save_pretrained(dir) to get one)"
            if os.path.isdir(path)
            else "no such file"
        )
        raise FileNotFoundError(
            f"tokenize.tokenizer={path!r}: {hint}; give a local tokenizer.json or the folder holding it "
            "(Hub names are not fetched: runs must work offline)"
        )
    return os.path.abspath(candidate)


@lru_cache(maxsize=4)
def load_tokenizer_file(path: str) -> Any:
    """A ``tokenizers.Tokenizer`` from a local file, loaded once per process."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(resolve_tokenizer_file(path))


def check_tokenizer(path: str, eos_token: str | None) -> dict[str, Any]:
    """Load the tokenizer and check ``eos_token`` is in its vocabulary; returns its description."""
    tokenizer = load_tokenizer_file(path)
    eos_id = None
    if eos_token is not None:
        eos_id = tokenizer.token_to_id(eos_token)
        if eos_id is None:
            raise ValueError(
                f"tokenize.eos_token={eos_token!r} is not in the vocabulary of {path}; give the tokenizer's "
                "end-of-document token (Qwen and GPT-2: '<|endoftext|>') or null for none"
            )
    vocab_size = tokenizer.get_vocab_size()
    return {
        "tokenizer": resolve_tokenizer_file(path),
        "vocab_size": vocab_size,
        "eos_token": eos_token,
        "eos_id": eos_id,
        "dtype": "int32" if vocab_size > np.iinfo(np.uint16).max + 1 else "uint16",
    }


class MegatronTokenWriter(MegatronDocumentTokenizer):
    """Write each document's tokens (plus ``eos_token``) to ``{output_folder}/part-{rank:05d}.bin/.idx``.

    The last step of a pipeline: it consumes the documents and yields none.
    """

    name = "🔢 Megatron tokens"

    def __init__(
        self,
        output_folder: Any,
        tokenizer: str,
        eos_token: str | None = "<|endoftext|>",
        batch_size: int = 1000,
    ) -> None:
        super().__init__(
            output_folder,
            tokenizer_name_or_path=resolve_tokenizer_file(tokenizer),
            eos_token=eos_token,
            batch_size=batch_size,
        )

    def write_tokens(self, data: Any, filename: str) -> MegatronTokenizedFile:
        """datatrove's loop, counting documents and tokens by extractor (``docs/…``, ``tokens/…``)."""
        output = MegatronTokenizedFile(
            self.output_folder, filename, upload_block_size=self.upload_block_size, token_size=self.token_size
        )
        for batch in batched(data, self.batch_size):
            with self.track_time(unit="batch"):
                encoded = self.tokenizer.encode_batch([document.text for document in batch])
                for document, encoding in zip(batch, encoded, strict=True):
                    ids = encoding.ids
                    output.write(ids)
                    extractor = document.metadata.get("extractor") or "unknown"
                    self.stat_update("documents", f"docs/{extractor}")
                    self.stat_update("tokens", f"tokens/{extractor}", value=len(ids))
        output.close()
        return output

    def run(self, data: Any, rank: int = 0, world_size: int = 1) -> None:
        self.write_tokens(data or [], f"part-{rank:05d}")


def read_index(idx_path: str, fs: Any = None) -> dict[str, Any]:
    """The header and arrays of a Megatron ``.idx`` file."""
    opener = fs.open if fs is not None else open
    with opener(idx_path, "rb") as f:
        data = f.read()
    if data[:9] != _INDEX_HEADER:
        raise ValueError(f"{idx_path}: not a Megatron index (header {data[:9]!r})")
    (version,) = struct.unpack_from("<Q", data, 9)
    (code,) = struct.unpack_from("<B", data, 17)
    sequences, documents = struct.unpack_from("<QQ", data, 18)
    offset = 34
    lengths = np.frombuffer(data, dtype=np.int32, count=sequences, offset=offset)
    offset += 4 * sequences
    pointers = np.frombuffer(data, dtype=np.int64, count=sequences, offset=offset)
    offset += 8 * sequences
    document_indices = np.frombuffer(data, dtype=np.int64, count=documents, offset=offset)
    return {
        "version": version,
        "dtype": np.dtype(_DTYPES[code]),
        "sequence_lengths": lengths,
        "sequence_pointers": pointers,
        "document_indices": document_indices,
    }


def read_token_documents(prefix: str, limit: int | None = None) -> Iterator[np.ndarray]:
    """The token ids of each sequence of ``{prefix}.bin`` (local files), in order."""
    index = read_index(f"{prefix}.idx")
    if not len(index["sequence_lengths"]):
        return
    tokens = np.memmap(f"{prefix}.bin", dtype=index["dtype"], mode="r")
    itemsize = index["dtype"].itemsize
    for i, (length, pointer) in enumerate(
        zip(index["sequence_lengths"], index["sequence_pointers"], strict=True)
    ):
        if limit is not None and i >= limit:
            return
        start = int(pointer) // itemsize
        yield np.asarray(tokens[start : start + int(length)])


def write_tokens_summary(
    tokens_dir: str, tokenizer_info: dict[str, Any], storage_options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """List the non-empty ``part-*.idx`` prefixes of ``tokens_dir`` with their documents and tokens into
    ``{tokens_dir}/_summary.json`` (``megatron_data_path`` is ready for ``--data-path``)."""
    fs, path = filesystem_for(tokens_dir, storage_options)
    path = path.rstrip("/")
    fs.invalidate_cache(path)
    try:
        names = sorted(n for n in fs.ls(path, detail=False) if n.endswith(".idx"))
    except FileNotFoundError:
        names = []
    parts = []
    for name in names:
        index = read_index(name, fs)
        prefix = name.removesuffix(".idx")
        parts.append(
            {
                "prefix": prefix
                if is_local(tokens_dir)
                else join_path(tokens_dir, posixpath.basename(prefix)),
                "name": posixpath.basename(prefix),
                "documents": int(len(index["sequence_lengths"])),
                "tokens": int(index["sequence_lengths"].sum()),
            }
        )
    summary = {
        **tokenizer_info,
        "parts": parts,
        "documents": sum(p["documents"] for p in parts),
        "tokens": sum(p["tokens"] for p in parts),
        "megatron_data_path": [p["prefix"] for p in parts if p["documents"]],
    }
    with fs.open(posixpath.join(path, TOKENS_SUMMARY_NAME), "w") as f:
        f.write(json.dumps(summary, indent=1) + "\n")
    return summary


def tokenize_corpus(
    corpus_dir: str,
    tokens_dir: str,
    tokenizer: str,
    eos_token: str | None = "<|endoftext|>",
    *,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    log: Any = None,
) -> dict[str, Any]:
    """``corpus/part-X.parquet`` → ``tokens/part-X.bin/.idx`` (+ ``part-X.done``) and ``tokens/_summary.json``.

    The same writer and summary as the refinement's own tokenize step; this loop makes tokenization a step
    of its own (corpus_build's ``tokenize`` task), resumable per file.
    """
    import pyarrow.parquet as pq
    from datatrove.data import Document

    info = check_tokenizer(tokenizer, eos_token)
    corpus_fs, corpus_path = filesystem_for(corpus_dir, storage_options)
    tokens_fs, tokens_path = filesystem_for(tokens_dir, storage_options)
    tokens_path = tokens_path.rstrip("/")
    summary_path = posixpath.join(tokens_path, TOKENS_SUMMARY_NAME)
    if tokens_fs.exists(summary_path) or tokens_fs.exists(tokens_path):
        previous = None
        if tokens_fs.exists(summary_path):
            with tokens_fs.open(summary_path, "rb") as f:
                previous = json.loads(f.read())
        same = previous is None or (
            previous.get("tokenizer") == info["tokenizer"] and previous.get("eos_token") == info["eos_token"]
        )
        if force or not same:
            if not force:
                raise ValueError(
                    f"{tokens_dir} holds tokens of {previous.get('tokenizer')}; tokenizing with "
                    f"{info['tokenizer']} would mix two vocabularies: set force to start over"
                )
            tokens_fs.rm(tokens_path, recursive=True)
    tokens_fs.makedirs(tokens_path, exist_ok=True)
    corpus_fs.invalidate_cache(corpus_path)
    files = sorted(p for p in corpus_fs.glob(posixpath.join(corpus_path.rstrip("/"), "*.parquet")))
    output = tokens_path if storage_options is None else (tokens_path, tokens_fs)
    writer = MegatronTokenWriter(output, tokenizer, eos_token)
    for source in files:
        name = posixpath.basename(source).removesuffix(".parquet")
        done = posixpath.join(tokens_path, f"{name}.done")
        if tokens_fs.exists(done):
            continue
        started = time.perf_counter()

        def documents(source: str = source) -> Any:
            with corpus_fs.open(source, "rb") as f:
                for batch in pq.ParquetFile(f).iter_batches(
                    batch_size=1000, columns=["id", "text", "extractor"]
                ):
                    for row in batch.to_pylist():
                        yield Document(
                            text=row["text"] or "", id=row["id"], metadata={"extractor": row["extractor"]}
                        )

        output_file = writer.write_tokens(documents(), name)
        with tokens_fs.open(done, "wb") as f:
            f.write(b"")
        if log is not None:
            log.info(
                "%s: %d documents, %d tokens in %.1f s",
                name,
                len(output_file.sequence_lengths),
                len(output_file),
                time.perf_counter() - started,
            )
    return write_tokens_summary(tokens_dir, info, storage_options)
