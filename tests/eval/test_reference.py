"""The early signal's reference text: labelled pages held out of the run by URL and content hash, read back
as documents."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dripper.eval.reference import held_out_reference, read_reference, reference_for_run

SAMPLE_PAGES = Path(__file__).resolve().parents[2] / "data" / "sample" / "pages.jsonl.gz"


def _pages() -> list[dict]:
    with gzip.open(SAMPLE_PAGES, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def _selection(tmp_path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "selection"
    (root / "simplified").mkdir(parents=True)
    from dripper.eval.reference import payload_digest

    digests = [payload_digest(r["html"]) for r in rows]
    table = pa.table({"url": [r["url"] for r in rows], "payload_digest": digests})
    pq.write_table(table, root / "simplified" / "part-00000.parquet")
    return root


def test_pages_in_the_run_are_left_out_by_url_and_by_content_hash(tmp_path):
    pages = [p for p in _pages() if (p.get("ground_truth_text") or "").strip()]
    # In the run: two pages under their URL, a third under another URL (same HTML: caught by its hash).
    in_run = [pages[0], pages[1], {"url": "https://mirror.invalid/copy", "html": pages[2]["html"]}]
    root = _selection(tmp_path, in_run)
    summary = held_out_reference(str(root), [SAMPLE_PAGES], tmp_path / "ref" / "held_out.jsonl")
    assert (summary["excluded_url"], summary["excluded_hash"]) == (2, 1)
    assert summary["held_out"] == len(pages) - 3 == summary["pages"] - 3
    rows = [json.loads(line) for line in (tmp_path / "ref" / "held_out.jsonl").open()]
    urls = {row["url"] for row in rows}
    assert not urls & {pages[0]["url"], pages[1]["url"], pages[2]["url"]}
    assert read_reference(tmp_path / "ref" / "held_out.jsonl") == [row["text"] for row in rows]
    assert json.loads((tmp_path / "ref" / "held_out_summary.json").read_text())["held_out"] == len(rows)

    # The arm's default: {selection}/reference/held_out.jsonl, two levels above extractors/{name}.
    arm = root / "extractors" / "cpu"
    arm.mkdir(parents=True)
    default = reference_for_run(str(arm), None, [SAMPLE_PAGES])
    assert default["file"] == str(root / "reference" / "held_out.jsonl") and default["held_out"] == len(rows)


def test_every_page_in_the_run_names_the_fix_and_a_user_file_serves_instead(tmp_path):
    root = _selection(tmp_path, _pages())
    with pytest.raises(ValueError, match="reference_text"):
        held_out_reference(str(root), [SAMPLE_PAGES], tmp_path / "ref.jsonl")
    text = tmp_path / "clean.txt"
    text.write_text("A clean paragraph of main content.\n", encoding="utf-8")
    assert reference_for_run(str(root / "extractors" / "cpu"), str(text), [SAMPLE_PAGES])["file"] == str(text)
    assert read_reference(text) == ["A clean paragraph of main content.\n"]
    with pytest.raises(FileNotFoundError, match="reference_text"):
        reference_for_run(str(root), str(tmp_path / "missing.txt"), [])
