"""Readers for the dev format and WebMainBench's schema."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dripper.eval.datasets import (
    NONE_GROUP,
    detect_schema,
    read_many,
    read_pages,
    strip_annotation_artifacts,
)
from tests.eval.conftest import ARTICLE_TEXT, dev_records


def _write_jsonl(path: Path, records: list[dict], gz: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in records)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# --- dev format -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True])
def test_dev_reader_plain_and_gzip(tmp_path, gz):
    path = _write_jsonl(tmp_path / ("dev.jsonl.gz" if gz else "dev.jsonl"), dev_records(), gz=gz)
    full, snip = list(read_pages(path))

    assert full.id == "p-full"
    assert full.schema == "dev"
    assert full.ground_truth.endswith(ARTICLE_TEXT)
    assert full.format == "markdown"
    assert full.has_full_text and not full.has_snippets
    assert full.meta["title"] == "Fox news"
    assert "html" not in full.meta

    assert snip.ground_truth is None
    assert snip.format == "snippets"
    assert snip.with_snippets == ("The quick brown fox", "three friends")
    assert snip.without_snippets == ("All rights reserved",)
    assert snip.page_type == "article"


def test_gzip_is_detected_by_content_not_suffix(tmp_path):
    path = _write_jsonl(tmp_path / "dev.jsonl", dev_records(), gz=True)
    assert [p.id for p in read_pages(path)] == ["p-full", "p-snip"]


def test_dev_group_values(tmp_path):
    full, snip = read_pages(_write_jsonl(tmp_path / "d.jsonl", dev_records()))
    assert full.group_value("source") == "unit"
    assert full.group_value("page_type") == NONE_GROUP
    assert snip.group_value("page_type") == "article"


def test_limit_and_read_many(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", dev_records())
    assert [p.id for p in read_pages(path, limit=1)] == ["p-full"]
    assert [p.id for p in read_many([path, path], limit=1)] == ["p-full", "p-full"]


def test_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("\n" + json.dumps(dev_records()[0]) + "\n\n", encoding="utf-8")
    assert len(list(read_pages(path))) == 1


# --- WebMainBench schema ----------------------------------------------------------------------------------


def test_webmainbench_ground_truth_precedence_and_key_order_pitfall(webmainbench_file):
    pages = {p.id: p for p in read_pages(webmainbench_file)}
    assert pages["t-1"].ground_truth.startswith("# Calibrated")  # groundtruth_content wins
    # convert_main_content followed by groundtruth_content: null must keep convert_main_content.
    assert pages["t-2"].ground_truth == ARTICLE_TEXT
    assert pages["t-3"].ground_truth == ARTICLE_TEXT
    assert pages["t-4"].ground_truth is None
    assert all(p.schema == "webmainbench" and p.source == "webmainbench" for p in pages.values())


def test_webmainbench_annotation_artefacts_are_stripped(webmainbench_file):
    for page in read_pages(webmainbench_file):
        assert "marked-" not in page.html
        assert "data-anno-uid" not in page.html
        assert ARTICLE_TEXT in page.html
        assert '<div class="main">' in page.html
        assert "<p>para inline</p>" in page.html


def test_webmainbench_annotation_cleaning_can_be_disabled(webmainbench_file):
    page = next(read_pages(webmainbench_file, clean_annotations=False))
    assert "<marked-text" in page.html


def test_webmainbench_group_values(webmainbench_file):
    pages = {p.id: p for p in read_pages(webmainbench_file)}
    first, second, third = pages["t-1"], pages["t-2"], pages["t-3"]
    assert first.group_value("level") == "simple"
    assert second.group_value("level") == "hard"
    assert second.group_value("style") == "Forum_or_Article_with_commentsection"
    assert second.page_type == "Forum_or_Article_with_commentsection"
    assert third.group_value("language") == "zh"
    assert third.group_value("table") == "data+layout"
    assert first.group_value("table") == NONE_GROUP
    assert first.group_value("code") == "inline"
    assert pages["t-4"].group_value("level") == NONE_GROUP


def test_strip_annotation_artifacts_regexes():
    html = "<p data-anno-uid=\"1\" class='x'>a<marked-inline data-anno-uid='2'>b</marked-inline> c</p>"
    assert strip_annotation_artifacts(html) == "<p class='x'>ab c</p>"
    assert strip_annotation_artifacts("<div data-anno-uid>x</div>") == "<div>x</div>"


def test_schema_is_detected_per_file(tmp_path, webmainbench_file):
    dev_path = _write_jsonl(tmp_path / "d.jsonl", dev_records())
    schemas = [p.schema for p in read_many([dev_path, webmainbench_file])]
    assert schemas == ["dev", "dev", "webmainbench", "webmainbench", "webmainbench", "webmainbench"]


# --- errors -----------------------------------------------------------------------------------------------


def test_unknown_schema_names_the_file_and_keys(tmp_path):
    path = _write_jsonl(tmp_path / "other.jsonl", [{"foo": 1, "html": "<p>"}])
    with pytest.raises(
        ValueError, match=r"other\.jsonl:1: unknown record schema with keys \['foo', 'html'\]"
    ):
        list(read_pages(path))


def test_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(dev_records()[0]) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not valid JSON"):
        list(read_pages(path))


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such data file"):
        list(read_pages(tmp_path / "absent.jsonl"))


def test_detect_schema():
    assert detect_schema({"ground_truth_text": None}) == "dev"
    assert detect_schema({"track_id": "x", "html": ""}) == "webmainbench"
