"""Fixtures of the refinement tests: extracted shards made from the bundled sample, a tokenizer trained
offline, and a network that refuses connections.

The extracted shards are pages of the sample snapshot's WARC files run through
``dripper.pipeline.extract_batch`` with the ``trafilatura`` labeler and written in the extracted-shard
schema, one shard per WARC file. The pages: every duplicate, near-duplicate, low-quality and junk page of
the sample (``data/sample/README.md``), the pages they copy, and every page under 60 kB (70 of the 196,
about 7 s of extraction on two cores instead of 35 s). The shards are cached in pytest's cache folder,
keyed by the sample manifest and the schema (``pytest --cache-clear`` rebuilds them).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample"
FIXTURE_VERSION = 2
MAX_PAYLOAD = 60_000
_COPY_SUFFIX = re.compile(r"[?&](?:utm_source=sample-duplicate|output=print\d+)$")


def selected(pages: list) -> list:
    """The fixture's pages (module docstring) of the sample's pages (``WarcPage``, all files)."""
    copies = {_COPY_SUFFIX.sub("", page.url) for page in pages if _COPY_SUFFIX.search(page.url)}
    return [
        page
        for page in pages
        if len(page.payload) < MAX_PAYLOAD
        or _COPY_SUFFIX.search(page.url)
        or page.url in copies
        or "/synthetic/" in page.url
    ]


def extracted_rows(pages: list) -> list[dict]:
    """Extracted rows (extracted-shard schema) of WARC pages."""
    from dripper.pipeline import extract_batch

    core_pages = [page.to_page() for page in pages]
    results = extract_batch(core_pages, labeler="trafilatura")
    rows = []
    for page, result in zip(core_pages, results, strict=True):
        rows.append(
            {
                "doc_id": result.doc_id,
                "url": result.url,
                "markdown": result.markdown,
                "main_html": result.main_html,
                "labels": result.labels,
                "extractor": result.extractor,
                "fallback_reason": result.fallback_reason,
                "stats": json.dumps(
                    {k: v for k, v in result.stats.items() if k != "confidence"}, sort_keys=True, default=str
                ),
                "warc_file": page.metadata["warc_file"],
                "warc_offset": page.metadata["warc_offset"],
                "fetch_date": page.metadata["fetch_date"],
                "content_type": "text/html",
                "payload_digest": page.metadata["payload_digest"],
                "encoding": result.stats.get("encoding"),
                "n_blocks": result.stats.get("n_blocks"),
                "simplify_status": "ok",
            }
        )
    return rows


def build_extracted_root(root: Path) -> Path:
    """Write ``{root}/extracted/part-0000{0..3}.parquet`` (with markers), one shard per sample WARC file."""
    import pyarrow as pa

    from dripper.io.warc import iter_warc_pages
    from dripper.stages.extract import extracted_schema
    from dripper.stages.shards import ShardStats, run_shard

    warcs = sorted(glob.glob(str(SAMPLE / "crawl-data" / "*" / "segments" / "*" / "warc" / "*.warc.gz")))
    assert len(warcs) == 4, warcs
    by_file = {warc: list(iter_warc_pages(warc, warc_name=os.path.relpath(warc, SAMPLE))) for warc in warcs}
    keep = {id(page) for page in selected([page for pages in by_file.values() for page in pages])}
    for index, warc in enumerate(warcs):
        pages = [page for page in by_file[warc] if id(page) in keep]

        def compute(pages=pages):
            rows = extracted_rows(pages)
            stats = ShardStats(rows_in=len(rows), rows_out=len(rows))
            return pa.Table.from_pylist(rows, schema=extracted_schema()), stats

        run_shard(str(root / "extracted"), index, compute)
    return root


def _fixture_key() -> str:
    from dripper.labelers.cpu.model import default_model_path
    from dripper.stages.extract import extracted_schema

    digest = hashlib.sha256((SAMPLE / "manifest.json").read_bytes())
    digest.update(str(extracted_schema()).encode())
    digest.update(default_model_path().read_bytes())  # a new shipped model extracts other rows
    digest.update(str(FIXTURE_VERSION).encode())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def extracted_root(request, tmp_path_factory) -> Path:
    """A run root holding ``extracted/`` made from the sample snapshot (cached across sessions)."""
    from filelock import FileLock

    cache_dir = Path(request.config.cache.mkdir(f"dripper-refine-extracted-{_fixture_key()}"))
    with FileLock(cache_dir / "build.lock"):  # two pytest-xdist workers: one builds, the other waits
        if not (cache_dir / "extracted" / "part-00003.done.json").exists():
            building = tmp_path_factory.mktemp("extracted-build")
            build_extracted_root(building)
            shutil.rmtree(cache_dir / "extracted", ignore_errors=True)
            shutil.copytree(building / "extracted", cache_dir / "extracted")
    root = tmp_path_factory.mktemp("extracted-root")
    shutil.copytree(cache_dir / "extracted", root / "extracted")
    return root


@pytest.fixture(scope="session")
def sample_texts() -> list[str]:
    from tests.conftest import SAMPLE_PAGES, read_records

    return [record["ground_truth_text"] for record in read_records(SAMPLE_PAGES)]


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory, sample_texts) -> str:
    """A byte-level BPE (1,000 ids, NFC normalisation, ``<|endoftext|>``) trained on the sample's ground
    truth and saved as ``tokenizer.json`` in a folder: nothing downloaded."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(sample_texts, trainer)
    folder = tmp_path_factory.mktemp("tiny-tokenizer")
    tokenizer.save(str(folder / "tokenizer.json"))
    return str(folder)


