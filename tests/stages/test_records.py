"""The slim simplified layout: records read again by byte range give the extract stage the outputs of
today's path (the one-process pipeline on the same WARC records; the ``full`` layout every shard had
before), at a fraction of the bytes; truncated records kept on demand; a record that cannot be read again
is counted, never silent."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq

from dripper.config.simplify import SimplifyStageConfig
from dripper.io.warc import iter_warc_pages
from dripper.pipeline import ExtractOptions, Extractor
from dripper.stages.extract import extract_stage
from dripper.stages.simplify import ShardFormat, resolve_warc_inputs, simplify_stage

from .conftest import SAMPLE_PAGES, SAMPLE_SNAPSHOT, LongBlocks, comparable, read_stage

RESULT_FIELDS = ("markdown", "main_html", "labels", "extractor", "fallback_reason")


def _results(rows: list[dict]) -> dict[str, tuple]:
    return {doc_id: tuple(row[f] for f in RESULT_FIELDS) for doc_id, row in comparable(rows).items()}


def test_slim_layout_gives_todays_outputs_in_a_fraction_of_the_bytes(reference_run, tmp_path):
    # Today's outputs: the one-process pipeline on the same WARC records (what the two passes equal).
    warc_files = resolve_warc_inputs(SAMPLE_SNAPSHOT)
    pages = [p.to_page() for f in warc_files for p in iter_warc_pages(f)]
    today = {
        r.doc_id: (r.markdown, r.main_html, r.labels, r.extractor, r.fallback_reason)
        for r in Extractor(LongBlocks(), ExtractOptions()).extract_batch(pages)
    }
    slim = _results(reference_run["extracted"])  # the reference run is written in the slim layout
    assert len(slim) == len(today) == SAMPLE_PAGES
    assert slim == today  # main_html included: the mapping view is rebuilt, not re-parsed from text
    assert reference_run["extract_report"].summary["counters"]["reread:records"] == SAMPLE_PAGES
    assert "reread:failed" not in reference_run["extract_report"].summary["counters"]
    assert "reread:changed" not in reference_run["extract_report"].summary["counters"]

    # The full layout (every shard written before) is still written on demand and still read.
    full = str(tmp_path / "full")
    simplify_stage(SAMPLE_SNAPSHOT, full, SimplifyStageConfig(workers=0), shard_format=ShardFormat(layout="full"),
                   progress=False)  # fmt: skip
    extract_stage(full, labeler=LongBlocks(), progress=False)
    full_results = _results(read_stage(full, "extracted"))
    assert {k: v[:1] + v[2:] for k, v in full_results.items()} == {k: v[:1] + v[2:] for k, v in slim.items()}
    # (its mapping view travels as HTML text; re-parsing it un-nests the rare <li> in <li>)
    assert sum(full_results[k][1] != slim[k][1] for k in slim) <= 2
    # A shard written before the layouts had names (no metadata, no warc_span_bytes) reads as a full one.
    old = Path(full, "simplified", "part-00000.parquet")
    table = pq.read_table(old).drop_columns(["warc_span_bytes", "truncated"]).replace_schema_metadata(None)
    pq.write_table(table, old)
    extract_stage(full, labeler=LongBlocks(), force=True, progress=False)
    assert _results(read_stage(full, "extracted")) == full_results

    def stage_bytes(root: str) -> int:
        return sum(p.stat().st_size for p in Path(root, "simplified").glob("part-*.parquet"))

    warc_bytes = sum(Path(f).stat().st_size for f in warc_files)
    assert stage_bytes(reference_run["root"]) <= 0.6 * warc_bytes  # the target
    assert stage_bytes(full) > 2 * warc_bytes
    # Each shard says how it was written.
    shard = pq.ParquetFile(Path(reference_run["root"], "simplified", "part-00000.parquet"))
    assert shard.schema_arrow.metadata[b"dripper.layout"] == b"slim"


def test_truncated_records_are_kept_on_demand_and_counted_apart(tmp_path):
    dropped = simplify_stage(
        SAMPLE_SNAPSHOT, str(tmp_path / "a"), SimplifyStageConfig(workers=0), progress=False
    )
    truncated = dropped.summary["dropped"]["truncated"]
    assert truncated > 0 and "kept_truncated" not in dropped.summary["counters"]
    root = str(tmp_path / "b")
    kept = simplify_stage(
        SAMPLE_SNAPSHOT, root, SimplifyStageConfig(workers=0, keep_truncated=True), progress=False
    )
    summary = kept.summary
    assert "truncated" not in summary["dropped"]
    assert summary["counters"]["kept_truncated"] == truncated
    assert (
        summary["pages_out"] == SAMPLE_PAGES + truncated
        and summary["pages_in"] == dropped.summary["pages_in"]
    )
    rows = [row for row in read_stage(root, "simplified") if row["truncated"]]
    assert len(rows) == truncated
    # The extract stage reads them again and labels what they hold (a page cut at 4 kB may have no block).
    report = extract_stage(root, labeler=LongBlocks(), progress=False)
    assert "reread:failed" not in report.summary["counters"]
    extracted = comparable(read_stage(root, "extracted"))
    assert all(extracted[row["doc_id"]]["simplify_status"] == row["status"] for row in rows)
    assert any(extracted[row["doc_id"]]["extractor"] == "dripper:long-blocks" for row in rows)


def test_a_record_that_cannot_be_read_again_is_counted_and_a_lost_file_named(tmp_path, monkeypatch):
    warc = tmp_path / "input" / "one.warc.gz"
    warc.parent.mkdir()
    shutil.copy(resolve_warc_inputs(SAMPLE_SNAPSHOT)[0], warc)
    root = tmp_path / "run"
    simplify_stage(str(warc), str(root), SimplifyStageConfig(workers=0), progress=False)
    shard = root / "simplified" / "part-00000.parquet"
    table = pq.read_table(shard)
    rows = table.to_pylist()
    rows[3]["warc_offset"] += 1  # a row pointing into the middle of a record
    pq.write_table(type(table).from_pylist(rows, schema=table.schema), shard)
    report = extract_stage(str(root), labeler=LongBlocks(), progress=False)
    assert report.summary["counters"]["reread:failed"] == 1
    assert report.summary["pages_out"] == len(rows)  # the row stays, with its reason and no output
    broken = comparable(read_stage(str(root), "extracted"))[rows[3]["doc_id"]]
    assert broken["extractor"] == "none" and broken["fallback_reason"].startswith(
        "invalid_input: record not read"
    )

    warc.unlink()
    again = extract_stage(str(root), labeler=LongBlocks(), force=True, progress=False, raise_on_failure=False)
    (error,) = again.failed.values()
    assert "one.warc.gz" in error and "is gone" in error
