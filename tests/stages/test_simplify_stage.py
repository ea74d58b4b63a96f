from __future__ import annotations

import gzip
import json
import shutil

import pytest

from dripper.cli import main as cli_main
from dripper.config.settings import parse_key_values
from dripper.config.simplify import SimplifyStageConfig
from dripper.simplify import simplify_html
from dripper.stages.shards import ShardInputsChanged, ShardWriter
from dripper.stages.simplify import (
    plan_simplify_shards,
    resolve_warc_inputs,
    simplified_schema,
    simplify_shard,
    simplify_stage,
)

from .conftest import (
    MANIFEST,
    SAMPLE_BASE,
    SAMPLE_PAGES,
    SAMPLE_RECORDS,
    SAMPLE_SNAPSHOT,
    comparable,
    read_stage,
)

WARC_FILES = sorted(str(SAMPLE_BASE / name) for name in MANIFEST["files"])


def test_every_record_is_accounted_for_per_file(reference_run):
    writer = ShardWriter(reference_run["root"], "simplified")
    assert writer.done_shards() == [0, 1, 2, 3]
    for index in range(4):
        marker = writer.read_marker(index)
        (warc_file,) = marker["inputs"]
        expected = dict(MANIFEST["files"][warc_file.removeprefix(f"{SAMPLE_BASE}/")]["expected"])
        pages = expected.pop("page")
        stats = marker["stats"]
        assert stats["rows_out"] == pages
        assert stats["dropped"] == expected
        assert stats["rows_in"] == stats["rows_out"] + sum(stats["dropped"].values())

    summary = reference_run["simplify_report"].summary
    assert (summary["pages_in"], summary["pages_out"]) == (SAMPLE_RECORDS, SAMPLE_PAGES)
    assert summary["complete"] is True
    assert summary["counters"]["warc_files"] == 4
    rows = reference_run["simplified"]
    assert len(comparable(rows)) == SAMPLE_PAGES  # unique doc_ids
    # The binary junk page is kept as a row with its reason; every other page simplifies.
    statuses = [row["status"] for row in rows]
    assert statuses.count("ok") == SAMPLE_PAGES - 1
    (junk,) = [row for row in rows if row["status"] != "ok"]
    assert junk["reason"] == "not_html: binary content" and junk["simplified_html"] is None


