"""``research.cpu_labeler_quality`` ``quality`` and ``compare``: a quality run end to end on sample pages, the leads of a
quality run's per-page file and over an earlier run, and the gate table."""

from __future__ import annotations

import json
from pathlib import Path

from research import cpu_labeler_quality

REPO = Path(__file__).resolve().parents[2]


def _write(path: Path, rows: dict[str, list[float]]) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for extractor, values in rows.items():
            for index, value in enumerate(values):
                file = "dev" if index % 2 else "dev_hard"
                record = {"id": f"p{index}", "extractor": extractor, "file": file, "rouge_f1": value}
                out.write(json.dumps({**record, "rouge_f1_norm": value}) + "\n")
    return path


def test_compare_prints_leads_over_baselines_and_the_previous_model(tmp_path, capsys):
    current = _write(
        tmp_path / "new.jsonl",
        {
            "dripper:cpu-oof/md": [0.9] * 40,
            "dripper:cpu-oof/html2text": [0.1] * 40,  # our own other rendering: not a baseline
            "trafilatura": [0.8] * 40,
        },
    )
    earlier = _write(tmp_path / "old.jsonl", {"dripper:cpu-oof/md": [0.85] * 40, "trafilatura": [0.8] * 40})
    argv = ["compare", str(current), "--previous", str(earlier), "--resamples", "200"]
    assert cpu_labeler_quality.main(argv) == 0
    table, _, gate = capsys.readouterr().out.partition("\nconfidence gate")
    rows = [line.split() for line in table.splitlines()[2:] if line.strip()]
    assert {row[0] for row in rows} == {"file=dev", "file=dev_hard", "articles"}
    assert not any("html2text" in line for line in table.splitlines())
    traf = next(r for r in rows if r[0] == "articles" and r[1] == "trafilatura" and r[2] == "rouge_f1")
    assert traf[4] == "+0.100" and traf[-1] == "*"
    previous = next(r for r in rows if r[0] == "file=dev" and r[1:3] == ["previous", "model"])
    assert previous[5] == "+0.050"
    assert "no page with both rows was declined" in gate  # these rows carry no ungated twin


def test_gate_table_compares_declined_pages_with_the_models_own_labels():
    declined = {"fallback_reason": "label_failed: low confidence: no block above 0.85 (best 0.6)"}
    records = []
    for index in range(4):
        info = declined if index < 2 else {"fallback_reason": None}
        if index < 2:  # the two fallbacks' seconds on the declined pages: 20 and 4 ms, 30 and 6 ms
            info = {
                **declined,
                "fallback_seconds": 0.02 + 0.01 * index,
                "fast_fallback_seconds": 0.004 * (1 + index / 2),
            }
        for row, value in (
            ("dripper:cpu-oof/md", 0.8),
            ("dripper:cpu-oof/ungated", 0.5 if index < 2 else 0.8),
            ("dripper:cpu-oof/fast-fallback", 0.7 if index < 2 else 0.8),
        ):
            records.append(
                {
                    "id": f"p{index}",
                    "file": "dev_hard",
                    "extractor": row,
                    "rouge_f1_norm": value,
                    "info": info,
                }
            )
    table = cpu_labeler_quality.format_gate(records)
    # Only the two declined pages count: the fallback scored 0.8 on them, the model's own labels 0.5.
    assert "dev_hard" in table and "    2 pages" in table
    assert "fallback 0.800  fast 0.700  model 0.500  gate gains +0.300" in table
    assert "fallback 25.0 ms, fast 5.0 ms" in table
    assert "no page with both rows was declined" in cpu_labeler_quality.format_gate(records[6:])


def test_gate_table_replays_other_gates_from_each_pages_best_confidence():
    records = []
    # p0: declined at best 0.8 (the model's labels 0.5); p1: kept at best 0.9 (trafilatura 0.6 on it).
    pages = {
        "p0": (
            {
                "fallback_reason": "label_failed: low confidence",
                "best_confidence": 0.8,
                "page_confidence": 0.6,
            },
            0.9,
            0.5,
            0.9,
        ),
        "p1": (
            {
                "fallback_reason": None,
                "extractor": "dripper:cpu",
                "best_confidence": 0.9,
                "page_confidence": 0.4,
            },
            0.7,
            0.7,
            0.6,
        ),
    }
    for page, (info, gated, ungated, trafilatura) in pages.items():
        for row, value in (
            ("dripper:cpu-oof/md", gated),
            ("dripper:cpu-oof/ungated", ungated),
            ("trafilatura", trafilatura),
        ):
            records.append(
                {"id": page, "file": "dev", "extractor": row, "rouge_f1_norm": value, "info": info}
            )
    table = cpu_labeler_quality.format_gate(records, gates=((0.7, 0.0), (0.85, 0.0), (0.95, 0.0), (0.7, 0.5)))
    assert "0.70 / 0.00: dev 0.600 (1, 0%)" in table  # p0 takes the model's 0.5: (0.5 + 0.7) / 2
    assert "0.85 / 0.00: dev 0.800 (0, 50%)" in table  # as run
    assert "0.95 / 0.00: dev 0.750 (1, 100%)" in table  # p1 goes to the fallback: (0.9 + 0.6) / 2
    # p1's labels expect an F1 of 0.4: a page gate of 0.5 declines it whatever its best block (p0 passes).
    assert "0.70 / 0.50: dev 0.550 (2, 50%)" in table


def test_quality_scores_every_page_out_of_fold_and_rescores_saved_fold_models(tmp_path, capsys):
    sample = REPO / "data" / "sample" / "pages.jsonl.gz"
    common = ["quality", "--data", str(sample), "--limit", "24", "--folds", "3", "--workers", "1"]
    common += ["--threads", "1", "--baselines", "trafilatura", "--resamples", "100"]
    first, again, cv = tmp_path / "first.jsonl", tmp_path / "again.jsonl", tmp_path / "cv.pkl.gz"
    summary = tmp_path / "summary.json"
    argv = [*common, "--train-param", "rounds=10", "--save-cv", str(cv), "--pages-out", str(first)]
    assert cpu_labeler_quality.main([*argv, "--out", str(summary)]) == 0
    printed = capsys.readouterr().out
    assert "model out-of-fold (site)" in printed and "trafilatura" in printed

    rows = [json.loads(line) for line in first.read_text(encoding="utf-8").splitlines()]
    by_row: dict[str, set[str]] = {}
    for row in rows:
        by_row.setdefault(row["extractor"], set()).add(row["id"])
    # Every page gets a score in every row (the model's, its ungated labels, the baseline): none lost.
    assert len(by_row["dripper:cpu-oof/md"]) == 24
    assert by_row["dripper:cpu-oof/md"] == by_row["dripper:cpu-oof/ungated"] == by_row["trafilatura"]
    config = json.loads(summary.read_text(encoding="utf-8"))["config"]
    assert config["train_params"] == {"rounds": 10}
    model_scores = [row["rouge_f1_norm"] for row in rows if row["extractor"] == "dripper:cpu-oof/md"]
    assert all(0.0 <= score <= 1.0 for score in model_scores) and sum(model_scores) > 0

    # The saved fold models re-score the same pages without refitting: the same page scores.
    assert cpu_labeler_quality.main([*common, "--load-cv", str(cv), "--pages-out", str(again)]) == 0
    rescored = [json.loads(line) for line in again.read_text(encoding="utf-8").splitlines()]

    def scores(records):
        return {(r["id"], r["extractor"]): r["rouge_f1_norm"] for r in records}

    assert scores(rescored) == scores(rows)
