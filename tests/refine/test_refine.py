"""The refinement stage end to end on the sample's extracted shards, with the network blocked."""

from __future__ import annotations

import gzip
import json

import pyarrow.parquet as pq
import pytest

#: Steps that can drop documents, each of which has pages to drop in the sample (README "Put there on
#: purpose": duplicates, near-duplicates, low-quality pages, junk; plus the non-English pages).
DROPPING_STEPS = (
    "input",
    "url_dedup",
    "language",
    "gopher_repetition",
    "gopher_quality",
    "c4_quality",
    "fineweb_quality",
    "minhash",
)


def rows_of(summary: dict) -> dict[str, dict]:
    return {row["step"]: row for row in summary["steps"]}


def read_jsonl_gz(paths) -> list[dict]:
    records = []
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            records += [json.loads(line) for line in f]
    return records


def test_runs_offline_and_completes(refined):
    assert refined.network_attempts == []
    summary = refined.summary
    assert summary["complete"], summary["incomplete_phases"]
    assert summary["balanced"]
    assert [row["step"] for row in summary["steps"]] == ["input", *refined.config.steps]


@pytest.mark.parametrize("step", DROPPING_STEPS)
def test_every_step_drops_what_the_sample_has_for_it(refined, step):
    row = rows_of(refined.summary)[step]
    dropped = sum(row["dropped"].values())
    assert dropped > 0, f"{step} dropped nothing: {row}"
    assert row["docs_in"] == row["docs_out"] + dropped
    assert row["tokens_out"] <= row["tokens_in"]


def test_steps_chain_and_account_for_every_input_row(refined, extracted_root):
    from dripper.stages.shards import done_shard_paths

    rows = [
        row
        for path in done_shard_paths(str(extracted_root / "extracted"))
        for row in pq.read_table(path).to_pylist()
    ]
    steps = refined.summary["steps"]
    assert steps[0]["docs_in"] == len(rows)
    for before, after in zip(steps, steps[1:], strict=False):
        assert after["docs_in"] == before["docs_out"], (before["step"], after["step"])
    assert refined.summary["documents_out"] == steps[-2]["docs_out"]  # the last row is tokenize
    dropped = sum(sum(row["dropped"].values()) for row in steps)
    assert refined.summary["documents_in"] == refined.summary["documents_out"] + dropped


def test_duplicates_go_where_the_manifest_says(refined):
    excluded = refined.output_root / "refine" / "excluded"
    url_dups = read_jsonl_gz(sorted((excluded / "url_dedup").glob("*.jsonl.gz")))
    # The exact copies differ from their page by a tracking parameter only: the copy goes, the page stays.
    assert (
        sorted(r["metadata"]["url"].endswith("?utm_source=sample-duplicate") for r in url_dups) == [True] * 3
    )
    assert {r["metadata"]["filter_reason"] for r in url_dups} == {"duplicate_url"}
    near = read_jsonl_gz(sorted((excluded / "minhash").glob("*.jsonl.gz")))
    assert any("?output=print" in r["metadata"]["url"] for r in near), [r["metadata"]["url"] for r in near]
    assert {r["metadata"]["filter_reason"] for r in near} == {"near_duplicate"}
    empty = read_jsonl_gz(sorted((excluded / "input").glob("*.jsonl.gz")))
    assert "https://sample.invalid/synthetic/binary-junk" in {r["metadata"]["url"] for r in empty}


def test_audit_files(refined):
    refine = refined.output_root / "refine"
    summary = json.loads((refine / "_summary.json").read_text())
    assert summary["documents_out"] == refined.summary["documents_out"]
    for step in DROPPING_STEPS:
        files = sorted((refine / "excluded" / step).glob("part-*.jsonl.gz"))
        assert files, f"no exclusion file for {step}"
        records = read_jsonl_gz(files)
        assert len(records) == sum(summary["dropped"][step].values())
        assert all(r["metadata"]["filter_step"] == step and r["metadata"]["filter_reason"] for r in records)
    assert sorted(summary["exclusions"]) == sorted(DROPPING_STEPS)
    for phase in ("url_signatures", "url_duplicates", "filter", "minhash_signatures", "minhash_buckets"):
        stats = json.loads((refine / "stats" / f"{phase}.json").read_text())
        assert isinstance(stats, list) and stats and all("name" in step for step in stats)
        assert (refine / "logs" / phase / "completions").is_dir()
    filter_stats = json.loads((refine / "stats" / "filter.json").read_text())
    gopher = next(s for s in filter_stats if "Gopher Quality" in s["name"])
    dropped = gopher["stats"]["dropped"]
    dropped = dropped["total"] if isinstance(dropped, dict) else dropped
    assert dropped == sum(summary["dropped"]["gopher_quality"].values())


def test_summary_per_extractor(refined):
    by_extractor = refined.summary["by_extractor"]
    assert "dripper:trafilatura" in by_extractor
    steps = rows_of(refined.summary)
    for step, row in steps.items():
        assert row["docs_in"] == sum(e["docs_in"] for e in row["by_extractor"].values()), step
        assert row["tokens_out"] == sum(e["tokens_out"] for e in row["by_extractor"].values()), step
    main = by_extractor["dripper:trafilatura"]
    assert [r["step"] for r in main] == [row["step"] for row in refined.summary["steps"]]
    assert main[0]["docs_in"] > main[-1]["docs_out"] > 0
    assert refined.summary["token_unit"].startswith("tokenizer:")
    assert refined.summary["timing_seconds"]["language"] > 0


def test_corpus_rows(refined):
    files = sorted((refined.output_root / "corpus").glob("part-*.parquet"))
    assert [f.name for f in files] == ["part-00000.parquet", "part-00001.parquet"]
    rows = [row for f in files for row in pq.read_table(f).to_pylist()]
    assert len(rows) == refined.summary["documents_out"]
    assert len({row["id"] for row in rows}) == len(rows)
    threshold = refined.config.language.threshold
    for row in rows:
        assert row["text"].strip() and row["url"] and row["extractor"]
        assert row["crawl"] == "CC-MAIN-SAMPLE"
        assert row["warc_file"].startswith("crawl-data/CC-MAIN-SAMPLE/")
        assert row["language"] == "en" and row["language_score"] > threshold
        assert row["token_count"] > 0 and row["n_words"] > 0 and 0 <= row["line_punct_ratio"] <= 1
        assert json.loads(row["extract_stats"])
    assert sum(row["token_count"] for row in rows) == refined.summary["tokens_out"]


def test_pii_step_in_the_run(refined):
    pii = rows_of(refined.summary)["pii"]
    assert pii["docs_in"] == pii["docs_out"] and not pii["dropped"]
    stats = json.loads((refined.output_root / "refine" / "stats" / "finalize.json").read_text())
    assert any("PII" in s["name"] for s in stats)
