"""Running the stage: resuming after a failed task, reruns, config changes, worker processes, formats."""

from __future__ import annotations

import gzip
import json
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dripper.refine import RefineConfig, run_refine
from dripper.refine.summary import AuditPoint

#: Steps that need no word tokenizer: fast enough to run several times per test.
CHEAP = ("url_dedup", "language", "pii")


def counts(summary: dict) -> list[tuple]:
    return [
        (r["step"], r["docs_in"], r["docs_out"], r["tokens_in"], r["tokens_out"]) for r in summary["steps"]
    ]


@pytest.fixture(scope="module")
def reference(extracted_root, tmp_path_factory):
    """An uninterrupted run of the cheap steps (2 tasks, in this process)."""
    out = tmp_path_factory.mktemp("reference")
    return run_refine(str(extracted_root), str(out), RefineConfig(steps=CHEAP, tasks=2, workers=1))


def test_a_failed_task_is_resumed_and_the_others_are_skipped(
    extracted_root, tmp_path, monkeypatch, reference
):
    config = RefineConfig(steps=CHEAP, tasks=2, workers=1)
    real_run = AuditPoint.run

    def failing_run(self, data, rank=0, world_size=1):
        if rank == 1 and self.step == "language":
            raise RuntimeError("worker lost")
        return real_run(self, data, rank, world_size)

    monkeypatch.setattr(AuditPoint, "run", failing_run)
    with pytest.raises(RuntimeError, match="worker lost"):
        run_refine(str(extracted_root), str(tmp_path), config)
    completions = tmp_path / "refine" / "logs" / "filter" / "completions"
    assert sorted(p.name for p in completions.iterdir()) == ["00000"]
    first_shard = tmp_path / "corpus" / "part-00000.parquet"
    written_at = first_shard.stat().st_mtime_ns

    monkeypatch.setattr(AuditPoint, "run", real_run)
    summary = run_refine(str(extracted_root), str(tmp_path), config)
    assert summary["complete"] and summary["balanced"]
    assert counts(summary) == counts(reference)
    assert first_shard.stat().st_mtime_ns == written_at  # task 0 was not run again
    assert sorted(p.name for p in completions.iterdir()) == ["00000", "00001"]


def test_a_finished_run_reruns_as_a_no_op(extracted_root, tmp_path, reference):
    config = RefineConfig(steps=CHEAP, tasks=2, workers=1)
    run_refine(str(extracted_root), str(tmp_path), config)
    corpus = sorted((tmp_path / "corpus").glob("*.parquet"))
    stamps = [p.stat().st_mtime_ns for p in corpus]
    again = run_refine(str(extracted_root), str(tmp_path), config.replace(workers=2))  # execution-only change
    assert counts(again) == counts(reference)
    assert [p.stat().st_mtime_ns for p in corpus] == stamps


def test_a_changed_config_is_refused_unless_forced(extracted_root, tmp_path):
    run_refine(str(extracted_root), str(tmp_path), RefineConfig(steps=("pii",), tasks=2, workers=1))
    changed = RefineConfig(steps=("language", "pii"), tasks=2, workers=1)
    with pytest.raises(ValueError, match="another config"):
        run_refine(str(extracted_root), str(tmp_path), changed)
    summary = run_refine(str(extracted_root), str(tmp_path), changed, force=True)
    assert [r["step"] for r in summary["steps"]] == ["input", "language", "pii"]


def test_worker_processes(extracted_root, tmp_path, reference):
    """Two spawned worker processes give what one process gives."""
    summary = run_refine(str(extracted_root), str(tmp_path), RefineConfig(steps=CHEAP, tasks=2, workers=2))
    assert counts(summary) == counts(reference)


def test_jsonl_corpus_without_minhash_is_one_pass(extracted_root, tmp_path, reference):
    config = RefineConfig(steps=CHEAP, tasks=2, workers=1, output_format="jsonl", write_exclusions=False)
    summary = run_refine(str(extracted_root), str(tmp_path), config)
    assert [p["name"] for p in summary["phases"]] == ["url_signatures", "url_duplicates", "filter"]
    assert summary["corpus"]["files"] == ["corpus/part-00000.jsonl.gz", "corpus/part-00001.jsonl.gz"]
    rows = []
    for name in summary["corpus"]["files"]:
        with gzip.open(tmp_path / name, "rt") as f:
            rows += [json.loads(line) for line in f]
    assert len(rows) == summary["documents_out"] == reference["documents_out"]
    assert {"id", "text", "url", "crawl", "language", "language_score", "token_count"} <= set(rows[0])
    assert not (tmp_path / "refine" / "excluded").exists()


def test_no_extracted_shards(tmp_path):
    with pytest.raises(FileNotFoundError, match="run the extract stage first"):
        run_refine(str(tmp_path), str(tmp_path / "out"), RefineConfig(steps=("pii",)))


def stat_total(value) -> float:
    """A datatrove stat as saved: a bare number, or a dict with its ``total``."""
    return value["total"] if isinstance(value, dict) else value


def write_extracted(root, rows: list[dict]) -> None:
    from dripper.stages.extract import extracted_schema
    from dripper.stages.shards import ShardStats, run_shard

    columns = extracted_schema().names
    table = pa.Table.from_pylist(
        [{c: row.get(c) for c in columns} for row in rows], schema=extracted_schema()
    )
    run_shard(str(root / "extracted"), 0, lambda: (table, ShardStats(rows_in=len(rows), rows_out=len(rows))))