class NetworkBlocked(OSError):
    """Raised by any attempt to reach the network during an offline test."""


@contextlib.contextmanager
def network_blocked():
    """No network inside: internet sockets refuse to connect and name lookups fail; Hub libraries are told
    they are offline. Unix sockets (multiprocessing managers) still work. Yields the list of attempts."""
    attempts: list[object] = []
    real_connect = socket.socket.connect

    def guarded_connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            attempts.append(address)
            raise NetworkBlocked(f"network access attempted during an offline test: {address!r}")
        return real_connect(self, address)

    def no_lookup(*args, **kwargs):
        attempts.append(args[:2])
        raise NetworkBlocked(f"name lookup attempted during an offline test: {args[:2]!r}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", guarded_connect)
        patch.setattr(socket, "getaddrinfo", no_lookup)
        patch.setattr(socket, "create_connection", no_lookup)
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
            patch.setenv(name, "1")
        # The libraries read those variables once, at import: where an earlier test imported them online,
        # a blocked connection is retried with back-off (tens of seconds) instead of failing at once.
        for module, names in (
            ("huggingface_hub.constants", ("HF_HUB_OFFLINE",)),
            ("datasets.config", ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")),
        ):
            loaded = sys.modules.get(module)
            for name in names:
                if loaded is not None and hasattr(loaded, name):
                    patch.setattr(loaded, name, True)
        yield attempts


@pytest.fixture
def offline():
    """The test runs with the network blocked (:func:`network_blocked`); the fixture is the attempts."""
    with network_blocked() as attempts:
        yield attempts


#: The steps of the reference run: everything, URL dedup and tokens included.
ALL_STEPS = (
    "url_dedup",
    "language",
    "gopher_repetition",
    "gopher_quality",
    "c4_quality",
    "fineweb_quality",
    "minhash",
    "pii",
    "tokenize",
)


@dataclass
class RefineRun:
    input_root: Path
    output_root: Path
    config: object
    summary: dict
    network_attempts: list


@pytest.fixture(scope="session")
def refined(extracted_root, tiny_tokenizer, tmp_path_factory) -> RefineRun:
    """One refinement of the fixture shards with every step, 2 tasks in this process, network blocked."""
    from dripper.refine import RefineConfig, TokenizeConfig, run_refine

    config = RefineConfig(
        steps=ALL_STEPS, tasks=2, workers=1, tokenize=TokenizeConfig(tokenizer=tiny_tokenizer)
    )
    output_root = tmp_path_factory.mktemp("refined")
    with network_blocked() as attempts:
        summary = run_refine(str(extracted_root), str(output_root), config)
    return RefineRun(extracted_root, output_root, config, summary, attempts)
