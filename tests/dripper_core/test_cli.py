from __future__ import annotations

import gzip
import json

from dripper_core.cli import main, read_pages

ARTICLE = (
    "<html><body><article><h1>Heading</h1><p>The first paragraph has enough words to count as an article "
    "body for the extractors used here.</p><p>A second paragraph follows with more words in it.</p>"
    "</article></body></html>"
)


def test_extract_writes_one_record_per_input_including_bad_ones(tmp_path):
    source = tmp_path / "pages.jsonl.gz"
    with gzip.open(source, "wt", encoding="utf-8") as handle:
        handle.write(json.dumps({"id": "good", "html": ARTICLE, "url": "https://example.org/a"}) + "\n")
        handle.write(json.dumps({"id": "no-html"}) + "\n")
        handle.write("{not json\n")
        handle.write(json.dumps({"id": "binary", "html": "\x00\x01\x02" * 50}) + "\n")
    output = tmp_path / "out.jsonl"
    assert main(["extract", "--input", str(source), "--output", str(output), "--labeler", "trafilatura"]) == 0
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["id"] for r in records] == ["good", "no-html", "line-3", "binary"]
    good, no_html, bad_json, binary = records
    assert good["extractor"] == "dripper:trafilatura" and "# Heading" in good["markdown"]
    assert good["n_blocks"] == 3 and good["labels"] is not None
    assert no_html["fallback_reason"] == "invalid_input: record has no html"
    assert bad_json["fallback_reason"].startswith("invalid_input: bad JSON")
    assert binary["fallback_reason"] == "not_html: binary content"


def test_single_html_file_and_markdown_format(tmp_path, capsys):
    page = tmp_path / "page.html"
    page.write_bytes(ARTICLE.encode())
    assert (
        main(
            [
                "extract",
                "--input",
                str(page),
                "--output",
                "-",
                "--labeler",
                "trafilatura",
                "--format",
                "markdown",
            ]
        )
        == 0
    )
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert record["id"] == "page.html" and "main_html" not in record and record["markdown"]


def test_read_pages_maps_ground_truth_and_snippets(tmp_path):
    source = tmp_path / "pages.jsonl"
    source.write_text(
        json.dumps({"id": "a", "html": "<p>x</p>", "ground_truth_text": "x"})
        + "\n"
        + json.dumps({"id": "b", "html": "<p>y</p>", "ground_truth_text": None, "with_snippets": ["y", "z"]})
        + "\n"
    )
    pages = list(read_pages(source))
    assert [p.ground_truth for p in pages] == ["x", "y\nz"]


def test_unknown_input_file_is_a_clear_error(tmp_path, capsys):
    assert main(["extract", "--input", str(tmp_path / "missing.jsonl"), "--output", "-"]) == 2
    assert "missing.jsonl" in capsys.readouterr().err


def test_default_labeler_is_cpu_and_labeler_options_reach_it(tmp_path, capsys):
    page = tmp_path / "page.html"
    page.write_text(ARTICLE, encoding="utf-8")
    plain, declining = tmp_path / "plain.jsonl", tmp_path / "declining.jsonl"
    assert main(["extract", "--input", str(page), "--output", str(plain)]) == 0
    assert json.loads(plain.read_text())["extractor"] == "dripper:cpu"
    # No block can reach probability 0.999999: the CPU labeler declines and the fallback extracts the page.
    args = ["extract", "--input", str(page), "--output", str(declining), "--labeler", "cpu"]
    assert main([*args, "--labeler-option", "min_confidence=0.999999"]) == 0
    record = json.loads(declining.read_text())
    assert record["extractor"] == "trafilatura" and record["fallback_reason"].startswith("label_failed: low")


def test_unknown_labeler_option_is_a_clear_error(tmp_path, capsys):
    page = tmp_path / "page.html"
    page.write_text(ARTICLE, encoding="utf-8")
    args = ["extract", "--input", str(page), "--output", "-", "--labeler", "cpu"]
    assert main([*args, "--labeler-option", "temperature=0.5"]) == 2
    assert "labeler 'cpu'" in capsys.readouterr().err
