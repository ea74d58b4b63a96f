"""The ablation report renders from fixture inputs (tests/eval/conftest.py: three extractors, standard
errors, checkpoint scores, tokens summaries, a run description); its sections, tables and figure data read
back as those inputs."""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.eval.conftest import (
    CHECKPOINT_STEPS,
    REFINE_STEPS,
    REPORT_CORPUS,
    REPORT_EXTRACTORS,
    REPORT_TOKENIZER,
    RUN_DESCRIPTION,
    TOKENS_PER_STEP,
    extraction_summary,
)

pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parents[2]
NAMES = [e.name for e in REPORT_EXTRACTORS]
SECTIONS = (
    "run", "summary", "comparisons", "budget", "seeds", "early-signal", "training-scores", "scores", "settings",
    "corpus", "extraction", "lm-cost", "training",
)  # fmt: skip
FIGURES = ("curve", "scores", "corpus", "extraction", "reference", "loss")
#: Sections about benchmarks, not arms.
PER_BENCHMARK = ("settings",)


class Report(HTMLParser):
    """The parts of a rendered report the tests read: text and tables per section, headers, figures."""

    def __init__(self, page: str):
        super().__init__()
        self.sections: dict[str, str] = {}
        self.tables: dict[str, list[list[list[str]]]] = {}  # class -> tables -> rows -> cells
        self.headers: list[str] = []
        self.figure_data: dict[str, object] = {}
        self.images: list[str] = []
        self._section = self._script = self._cell = self._row = None
        self._in_th = False
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self._section = attrs["id"]
            self.sections[self._section] = ""
        elif tag == "script" and attrs.get("class") == "figure-data":
            self._script = attrs["data-figure"]
        elif tag == "img":
            self.images.append(attrs["src"])
        elif tag == "table":
            self.tables.setdefault(attrs.get("class", ""), []).append([])
            self._table = attrs.get("class", "")
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell, self._in_th = "", tag == "th"

    def handle_endtag(self, tag):
        if tag == "section":
            self._section = None
        elif tag == "script":
            self._script = None
        elif tag in ("td", "th"):
            self._row.append(self._cell)
            if self._in_th:
                self.headers.append(self._cell)
            self._cell = None
        elif tag == "tr":
            self.tables[self._table][-1].append(self._row)

    def handle_data(self, data):
        if self._script:
            self.figure_data[self._script] = json.loads(data)
            return
        if self._cell is not None:
            self._cell += data
        if self._section:
            self.sections[self._section] += data

    def table(self, css: str) -> list[list[str]]:
        (table,) = self.tables[css]
        return table


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """``(collected data, parsed HTML, HTML text, Markdown text, manifest)`` of the fixture report (read only:
    tests that change inputs take ``report_manifest``, a copy of their own)."""
    from dripper.eval.report import load_manifest, write_report
    from tests.eval.conftest import write_report_fixture

    tmp_path = tmp_path_factory.mktemp("report")
    report_manifest = write_report_fixture(tmp_path / "ablation")
    html_path, md_path = tmp_path / "report.html", tmp_path / "report.md"
    data = write_report(load_manifest(report_manifest), html_path, md_path)
    page = html_path.read_text(encoding="utf-8")
    return data, Report(page), page, md_path.read_text(encoding="utf-8"), report_manifest


def _scores(manifest: Path, name: str, step: int | None = None) -> dict:
    run = manifest.parent / "runs" / name
    path = run / "scores.json" if step is None else run / "eval" / f"iter_{step:07d}.json"
    return json.loads(path.read_text())


def _pm(value: float, stderr: float) -> str:
    return f"{100 * value:.2f} ± {100 * stderr:.2f}"


def _category_se(tasks: dict, category: str) -> tuple[float, float]:
    """A category's mean and its standard error sqrt(sum se^2) / n, from the per-task inputs."""
    rows = [row for row in tasks.values() if row["category"] == category]
    return (
        sum(r["score"] for r in rows) / len(rows),
        math.sqrt(sum(r["stderr"] ** 2 for r in rows)) / len(rows),
    )


