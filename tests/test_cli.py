from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from dripper.cli import main, read_pages

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
    assert "the cpu labeler takes no option 'temperature'" in capsys.readouterr().err


# -- bad input and interruptions ----------------------------------------------------------------------------

SAMPLE_PAGES = Path(__file__).resolve().parents[1] / "data" / "sample" / "pages.jsonl.gz"


def _complete_lines(data: bytes) -> int:
    """Complete lines in the decompressible prefix of gzip bytes (counted independently of the reader)."""
    text = zlib.decompressobj(wbits=31).decompress(data)
    return text.count(b"\n")


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_truncated_gzip_keeps_every_record_before_the_damage(tmp_path, capsys):
    data = SAMPLE_PAGES.read_bytes()
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(data[: len(data) * 2 // 3])
    expected = _complete_lines(truncated.read_bytes())
    assert 0 < expected < 60
    out = tmp_path / "out.jsonl"
    code = main(["extract", "--input", str(truncated), "--output", str(out), "--labeler", "trafilatura",
                 "--batch-size", "64"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert len(_records(out)) == expected  # the last, partial batch is written too
    (line,) = [line for line in err.splitlines() if line.startswith("dripper: error:")]
    assert str(truncated) in line and f"read {expected} records" in line and "truncated" in line
    assert "Traceback" not in err

    corrupt = tmp_path / "corrupt.jsonl.gz"
    corrupt.write_bytes(data[:2000] + bytes(b ^ 0x5A for b in data[2000:4000]) + data[4000:])
    assert main(["extract", "--input", str(corrupt), "--output", str(out), "--labeler", "trafilatura"]) == 1
    assert "corrupt gzip data" in capsys.readouterr().err


def test_duplicate_ids_are_reported_and_handled_as_asked(tmp_path, capsys):
    lines = gzip.decompress(SAMPLE_PAGES.read_bytes()).decode().splitlines()[:6]
    pages = tmp_path / "pages.jsonl"
    pages.write_text("\n".join([*lines, lines[1], lines[4]]) + "\n", encoding="utf-8")
    ids = [json.loads(line)["id"] for line in lines]
    out = tmp_path / "out.jsonl"
    base = ["extract", "--input", str(pages), "--output", str(out), "--labeler", "trafilatura"]
    assert main(base) == 0
    err = capsys.readouterr().err
    summary = json.loads(err.splitlines()[0])
    assert summary["duplicate_ids"] == {"count": 2, "first": [ids[1], ids[4]], "policy": "keep"}
    assert "2 records repeat an earlier id" in err
    assert [r["id"] for r in _records(out)] == [*ids, ids[1], ids[4]]
    assert main([*base, "--on-duplicate", "skip"]) == 0
    capsys.readouterr()
    assert [r["id"] for r in _records(out)] == ids
    assert main([*base, "--on-duplicate", "error"]) == 2
    assert f"id {ids[1]!r} appears again (record 7, first at record 2)" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_extract_is_completed_by_resume(tmp_path, signal_number):
    """SIGINT/SIGTERM mid-run: the output holds whole records only; ``--resume`` adds exactly the rest."""
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    out = tmp_path / "out.jsonl.gz"
    command = [sys.executable, "-m", "dripper.cli", "extract", "--input", str(SAMPLE_PAGES),
               "--output", str(out), "--labeler", "trafilatura", "--batch-size", "2", "--format", "markdown"]  # fmt: skip
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if out.exists() and out.stat().st_size > 2000:
            break
        time.sleep(0.2)
    process.send_signal(signal_number)
    _, err = process.communicate(timeout=120)
    assert process.returncode == (130 if signal_number == signal.SIGINT else 143), err
    assert "--resume" in err and "Traceback" not in err
    from dripper.io.jsonl import JsonlReader

    first = [record["id"] for _, record in JsonlReader(out)]
    assert 0 < len(first) < 60

    done = subprocess.run([*command, "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stderr.splitlines()[0])["resumed_after"] == len(first)
    records = [record for _, record in JsonlReader(out)]
    expected = [json.loads(line)["id"] for line in gzip.decompress(SAMPLE_PAGES.read_bytes()).splitlines()]
    assert sorted(r["id"] for r in records) == sorted(expected)  # none lost, none twice

    reference = tmp_path / "reference.jsonl"
    subprocess.run([*command[:7], str(reference), *command[8:]], env=env, check=True, capture_output=True)
    drop = ("seconds",)
    by_id = {r["id"]: {k: v for k, v in r.items() if k not in drop} for r in _records(reference)}
    assert {r["id"]: {k: v for k, v in r.items() if k not in drop} for r in records} == by_id


def test_extract_takes_a_cascade_spec_and_says_who_labelled_each_page(tmp_path, capsys):
    """The oracle stands in for the LM: a 30% budget routes 30% of the bundled pages, least sure first."""
    sample = Path(__file__).resolve().parents[1] / "data" / "sample" / "pages.jsonl.gz"
    out = tmp_path / "casc.jsonl"
    spec = {"name": "casc", "labeler": "cpu", "route": {"labeler": "oracle", "share": 0.3}}
    assert (
        main(["extract", "--input", str(sample), "--output", str(out), "--extractor", json.dumps(spec)]) == 0
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    summary = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    scored = [r for r in records if "routed" in r["stats"]]
    routed = [r for r in scored if r["stats"]["routed"]]
    assert len(scored) == summary["route"]["pages_scored"] >= 50
    assert abs(len(routed) / len(scored) - 0.3) <= 0.02
    assert {r["extractor"] for r in routed} == {"dripper:oracle"}
    assert {r["extractor"] for r in scored if not r["stats"]["routed"]} <= {"dripper:cpu", "trafilatura"}
    assert max(r["stats"]["route"] for r in routed) <= min(
        r["stats"]["route"] for r in scored if not r["stats"]["routed"]
    )
    assert summary["route"]["pages_routed"] == len(routed)
    assert summary["by_extractor"]["dripper:oracle"] == len(routed)
