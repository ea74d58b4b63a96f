"""The report's controls: the baseline arms' exact settings and the decontamination counts per arm."""

from __future__ import annotations

from dripper.eval.report_controls import (
    baseline_settings,
    controls_html,
    controls_markdown,
    decontamination_rows,
)

DECONT = {
    "suite": "local",
    "n": 13,
    "mode": "documents",
    "benchmarks": {"local_text": {"items": 36, "ngrams": 300, "documents_removed": 4, "documents_cut": 0}},
    "unavailable": {},
    "documents_removed": 4,
    "documents_cut": 0,
    "lines_removed": 0,
}


def _data() -> dict:
    fineweb = {"name": "fineweb", "labeler": "fineweb", "options": {}, "fallback": None}
    return {
        "extractors": [
            {"name": "cpu", "baseline": baseline_settings({"labeler": "cpu"}), "decontamination": DECONT},
            {"name": "fineweb", "baseline": baseline_settings(fineweb), "decontamination": None},
        ]
    }


def test_baseline_settings_come_from_the_class_and_the_spec():
    assert baseline_settings({"labeler": "cpu"}) is None
    fineweb = baseline_settings({"labeler": "fineweb", "options": {"timeout": 5}})["settings"]
    assert fineweb["step"] == "datatrove.pipeline.extractors.Trafilatura"
    assert fineweb["favour_precision"] is True and fineweb["deduplicate"] is True and fineweb["timeout"] == 5
    assert fineweb["include_comments"] is False and fineweb["datatrove"]
    dclm = baseline_settings({"labeler": "dclm"})
    assert dclm["settings"]["main_content"] is True and "mlfoundations/dclm" in dclm["source"]


def test_decontamination_table_per_arm_and_benchmark():
    header, rows = decontamination_rows(_data())
    assert header[:5] == ["extractor", "suite", "n-gram", "mode", "local_text"]
    assert rows[0][:5] == ["cpu", "local", 13, "documents", 4]
    assert rows[1][:2] == ["fineweb", "not decontaminated"]
    page = controls_html(_data())
    assert "Decontamination" in page and "Baseline arms" in page and "favour_precision=True" in page
    markdown = "\n".join(controls_markdown(_data()))
    assert "## Decontamination" in markdown and "| cpu | local | 13 | documents | 4 |" in markdown