def test_every_section_lists_every_extractor(rendered):
    data, report, page, _, _ = rendered
    assert list(report.sections) == list(SECTIONS)
    for section, text in report.sections.items():
        for name in NAMES if section not in PER_BENCHMARK else ():
            assert name in text, f"section {section!r} does not list {name}"
    assert 'src="http' not in page and "<link" not in page  # self-contained
    assert "class='missing'" not in page  # every input is there
    assert len(report.images) == len(FIGURES) == len(report.figure_data)
    for src in report.images:
        assert base64.b64decode(src.removeprefix("data:image/png;base64,"))[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(re.search(r'id="report-data">(.*?)</script>', page).group(1))["title"] == data["title"]


def test_run_section_says_what_was_run(rendered):
    _, report, _, _, _ = rendered
    run = report.sections["run"]
    for value in ("CC-MAIN-2025-13", "paper13", "10 steps", "15,360"):
        assert value in run
    assert "Training steps30" in run and "WARC files4" in run
    # The LM extractor's spec: labeler, options, fallback.
    assert (
        "vllm (model=/models/dripper-v1.1, answer_format=compact); fallback trafilatura, also on empty; "
        "Markdown documents" in run
    )
    assert "Document text" not in run  # every arm's documents are Markdown


def test_arms_of_different_text_formats_are_called_out():
    """A Markdown arm beside a plain-text baseline compares extractor and format at once: the report says so."""
    from dripper.eval.report_html import _run_section

    arms = [
        {"name": "cpu", "spec": {"labeler": "cpu"}, "loss": None, "text_format": "markdown"},
        {"name": "fineweb", "spec": {"labeler": "fineweb"}, "loss": None, "text_format": "text"},
    ]
    run = _run_section({"run": {}, "extractors": arms})
    assert (
        "cpu; fallback none; Markdown documents" in run
        and "fineweb; fallback none; plain-text documents" in run
    )
    assert "Document text" in run and "mix the extractor with the format" in run


def test_figure_data_reads_back_as_the_inputs(rendered):
    _, report, _, _, manifest = rendered
    figures = report.figure_data
    assert set(figures) == set(FIGURES)
    for index, extractor in enumerate(REPORT_EXTRACTORS):
        name = extractor.name
        # Scores over training: one point per checkpoint file, in training order (listed newest first).
        points = [_scores(manifest, name, step) for step in CHECKPOINT_STEPS]
        curve = figures["curve"][name]
        assert curve["step"] == list(CHECKPOINT_STEPS)
        assert curve["tokens"] == [step * TOKENS_PER_STEP for step in CHECKPOINT_STEPS]
        assert curve["mean"] == pytest.approx([100 * p["mean"] for p in points])
        assert curve["mean_stderr"] == pytest.approx([100 * p["mean_stderr"] for p in points])
        assert curve["mean_stderr"] == pytest.approx([1.0] * len(CHECKPOINT_STEPS))
        # Final scores per benchmark.
        final = _scores(manifest, name)["tasks"]
        assert figures["scores"][name] == pytest.approx({t: 100 * r["score"] for t, r in final.items()})
        # Corpus through refinement.
        counts = REPORT_CORPUS[extractor.refine_key]
        assert figures["corpus"][name] == {
            "steps": list(REFINE_STEPS),
            "docs_out": [c[1] for c in counts],
            "tokens_out": [c[3] for c in counts],
        }
        # Training loss: the step re-logged after a resume (loss 99.0) is superseded.
        loss = figures["loss"][name]
        assert loss["loss"] == pytest.approx([6.0 - 0.1 * s - 0.05 * index for s in range(30)])
        assert loss["step"] == list(range(1, 31))
        assert loss["tokens"] == [TOKENS_PER_STEP * s for s in range(1, 31)]
    assert figures["extraction"] == {
        row: stats["all"]["rouge5_f1"] for row, stats in extraction_summary()["rows"].items()
    }


def test_summary_table_is_table5_shaped_with_standard_errors(rendered):
    from dripper.eval.lm_suite import load_suite

    _, report, _, markdown, manifest = rendered
    suite = load_suite("paper13")
    header, *rows = report.table("summary")
    assert header == [
        "extractor",
        *suite.categories.values(),
        "average",
        "seeds (sd of average)",
        "documents",
        "tokens",
    ]
    assert [row[0] for row in rows] == NAMES
    for extractor, row in zip(REPORT_EXTRACTORS, rows, strict=True):
        tasks = _scores(manifest, extractor.name)["tasks"]
        expected = [_pm(*_category_se(tasks, c)) for c in suite.categories]
        mean = sum(r["score"] for r in tasks.values()) / len(tasks)
        mean_se = math.sqrt(sum(r["stderr"] ** 2 for r in tasks.values())) / len(tasks)
        expected.append(_pm(mean, mean_se))
        documents, tokens = REPORT_CORPUS[extractor.refine_key][-1][1::2]
        assert row[1:] == [*expected, "1 (no sd)", f"{documents:,}", f"{tokens:,}"]
        assert "| " + " | ".join([extractor.name, *row[1:]]) + " |" in markdown
    # 13 tasks at 0.30 + shift + 0.004 i, each ± sqrt(13)%: the average is (30 + 100 shift + 2.4) ± 1.
    assert [row[-4] for row in rows] == ["35.40 ± 1.00", "33.40 ± 1.00", "32.40 ± 1.00"]


def test_tokenizer_is_named_once_above_the_tables(rendered):
    _, report, page, markdown, _ = rendered
    assert report.sections["summary"].count(REPORT_TOKENIZER) == 1
    assert not [h for h in report.headers if "tokenizer" in h.lower() or ".json" in h]
    assert markdown.count(REPORT_TOKENIZER) == 1
    assert RUN_DESCRIPTION["tokenizer"] in report.sections["run"]


def test_comparisons_are_differences_against_the_combined_standard_error(rendered):
    from dripper.eval.lm_suite import load_suite

    _, report, page, markdown, manifest = rendered
    labels = load_suite("paper13").categories
    header, *rows = report.table("comparisons")
    assert header == [
        "pair", "score", "difference", "item SE", "seed SE", "noise", "|difference| / noise", "verdict", "reading",
    ]  # fmt: skip
    expected = []
    for i, a in enumerate(NAMES):
        for b in NAMES[i + 1 :]:
            sa, sb = _scores(manifest, a), _scores(manifest, b)
            metrics = [("average", sa["mean"], sa["mean_stderr"], sb["mean"], sb["mean_stderr"])]
            metrics += [
                (label, *_category_se(sa["tasks"], c), *_category_se(sb["tasks"], c))
                for c, label in labels.items()
            ]
            for metric, va, ea, vb, eb in metrics:
                combined = math.sqrt(ea**2 + eb**2)
                ratio = abs(va - vb) / combined
                verdict = "> 2 SE" if ratio > 2 else "> 1 SE" if ratio > 1 else "within 1 SE"
                expected.append(
                    [
                        f"{a} − {b}",
                        metric,
                        f"{100 * (va - vb):+.2f}",
                        f"{100 * combined:.2f}",
                        "–",  # one seed: no seed term
                        f"{100 * combined:.2f}",
                        f"{ratio:.2f}",
                        verdict,
                    ]  # fmt: skip
                )
    benchmark_rows = [row[:8] for row in rows if not row[1].startswith("reference loss")]
    assert benchmark_rows == expected
    averages = {row[0]: row[2:] for row in rows if row[1] == "average"}
    one_seed = "; seed noise not measured (one seed)"
    assert averages == {
        "dripper − dripper-vllm": ["+2.00", "1.41", "–", "1.41", "1.41", "> 1 SE",
                                   "suggestive, not beyond noise (1.4× the noise; the first better)" + one_seed],
        "dripper − trafilatura": ["+3.00", "1.41", "–", "1.41", "2.12", "> 2 SE",
                                  "beyond noise (2.1× the noise; the first better)" + one_seed],
        "dripper-vllm − trafilatura": ["+1.00", "1.41", "–", "1.41", "0.71", "within 1 SE",
                                       "noise (0.7× the noise; the first better)" + one_seed],
    }  # fmt: skip
    assert (
        "| dripper-vllm − trafilatura | average | +1.00 | 1.41 | – | 1.41 | 0.71 | within 1 SE |" in markdown
    )
    # The early signal, read by the same rule: the better arm (shift +0.02) has the lower reference loss.
    losses = {row[0]: row[2:] for row in rows if row[1].startswith("reference loss")}
    assert losses["dripper − trafilatura"][:5] == ["-0.0600", "0.0283", "–", "0.0283", "2.12"]
    assert "not a significance test" in report.sections["comparisons"]


def test_per_benchmark_corpus_extraction_and_training_tables(rendered):
    data, report, page, markdown, manifest = rendered
    header, *rows = report.table("scores")
    assert header == ["benchmark", "category", *NAMES] and len(rows) == 13
    finals = [_scores(manifest, name)["tasks"] for name in NAMES]
    for row in rows:
        assert row[2:] == [_pm(f[row[0]]["score"], f[row[0]]["stderr"]) for f in finals]
    assert rows[0][:3] == ["mmlu", "General knowledge", "33.00 ± 3.61"]

    curve = report.table("curve")
    assert curve[0] == ["extractor", "step", "training tokens", "mean score (%)"]
    assert curve[1:4] == [
        ["dripper", str(s), f"{s * TOKENS_PER_STEP:,}", _pm(_scores(manifest, "dripper", s)["mean"], 0.01)]
        for s in CHECKPOINT_STEPS
    ]
    assert "| trafilatura | 30 | 15,360 | 32.40 ± 1.00 |" in markdown

    steps = report.tables["corpus-steps"]
    assert [len(t) for t in steps] == [1 + len(REFINE_STEPS)] * 3
    assert steps[0][1] == ["input", "100", "98", "50,000", "49,000"]
    assert steps[2][4] == ["minhash", "70", "56", "33,000", "27,000"]
    # Dedup (minhash): 80 -> 72, 83 -> 75, 70 -> 56. Drop reasons of the shared run cover both extractors.
    assert re.findall(r'class="dedup-rate">([^<]+)<', page) == ["10.00%", "9.64%", "20.00%"]
    scopes = [e["corpus"]["drop_reasons_scope"] for e in data["extractors"]]
    assert scopes == ["run (all extractors)", "extractor", "run (all extractors)"]

    extraction = report.table("extraction")
    assert [row[:2] for row in extraction[1:]] == [
        ["dripper:cpu", "dripper"],
        ["dripper:vllm", "dripper-vllm"],
        ["trafilatura", "trafilatura"],
        ["resiliparse", "–"],
    ]
    assert extraction[1][2:4] == ["60", "0.812"]
    assert report.table("training")[1:] == [
        ["dripper", "30", "15,360", "6.000", "3.100"],
        ["dripper-vllm", "30", "15,360", "5.950", "3.050"],
        ["trafilatura", "30", "15,360", "5.900", "3.000"],
    ]
    assert "| dripper | markdown | 100 | 72 | 37000 | 10.00% | 0.8123 | 3.1000 |" in markdown


def test_missing_inputs_are_reported_as_missing(report_manifest, tmp_path):
    from dripper.eval.report import ExtractorInputs, ReportInputs, load_manifest, write_report

    data = write_report(ReportInputs(extractors=[ExtractorInputs(name="lonely")]), tmp_path / "r.html")
    report = Report((tmp_path / "r.html").read_text())
    sections = report.sections
    assert "no benchmark scores given" in sections["summary"]
    assert "fewer than two extractors with scores" in sections["comparisons"]
    assert "no checkpoint scores given" in sections["training-scores"]
    assert "no benchmark scores given" in sections["scores"]
    assert "no refinement summary for this extractor" in sections["corpus"]
    assert "no extraction benchmark summary given" in sections["extraction"]
    assert "no training log given" in sections["training"]
    assert report.figure_data == {} and report.table("summary")[1] == ["lonely", "–", "–", "–", "–"]
    assert data["extractors"][0]["corpus"] is None and data["extractors"][0]["curve"] == []

    # Files the manifest names but that are not there: listed, and their sections say what is missing.
    root = report_manifest.parent
    (root / "runs" / "trafilatura" / "scores.json").unlink()
    (root / "runs" / "trafilatura" / "eval" / "iter_0000020.json").unlink()
    (root / "runs" / "dripper-vllm" / "train_log.jsonl").unlink()
    data = write_report(load_manifest(report_manifest), tmp_path / "m.html")
    report = Report((tmp_path / "m.html").read_text())
    by_name = {e["name"]: e for e in data["extractors"]}
    assert [Path(p).name for p in by_name["trafilatura"]["missing_inputs"]] == [
        "scores.json",
        "iter_0000020.json",
    ]
    assert [Path(p).name for p in by_name["dripper-vllm"]["missing_inputs"]] == ["train_log.jsonl"]
    assert by_name["trafilatura"]["scores"] is None
    assert [p["step"] for p in by_name["trafilatura"]["curve"]] == [10, 30]
    for path in (*by_name["trafilatura"]["missing_inputs"], *by_name["dripper-vllm"]["missing_inputs"]):
        assert path in report.sections["run"]
    assert [row[0] for row in report.table("summary")[1:]] == NAMES
    assert report.table("summary")[3][1:5] == ["–"] * 4  # trafilatura: no final scores, not zeros
    assert (
        "trafilatura" not in report.figure_data["scores"] and "dripper-vllm" not in report.figure_data["loss"]
    )
    assert {row[0] for row in report.table("comparisons")[1:]} == {"dripper − dripper-vllm"}
    assert report.figure_data["curve"]["trafilatura"]["step"] == [10, 30]


def test_compare_rule_and_formats():
    from dripper.eval.report import compare, score_curve
    from dripper.eval.report_html import percent

    assert percent(0.321, 0.012) == "32.10 ± 1.20" and percent(0.321) == "32.10" and percent(None) == "–"
    assert compare(0.35, 0.01, 0.32, 0.01)["verdict"] == "> 2 SE"
    result = compare(0.335, 0.01, 0.32, 0.01)
    assert {k: result[k] for k in ("difference", "combined_stderr", "ratio", "verdict", "seed_stderr")} == {
        "difference": pytest.approx(0.015),
        "combined_stderr": pytest.approx(math.sqrt(2) * 0.01),
        "ratio": pytest.approx(0.015 / (math.sqrt(2) * 0.01)),
        "verdict": "> 1 SE",
        "seed_stderr": None,
    }
    assert "seed noise not measured (one seed)" in result["reading"]
    assert compare(0.32, 0.01, 0.33, 0.01)["verdict"] == "within 1 SE"
    result = compare(0.32, None, 0.33, 0.01)
    assert (result["difference"], result["combined_stderr"], result["ratio"], result["verdict"]) == (
        pytest.approx(-0.01),
        None,
        None,
        "no standard error",
    )
    # Two seeds a side: the seed term sqrt(sd_a²/n_a + sd_b²/n_b) joins the item term.
    seeds = {"a_seed_sd": 0.02, "a_seeds": 2, "b_seed_sd": 0.02, "b_seeds": 2}
    result = compare(0.35, 0.01, 0.32, 0.01, **seeds)
    assert result["seed_stderr"] == pytest.approx(0.02)
    assert result["combined_stderr"] == pytest.approx(math.sqrt(0.0002 + 0.0004))
    assert result["verdict"] == "> 1 SE"  # > 2 item SEs, but not beyond the seeds' noise as well
    assert result["reading"].startswith("suggestive") and "first better" in result["reading"]
    loss = compare(3.1, 0.01, 3.5, 0.01, lower_is_better=True, **seeds)
    assert loss["verdict"] == "> 2 SE" and "first better" in loss["reading"]
    assert score_curve([Path("/nonexistent/iter_0000010.json")]) == []


def test_scores_without_standard_errors_say_so(report_manifest, tmp_path):
    """lm-eval writes "N/A" where it computed no standard error: the cells show the score alone and the
    comparison says it has no standard error, rather than inventing one."""
    from dripper.eval.report import load_manifest, write_report
    from tests.eval.conftest import suite_scores

    scores = suite_scores(0.0, stderr=None)
    assert scores["mean_stderr"] is None and set(scores["categories_stderr"].values()) == {None}
    (report_manifest.parent / "runs" / "trafilatura" / "scores.json").write_text(json.dumps(scores))
    write_report(load_manifest(report_manifest), tmp_path / "r.html")
    report = Report((tmp_path / "r.html").read_text())
    assert report.table("summary")[3][4] == "32.40"
    readings = {(row[0], row[1]): row[3:] for row in report.table("comparisons")[1:]}
    assert readings[("dripper − trafilatura", "average")] == [
        "–", "–", "–", "–", "no standard error", "no standard error on either side: not read",
    ]  # fmt: skip
    assert readings[("dripper − dripper-vllm", "average")][:5] == ["1.41", "–", "1.41", "1.41", "> 1 SE"]


def test_report_cli(report_manifest, tmp_path, capsys):
    from dripper.eval.report import main

    html_path, md_path = tmp_path / "x.html", tmp_path / "x.md"
    assert (
        main(["--manifest", str(report_manifest), "--html", str(html_path), "--markdown", str(md_path)]) == 0
    )
    assert f"wrote {html_path} and {md_path}" in capsys.readouterr().out
    assert Report(html_path.read_text()).table("summary")[1][-4] == "35.40 ± 1.00"
    assert md_path.read_text().startswith("# Dripper vs Trafilatura (fixture)")
    for text, error in (
        ("extractors: []\n", "no extractors"),
        ("", "no extractors"),
        ("- a list\n", "a manifest is a mapping"),
        ("extractors: [{name: a}, {name: a}]\n", "listed twice"),
        ("extractors: [{scores: s.json}]\n", "needs a name"),
    ):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        assert main(["--manifest", str(bad), "--html", str(tmp_path / "y.html")]) == 2
        assert error in capsys.readouterr().err
    assert main(["--manifest", str(tmp_path / "absent.yaml"), "--html", str(tmp_path / "y.html")]) == 2

    # As users call it: `python -m dripper.eval.report`.
    done = subprocess.run(
        [sys.executable, "-m", "dripper.eval.report", "--manifest", str(report_manifest), "--html", str(tmp_path / "z.html")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert Report((tmp_path / "z.html").read_text()).figure_data.keys() == set(FIGURES)


# ------------------------------------------------------------------------------------------ end to end

#: Labelers of the two corpora (the data plane's names); DRIPPER_E2E_LABELERS overrides, e.g. to try the
#: plumbing with other registered labelers.
E2E_LABELERS = tuple(os.environ.get("DRIPPER_E2E_LABELERS", "cpu,trafilatura").split(","))
E2E_STEPS = ("language", "gopher_quality", "minhash", "tokenize")


def _extract_shard(root: Path, labeler: str, pages: list) -> None:
    """``{root}/extracted/part-00000.parquet``: the pages through the extraction pipeline with ``labeler``."""
    import pyarrow as pa

    from dripper.pipeline import extract_batch
    from dripper.stages.extract import extracted_schema
    from dripper.stages.shards import ShardStats, run_shard

    def compute():
        core_pages = [page.to_page() for page in pages]
        rows = []
        for page, result in zip(core_pages, extract_batch(core_pages, labeler=labeler), strict=True):
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
                        {k: v for k, v in result.stats.items() if k != "confidence"}, default=str
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
        return pa.Table.from_pylist(rows, schema=extracted_schema()), ShardStats(
            rows_in=len(rows), rows_out=len(rows)
        )

    run_shard(str(root / "extracted"), 0, compute)


@pytest.mark.slow
def test_ablation_end_to_end_on_the_sample(tmp_path):
    """Sample WARCs -> two extractors -> refined corpora -> tiny model per corpus, checkpoints every 12 steps
    -> each checkpoint exported and scored on the local lm-eval task -> report."""
    for module in ("megatron.core", "lm_eval", "datatrove", "pyarrow"):
        pytest.importorskip(module)
    from dripper.labelers.base import available_labelers

    missing = [name for name in E2E_LABELERS if name not in available_labelers()]
    if missing:
        pytest.skip(
            f"labelers {missing} are not registered (the CPU labeler is the embedded default to come)"
        )
    import glob

    from dripper.eval.extraction import BenchmarkConfig, run_benchmark
    from dripper.eval.lm_suite import run_suite_many
    from dripper.eval.report import load_manifest, write_report
    from dripper.io.warc import iter_warc_pages
    from dripper.pretrain.config import TrainConfig
    from dripper.pretrain.export import export_every_checkpoint
    from dripper.pretrain.toy import train_tokenizer
    from dripper.pretrain.train import read_train_log, train
    from dripper.refine import RefineConfig, TokenizeConfig, run_refine
    from tests.pretrain import REPO, SAMPLE_PAGES, sample_texts

    sample = REPO / "data" / "sample"
    warcs = sorted(glob.glob(str(sample / "crawl-data" / "*" / "segments" / "*" / "warc" / "*.warc.gz")))
    pages = [p for w in warcs for p in iter_warc_pages(w, warc_name=os.path.relpath(w, sample))]
    pages = [p for p in pages if len(p.payload) < 60_000]  # about 60 pages: seconds of extraction
    tokenizer = train_tokenizer(sample_texts(), tmp_path / "tokenizer", vocab_size=512)

    entries = []
    for labeler in E2E_LABELERS:
        root = tmp_path / labeler
        _extract_shard(root, labeler, pages)
        config = RefineConfig(
            steps=E2E_STEPS, tasks=1, workers=1, tokenize=TokenizeConfig(tokenizer=str(tokenizer))
        )
        run_refine(str(root), str(root / "refined"), config)
        result = train(
            TrainConfig(
                out_dir=root / "train",
                data=[str(root / "refined" / "tokens")],
                tokenizer=tokenizer,
                model="tiny",
                train_steps=24,
                micro_batch_size=4,
                global_batch_size=8,
                save_interval=12,
                device="cpu",
            )
        )
        assert result.final_step == 24
        exported = export_every_checkpoint(root / "train", root / "hf")
        assert [e.step for e in exported] == [12, 24]
        summaries = run_suite_many(
            "local", [e.out_dir for e in exported], out_dir=root / "eval", batch_size=16
        )
        assert [(s["step"], s["tokens"]) for s in summaries] == [(12, 12 * 8 * 64), (24, 24 * 8 * 64)]
        shutil.copyfile(root / "eval" / "iter_0000024.json", root / "scores.json")
        entries.append(
            {
                "name": labeler,
                "labeler": labeler,
                "refine_summary": f"{labeler}/refined/refine/_summary.json",
                "tokens_summary": f"{labeler}/refined/tokens/_summary.json",
                "extraction_row": f"dripper:{labeler}/md",
                "train_run": f"{labeler}/train",
                "scores": f"{labeler}/scores.json",
                "checkpoint_scores": [f"{labeler}/eval/iter_{e.step:07d}.json" for e in exported],
            }
        )
    run_benchmark(
        BenchmarkConfig(
            data=[SAMPLE_PAGES],
            extractors=[f"dripper:{name}" for name in E2E_LABELERS] + ["trafilatura"],
            out=tmp_path / "extraction.json",
        ),
        progress=False,
    )
    manifest = tmp_path / "ablation.yaml"
    run = {"crawl": "sample", "warc_files": len(warcs), "model": "tiny", "train_steps": 24, "suite": "local"}
    manifest.write_text(
        json.dumps(
            {"title": "sample ablation", "run": run, "extraction": "extraction.json", "extractors": entries}
        )
    )
    write_report(load_manifest(manifest), tmp_path / "report.html", tmp_path / "report.md")

    parsed = Report((tmp_path / "report.html").read_text())
    for section, text in parsed.sections.items():
        if section not in (*PER_BENCHMARK, "early-signal"):  # no reference text in this run
            assert all(labeler in text for labeler in E2E_LABELERS), section
    extraction = json.loads((tmp_path / "extraction.json").read_text())
    assert parsed.figure_data["extraction"] == {
        row: data["all"]["rouge5_f1"] for row, data in extraction["rows"].items()
    }
    for labeler in E2E_LABELERS:
        summary = json.loads((tmp_path / labeler / "refined" / "refine" / "_summary.json").read_text())
        corpus = parsed.figure_data["corpus"][labeler]
        assert corpus["steps"] == ["input", *E2E_STEPS]
        assert corpus["docs_out"] == [row["docs_out"] for row in summary["steps"]]
        assert corpus["tokens_out"] == [row["tokens_out"] for row in summary["steps"]]
        log = read_train_log(tmp_path / labeler / "train")
        assert parsed.figure_data["loss"][labeler]["loss"] == [r["loss"] for r in log]
        scores = json.loads((tmp_path / labeler / "scores.json").read_text())
        assert parsed.figure_data["scores"][labeler]["local_text"] == pytest.approx(100 * scores["mean"])
        assert scores["tasks"]["local_text"]["stderr"] > 0
        # Scores over training: the curve is the per-checkpoint score files.
        points = [
            json.loads((tmp_path / labeler / "eval" / f"iter_{s:07d}.json").read_text()) for s in (12, 24)
        ]
        assert parsed.figure_data["curve"][labeler] == {
            "step": [p["step"] for p in points],
            "tokens": [p["tokens"] for p in points],
            "mean": pytest.approx([100 * p["mean"] for p in points]),
            "mean_stderr": pytest.approx([100 * p["mean_stderr"] for p in points]),
        }
    ablation_rows = {row[0]: row[1] for row in parsed.table("extraction")[1:]}
    assert {ablation_rows[f"dripper:{labeler}/md"] for labeler in E2E_LABELERS} == set(E2E_LABELERS)
    summary_header = parsed.table("summary")[0]
    assert summary_header == [
        "extractor",
        "Local smoke task",
        "average",
        "seeds (sd of average)",
        "documents",
        "tokens",
    ]
    markdown = (tmp_path / "report.md").read_text()
    assert (
        "| extractor | Local smoke task | average | seeds (sd of average) | documents | tokens |" in markdown
    )


def test_lm_cost_of_a_cascade_an_lm_and_a_cpu_extractor():
    from dripper.eval.report import lm_cost

    cascade = {"name": "casc", "labeler": "cpu", "route": {"labeler": "vllm", "share": 0.3}}
    summary = {
        "stages": {
            "extracted": {
                "pages_out": 100,
                "counters": {
                    "route:pages_scored": 98,
                    "route:pages_routed": 29,
                    "route:prompt_tokens_estimate": 600_000,
                    "route:routed_prompt_tokens_estimate": 240_000,
                    "route_seconds": 14.5,
                },
            }
        }
    }
    cost = lm_cost(summary, cascade, 3.08)
    assert cost["lm"] == "vllm" and cost["page_share"] == 0.29 and cost["token_share"] == 0.4
    # Time in proportion to prompt tokens: 40% of the tokens of a million pages at 3.08 pages/s.
    assert cost["gpu_hours_per_million_pages"] == pytest.approx(0.4 * 1e6 / 3.08 / 3600)
    assert cost["measured_pages_per_second"] == 2.0
    assert lm_cost(None, {"labeler": "vllm"}, 3.08)["gpu_hours_per_million_pages"] == pytest.approx(
        1e6 / 3.08 / 3600
    )
    assert lm_cost(None, {"labeler": "cpu"}, 3.08)["gpu_hours_per_million_pages"] == 0
    assert "missing" in lm_cost({}, cascade, 3.08)
    assert "gpu_hours_per_million_pages" not in lm_cost(summary, cascade, None)