def test_pii_replaces_emails_and_public_ips(tmp_path, offline):
    text = (
        "Write to jane.doe@mail.org or call the desk. Our server is 8.8.8.8 and the printer 192.168.1.20.\n\n"
        "Nothing personal in this second paragraph at all."
    )
    write_extracted(
        tmp_path,
        [
            {"doc_id": "a", "url": "https://a.org/", "markdown": text, "extractor": "dripper:x"},
            {
                "doc_id": "b",
                "url": "https://b.org/",
                "markdown": "No addresses here.",
                "extractor": "dripper:x",
            },
            {"doc_id": "c", "url": "https://c.org/", "markdown": "", "extractor": "none"},
        ],
    )
    summary = run_refine(str(tmp_path), str(tmp_path), RefineConfig(steps=("pii",), tasks=1, workers=1))
    assert offline == []
    rows = {r["id"]: r for r in pq.read_table(tmp_path / "corpus" / "part-00000.parquet").to_pylist()}
    assert "jane.doe@mail.org" not in rows["a"]["text"] and "8.8.8.8" not in rows["a"]["text"]
    assert "192.168.1.20" in rows["a"]["text"]  # private addresses are no PII
    assert rows["b"]["text"] == "No addresses here."
    stats = json.loads((tmp_path / "refine" / "stats" / "filter.json").read_text())
    pii = next(s for s in stats if "PII" in s["name"])["stats"]
    assert [stat_total(pii[k]) for k in ("docs_changed", "emails", "ips")] == [1, 1, 1]
    assert summary["dropped"] == {"input": {"empty_text": 1}}
    assert summary["by_extractor"]["none"][0] == {
        "step": "input",
        "docs_in": 1,
        "docs_out": 0,
        "tokens_in": 0,
        "tokens_out": 0,
    }
    assert summary["token_unit"] == "whitespace_words"


def test_object_store_output_root(extracted_root, tiny_tokenizer, reference):
    """An output root on fsspec's in-memory filesystem takes the object-store paths (no local rename)."""
    import fsspec

    from dripper.refine import TokenizeConfig

    root = f"memory://refine-{uuid.uuid4().hex}"
    config = RefineConfig(
        steps=(*CHEAP, "tokenize"), tasks=2, workers=1, tokenize=TokenizeConfig(tokenizer=tiny_tokenizer)
    )
    summary = run_refine(str(extracted_root), root, config)
    documents = [(r["step"], r["docs_in"], r["docs_out"]) for r in summary["steps"][:-1]]
    assert summary["complete"] and documents == [c[:3] for c in counts(reference)]
    assert summary["tokens"]["megatron_data_path"] == [
        f"{root}/tokens/part-00000",
        f"{root}/tokens/part-00001",
    ]
    assert summary["tokens"]["documents"] == summary["documents_out"]
    fs = fsspec.filesystem("memory")
    assert fs.exists(f"{root}/refine/_summary.json") and fs.exists(f"{root}/corpus/part-00001.parquet")
    assert sorted(summary["exclusions"]) == ["input", "language", "url_dedup"]


def test_plain_text_documents_where_the_extractor_spec_asks(extracted_root, tmp_path, reference):
    """``output=text`` in the spec recorded beside the shards: each document is its Markdown as plain text
    (rows of a whole-page extractor, plain already, untouched), the word steps count plain words, and the
    summary says which; a changed format is a changed config."""
    import shutil

    from dripper.markdown_text import markdown_plain_text
    from dripper.refine.pipeline import ExtractedShardReader
    from dripper.stages.extractor import record_extractor

    root = tmp_path / "root"
    shutil.copytree(extracted_root, root)
    assert reference["text_format"] == "markdown"  # no spec recorded: Markdown, as before
    record_extractor(str(root), "trafilatura,output=text")
    config = RefineConfig(  # no pii step: it edits the text
        steps=("url_dedup", "language"), tasks=2, workers=1, output_format="jsonl", write_exclusions=False
    )
    summary = run_refine(str(root), str(tmp_path / "out"), config)
    assert summary["text_format"] == "text"
    by_id = {
        row["doc_id"]: row["markdown"]
        for shard in sorted((root / "extracted").glob("part-*.parquet"))
        for row in pq.read_table(shard, columns=["doc_id", "markdown"]).to_pylist()
    }
    rows = []
    for name in summary["corpus"]["files"]:
        with gzip.open(tmp_path / "out" / name, "rt") as f:
            rows += [json.loads(line) for line in f]
    assert rows and all(row["text"] == markdown_plain_text(by_id[row["id"]]) for row in rows)
    assert any(row["text"] != by_id[row["id"]] for row in rows)  # Markdown syntax went
    with pytest.raises(ValueError, match="started with another config"):
        run_refine(str(root), str(tmp_path / "out"), config.replace(text_format="markdown"))

    shard = tmp_path / "fineweb.parquet"
    plain = "- a bullet kept\n\nsnake_case | kept"
    pq.write_table(pa.Table.from_pylist([{"doc_id": "a", "markdown": plain, "extractor": "fineweb"}]), shard)
    reader = ExtractedShardReader(str(tmp_path), [shard.name], text_format="text")
    assert [d.text for d in reader.run()] == [plain]
