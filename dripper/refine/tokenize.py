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

One path, two front ends: the refinement's ``tokenize`` step puts the writer after the corpus writer; a
tokenize stage of its own (:func:`tokenize_corpus`) puts it after :class:`CorpusFileReader` over the corpus
files, in the same kind of datatrove pipeline, and writes the same bytes.
"""

from __future__ import annotations

import json
import os
import posixpath
import struct
import time
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
from datatrove.pipeline.readers.parquet import ParquetReader
from datatrove.pipeline.tokens.megatron_tokenizer import MegatronDocumentTokenizer, MegatronTokenizedFile
from datatrove.utils.batching import batched

from dripper.io.storage import filesystem_for, is_local, join_path

__all__ = [
    "TOKENS_SUMMARY_NAME",
    "CorpusFileReader",
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

    The last step of a pipeline: it consumes the documents and yields none. ``file_names``: the names of
    the tasks' files instead (task ``r`` writes ``file_names[r]`` and then ``file_names[r].done``), for a
    pipeline over named corpus files.
    """

    name = "🔢 Megatron tokens"

    def __init__(
        self,
        output_folder: Any,
        tokenizer: str,
        eos_token: str | None = "<|endoftext|>",
        batch_size: int = 1000,
        file_names: Sequence[str] | None = None,
    ) -> None:
        self.file_names = list(file_names) if file_names is not None else None
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
        name = self.file_names[rank] if self.file_names is not None else f"part-{rank:05d}"
        self.write_tokens(data or [], name)
        if self.file_names is not None:  # resumable per named file (tokenize_corpus), not per task
            with self.output_folder.open(f"{name}.done", "wb"):
                pass


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


class CorpusFileReader(ParquetReader):
    """Read whole corpus files (``files``, relative to ``data_folder``): task ``r`` reads ``files[r]``.

    Every row becomes a document, an empty text included (datatrove's own readers drop those, which would
    shift every later row of the token file against the corpus); rows count as ``rows``.
    """

    name = "📒 Corpus files"

    def __init__(self, data_folder: Any, files: Sequence[str], batch_size: int = 1000) -> None:
        super().__init__(data_folder, batch_size=batch_size)
        self.files = list(files)

    def read_file(self, filepath: str) -> Any:
        import pyarrow.parquet as pq
        from datatrove.data import Document

        with self.data_folder.open(filepath, "rb") as f, pq.ParquetFile(f) as parquet:
            for batch in parquet.iter_batches(
                batch_size=self.batch_size, columns=["id", "text", "extractor"]
            ):
                for row in batch.to_pylist():
                    self.stat_update("rows")
                    yield Document(
                        text=row["text"] or "", id=row["id"], metadata={"extractor": row["extractor"]}
                    )

    def run(self, data: Any = None, rank: int = 0, world_size: int = 1) -> Any:
        yield from self.read_files_shard(self.files[rank : rank + 1])


def _check_previous_tokens(
    fs: Any, tokens_path: str, info: dict[str, Any], force: bool, tokens_dir: str
) -> None:
    """Start over on ``force``; refuse tokens of another tokenizer (or end-of-document token)."""
    summary_path = posixpath.join(tokens_path, TOKENS_SUMMARY_NAME)
    if not (fs.exists(summary_path) or fs.exists(tokens_path)):
        return
    previous = None
    if fs.exists(summary_path):
        with fs.open(summary_path, "rb") as f:
            previous = json.loads(f.read())
    same = previous is None or (
        previous.get("tokenizer") == info["tokenizer"] and previous.get("eos_token") == info["eos_token"]
    )
    if not same and not force:
        raise ValueError(
            f"{tokens_dir} holds tokens of {previous.get('tokenizer')}; tokenizing with "
            f"{info['tokenizer']} would mix two vocabularies: set force to start over"
        )
    if force or not same:
        fs.rm(tokens_path, recursive=True)


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

    The refinement's own tokenize step as a pass of its own (corpus_build's ``tokenize`` task, ``dripper
    run tokenize``): the same :class:`MegatronTokenWriter`, fed by :class:`CorpusFileReader` instead of the
    refinement's last step, in a datatrove pipeline with one task per corpus file not yet tokenized (the
    ``.done`` markers make it resumable per file, whatever the task numbers). Each token file is checked to
    hold one sequence per corpus row. Returns the summary (:func:`write_tokens_summary`).
    """
    import tempfile

    from datatrove.executor import LocalPipelineExecutor

    info = check_tokenizer(tokenizer, eos_token)
    corpus_fs, corpus_path = filesystem_for(corpus_dir, storage_options)
    tokens_fs, tokens_path = filesystem_for(tokens_dir, storage_options)
    corpus_path, tokens_path = corpus_path.rstrip("/"), tokens_path.rstrip("/")
    _check_previous_tokens(tokens_fs, tokens_path, info, force, tokens_dir)
    tokens_fs.makedirs(tokens_path, exist_ok=True)
    corpus_fs.invalidate_cache(corpus_path)
    tokens_fs.invalidate_cache(tokens_path)
    names = [
        posixpath.basename(p).removesuffix(".parquet") for p in corpus_fs.glob(f"{corpus_path}/*.parquet")
    ]
    todo = [
        name for name in sorted(names) if not tokens_fs.exists(posixpath.join(tokens_path, f"{name}.done"))
    ]
    if todo:
        started = time.perf_counter()
        pipeline = [
            CorpusFileReader((corpus_path, corpus_fs), [f"{name}.parquet" for name in todo]),
            MegatronTokenWriter((tokens_path, tokens_fs), tokenizer, eos_token, file_names=todo),
        ]
        with tempfile.TemporaryDirectory(prefix="dripper-tokenize-logs-") as logs:  # resumes by .done
            LocalPipelineExecutor(
                pipeline, tasks=len(todo), workers=1, logging_dir=logs, skip_completed=False
            ).run()
        for name in todo:
            counts = _check_row_aligned(
                corpus_fs, f"{corpus_path}/{name}.parquet", tokens_fs, f"{tokens_path}/{name}"
            )
            if log is not None:
                log.info("%s: %d documents, %d tokens", name, *counts)
        if log is not None:
            log.info("%d corpus files tokenized in %.1f s", len(todo), time.perf_counter() - started)
    return write_tokens_summary(tokens_dir, info, storage_options)


def _check_row_aligned(corpus_fs: Any, corpus_file: str, tokens_fs: Any, prefix: str) -> tuple[int, int]:
    """Sequence ``i`` of ``prefix`` is row ``i`` of ``corpus_file``: as many of each, or an error (and the
    file's ``.done`` marker removed, so a rerun tokenizes it again). Returns (documents, tokens)."""
    import pyarrow.parquet as pq

    with corpus_fs.open(corpus_file, "rb") as f:
        rows = pq.ParquetFile(f).metadata.num_rows
    lengths = read_index(f"{prefix}.idx", tokens_fs)["sequence_lengths"]
    if len(lengths) != rows:
        tokens_fs.rm(f"{prefix}.done")
        raise RuntimeError(
            f"{prefix}.bin holds {len(lengths)} sequences for the {rows} rows of {corpus_file}: a document "
            "was lost on the way; the token files must stay row-aligned with the corpus"
        )
    return rows, int(lengths.sum())