def test_rows_hold_what_the_extract_stage_needs(reference_run):
    from dripper.decode import decode_html
    from dripper.stages.records import reread_records

    rows = reference_run["simplified"]
    table_columns = set(rows[0])
    assert table_columns == set(simplified_schema().names)
    assert not {"html", "mapping_html", "blocks"} & table_columns  # the slim layout: no page copy
    row = next(row for row in rows if row["n_blocks"] > 20)
    (record,) = reread_records([row])  # the record, read again by byte range
    assert (record.doc_id, record.url, record.offset) == (row["doc_id"], row["url"], row["warc_offset"])
    page = simplify_html(decode_html(record.payload, record.http_charset).text, row["doc_id"], row["url"])
    assert row["simplified_html"] == page.simplified_html
    assert row["n_blocks"] == page.n_blocks
    assert row["prompt_chars"] > len(row["simplified_html"])
    assert row["prompt_tokens_estimate"] == -(-row["prompt_chars"] * 2 // 7)  # ceil(chars / 3.5)
    for row in rows:
        assert row["warc_file"] in WARC_FILES and row["warc_offset"] >= 0
        assert row["fetch_date"] and row["doc_id"].startswith("<urn:uuid:")
    encodings = {row["encoding"] for row in rows}
    assert {"utf-8", "cp1252", "gb18030", "cp932", "cp1251"} <= encodings


def test_rerun_skips_finished_shards_and_refuses_other_inputs(reference_run, tmp_path):
    root = tmp_path / "run"
    shutil.copytree(f"{reference_run['root']}/simplified", root / "simplified")
    again = simplify_stage(SAMPLE_SNAPSHOT, str(root), SimplifyStageConfig(workers=0), progress=False)
    assert (again.written, again.skipped) == (0, 4)
    assert again.summary["pages_out"] == SAMPLE_PAGES
    # The same root with another selection order would mix inputs: refused, not silently skipped.
    with pytest.raises(ShardInputsChanged, match="new --output root"):
        simplify_stage(SAMPLE_SNAPSHOT, str(root), SimplifyStageConfig(workers=0, seed=7), progress=False)
    with pytest.raises(ShardInputsChanged, match="new --output root"):
        simplify_shard(str(root), 0, [WARC_FILES[0], WARC_FILES[1]])


def test_input_forms(tmp_path):
    snapshot = resolve_warc_inputs(SAMPLE_SNAPSHOT)
    assert sorted(snapshot) == WARC_FILES
    listing = str(SAMPLE_BASE / "crawl-data" / "CC-MAIN-SAMPLE" / "warc.paths.gz")
    assert resolve_warc_inputs(listing) == snapshot  # same rank order, wherever the base is
    assert resolve_warc_inputs(str(SAMPLE_BASE / "crawl-data" / "**" / "*.warc.gz")) == WARC_FILES
    assert resolve_warc_inputs(str(SAMPLE_BASE / "crawl-data")) == WARC_FILES
    assert resolve_warc_inputs([WARC_FILES[1], WARC_FILES[0], WARC_FILES[1]]) == WARC_FILES[:2]
    # A larger count keeps the smaller selection as its prefix (shard numbers stay valid).
    two = resolve_warc_inputs(SAMPLE_SNAPSHOT, count=2, seed=3)
    assert resolve_warc_inputs(SAMPLE_SNAPSHOT, count=3, seed=3)[:2] == two
    assert len(resolve_warc_inputs(SAMPLE_SNAPSHOT, fraction=0.5)) == 2
    # A plain listing (not under crawl-data/) resolves against its folder.
    copy = tmp_path / "mine"
    shutil.copytree(SAMPLE_BASE / "crawl-data", copy / "crawl-data")
    entries = gzip.decompress((SAMPLE_BASE / "crawl-data/CC-MAIN-SAMPLE/warc.paths.gz").read_bytes()).decode()
    (copy / "list.paths").write_text(entries)
    assert sorted(resolve_warc_inputs(str(copy / "list.paths"))) == sorted(
        str(copy / line) for line in entries.split()
    )
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_warc_inputs(str(tmp_path / "nothing.warc.gz"))
    with pytest.raises(FileNotFoundError, match="matches no file"):
        resolve_warc_inputs(str(tmp_path / "*.warc.gz"))
    with pytest.raises(ValueError, match="snapshot:CRAWL_ID"):
        resolve_warc_inputs("snapshot:")
    assert plan_simplify_shards(list("abcde"), 2) == [["a", "b"], ["c", "d"], ["e"]]


def test_cli_run_simplify(reference_run, tmp_path, capsys):
    root = tmp_path / "run"
    code = cli_main(
        ["run", "simplify", "--input", SAMPLE_SNAPSHOT, "--output", str(root), "--workers", "0",
         "--warc-count", "1", "--quiet"]
    )  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["stage"], report["shards"], report["written"]) == ("simplified", 1, 1)
    first = resolve_warc_inputs(SAMPLE_SNAPSHOT)[0]
    expected = {k: v for k, v in comparable(reference_run["simplified"]).items() if v["warc_file"] == first}
    assert comparable(read_stage(str(root), "simplified")) == expected
    assert parse_key_values(["a=1", "b.c=x", "d=true"], "--storage-option") == {
        "a": 1,
        "b": {"c": "x"},
        "d": True,
    }
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_key_values(["novalue"], "--storage-option")
    with pytest.raises(SystemExit):
        cli_main(["run", "simplify", "--help"])
    assert "snapshot:CRAWL_ID[@BASE]" in capsys.readouterr().out
