"""The benchmark runner: aggregation in-process, workers, and ``python -m dripper.eval.extraction`` end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dripper.eval.extraction import BenchmarkConfig, format_report, run_benchmark
from dripper.eval.metrics import score_page
from tests.eval.conftest import dev_records

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "dripper.eval.extraction", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def tiny_dev_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in dev_records()), encoding="utf-8")
    return path


def test_summary_aggregates_page_scores(tiny_dev_file, tmp_path):
    pages_out = tmp_path / "pages.jsonl"
    config = BenchmarkConfig(
        data=[tiny_dev_file], extractors=["html2text"], pages_out=pages_out, keep_text=True
    )
    summary = run_benchmark(config, progress=False)

    lines = [json.loads(line) for line in pages_out.read_text(encoding="utf-8").splitlines()]
    assert [line["id"] for line in lines] == ["p-full", "p-snip"]
    # The page lines must agree with scoring the kept text directly.
    full_record, snippet_record = dev_records()
    expected = score_page(lines[0]["text"], full_record["ground_truth_text"])
    assert lines[0]["rouge_f1"] == pytest.approx(expected["rouge_f1"])

    overall = summary["rows"]["html2text"]["all"]
    assert overall["pages"] == 2
    assert overall["full_text_pages"] == 1
    assert overall["rouge5_f1"] == pytest.approx(expected["rouge_f1"])
    assert overall["rouge5_f1_norm"] == pytest.approx(expected["rouge_f1_norm"])
    # The whole page contains both "with" snippets and the footer's "without" snippet: P = 2/3, R = 1.
    assert overall["snippet_pages"] == 1
    assert overall["snippet_precision"] == pytest.approx(2 / 3)
    assert overall["snippet_recall"] == 1.0
    assert overall["errors"] == 0
    assert overall["pages_per_second"] > 0

    groups = summary["rows"]["html2text"]["groups"]
    assert set(groups["page_type"]) == {"(none)", "article"}
    assert groups["page_type"]["article"]["full_text_pages"] == 0
    assert groups["page_type"]["article"]["rouge5_f1"] is None


def test_errors_and_fallbacks_are_counted(fake_core, tmp_path):
    records = dev_records()
    records[0]["html"] = "crash"
    records[1]["html"] = "<p>needs the fallback</p>"
    path = tmp_path / "crash.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    summary = run_benchmark(BenchmarkConfig(data=[path], extractors=["dripper:oracle"]), progress=False)
    assert set(summary["rows"]) == {"dripper:oracle/md", "dripper:oracle/html2text"}
    for row in summary["rows"].values():
        assert row["all"]["errors"] == 1
        assert row["all"]["fallbacks"] == 1
        assert row["all"]["rouge5_f1"] == 0.0
    report = format_report(summary)
    assert "== dripper:oracle/md ==" in report and "== overall ==" in report


def test_workers_give_the_same_scores(tiny_dev_file, webmainbench_file):
    def run(workers: int) -> dict:
        config = BenchmarkConfig(
            data=[tiny_dev_file, webmainbench_file],
            extractors=["html2text", "resiliparse"],
            group_by=("source", "level"),
            workers=workers,
            chunk_size=1,
        )
        summary = run_benchmark(config, progress=False)
        for row in summary["rows"].values():
            for stats in [row["all"], *(s for values in row["groups"].values() for s in values.values())]:
                stats.pop("extract_seconds")
                stats.pop("pages_per_second")
        return summary["rows"]

    single = run(1)
    assert single["html2text"]["all"]["pages"] == 6
    assert set(single["html2text"]["groups"]["level"]) == {"(none)", "simple", "hard", "mid"}
    assert run(2) == single


def test_duplicate_rows_are_rejected(tiny_dev_file):
    with pytest.raises(ValueError, match="requested twice"):
        run_benchmark(
            BenchmarkConfig(data=[tiny_dev_file], extractors=["html2text", "html2text"]), progress=False
        )


def test_config_validation(tiny_dev_file):
    with pytest.raises(ValueError, match="--workers 0"):
        BenchmarkConfig(data=[tiny_dev_file], extractors=["html2text"], workers=0)
    with pytest.raises(ValueError, match="no --extractor given; available: .*trafilatura"):
        BenchmarkConfig(data=[tiny_dev_file], extractors=[])


def test_cli_unknown_extractor_exits_2_with_suggestion(tiny_dev_file):
    proc = _run_cli("--data", str(tiny_dev_file), "--extractor", "resiliparce")
    assert proc.returncode == 2
    assert "did you mean 'resiliparse'" in proc.stderr


@pytest.mark.shared
def test_cli_on_shared_dev_pages(dev_data, tmp_path):
    out, pages_out = tmp_path / "results.json", tmp_path / "pages.jsonl"
    proc = _run_cli(
        "--data", str(dev_data), "--extractor", "trafilatura", "--limit", "3",
        "--out", str(out), "--pages-out", str(pages_out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "== trafilatura ==" in proc.stdout
    assert "source=scrapinghub_aeb" in proc.stdout
    # Quiet: no jieba chatter and no progress bar when stderr is not a terminal.
    assert proc.stderr == ""

    summary = json.loads(out.read_text(encoding="utf-8"))
    overall = summary["rows"]["trafilatura"]["all"]
    assert overall["pages"] == 3
    assert overall["errors"] == 0
    assert 0.5 < overall["rouge5_f1"] <= 1.0
    assert len(pages_out.read_text(encoding="utf-8").splitlines()) == 3


@pytest.mark.slow
@pytest.mark.shared
def test_reproduces_the_readme_resiliparse_baseline(dev_data):
    # The development sets' README (not distributed): resiliparse 0.830 raw (0.880 normalised), snippet F1 0.847. Resiliparse is
    # the fastest baseline, so this whole-file check of the metric and the reader takes ~10 s.
    config = BenchmarkConfig(data=[dev_data], extractors=["resiliparse"], group_by=())
    overall = run_benchmark(config, progress=False)["rows"]["resiliparse"]["all"]
    assert (overall["full_text_pages"], overall["snippet_pages"]) == (152, 200)
    assert overall["rouge5_f1"] == pytest.approx(0.830, abs=0.005)
    assert overall["rouge5_f1_norm"] == pytest.approx(0.880, abs=0.005)
    assert overall["snippet_f1"] == pytest.approx(0.847, abs=0.005)
