"""``dripper run STAGE`` for every stage: the bundled sample from WARC files to the ablation report with
``dripper`` commands alone, in the run layout the DAGs write (``dripper.layout``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dripper.cli import main
from dripper.layout import RunLayout

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"


def _run(capsys, *argv: str) -> dict:
    """Run ``dripper run ARGV``; the JSON object it printed last."""
    code = main(["run", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    start = out.rfind("\n{") + 1
    return json.loads(out[start:])


def test_every_stage_is_a_dripper_command(capsys):
    from dripper.cli import build_parser

    run = next(a for a in build_parser()._subparsers._group_actions[0].choices.items() if a[0] == "run")[1]
    stages = run._subparsers._group_actions[0].choices
    assert list(stages) == ["simplify", "extract", "refine", "tokenize", "pretrain", "evaluate", "report"]
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    assert "dripper run report --input" in text  # the examples walk the whole run


def test_the_sample_from_warcs_to_the_report_with_dripper_commands(tmp_path, capsys):
    pytest.importorskip("megatron.core")
    pytest.importorskip("lm_eval")
    pytest.importorskip("matplotlib")
    from scripts.airflow_demo import sample_tokenizer

    tokenizer = sample_tokenizer(tmp_path / "tokenizer", vocab_size=600)
    root = str(tmp_path / "runs" / "CC-MAIN-SAMPLE" / "n1-seed0")  # where corpus_build puts this selection
    layout = RunLayout(root)
    _run(capsys, "simplify", "--input", f"snapshot:CC-MAIN-SAMPLE@{SAMPLE}", "--warc-count", "1", "--output", root,
         "--workers", "0", "--quiet")  # fmt: skip
    for name in ("cpu", "trafilatura"):
        report = _run(capsys, "extract", "--input", root, "--extractor", name, "--quiet")
        assert report["root"] == layout.extractor(name).root and report["written"] == 1
        refine = _run(capsys, "refine", "--input", root, "--extractor", name, "--tasks", "1", "--workers", "1",
                      "--steps", "language,minhash", "--quiet")  # fmt: skip
        assert refine["documents_out"] > 0
        tokens = _run(
            capsys, "tokenize", "--input", root, "--extractor", name, "--tokenizer", tokenizer, "--quiet"
        )
        assert tokens["documents"] == refine["documents_out"]
        _run(capsys, "pretrain", "--input", root, "--extractor", name, "--tokenizer", tokenizer,
             "--train-steps", "4", "--eval-every", "2", "--device", "cpu", "--quiet")  # fmt: skip
        assert sorted(
            p.name for p in Path(layout.extractor(name).hf_checkpoints("tiny-4steps")).iterdir()
        ) == [
            "iter_0000002",
            "iter_0000004",
        ]
        _run(
            capsys,
            "evaluate",
            "--input",
            root,
            "--extractor",
            name,
            "--suite",
            "local",
            "--limit",
            "8",
            "--quiet",
        )
    result = _run(capsys, "report", "--input", root, "--extractor", "cpu", "trafilatura", "--name", "cli",
                  "--labelled-limit", "4", "--quiet")  # fmt: skip
    assert result["html"] == f"{layout.ablation('cli')}/report/report.html"
    manifest = json.loads(Path(layout.ablation("cli"), "report", "manifest.json").read_text())
    assert [e["name"] for e in manifest["extractors"]] == ["cpu", "trafilatura"]
    for entry in manifest["extractors"]:
        folder = layout.extractor(entry["name"])
        assert entry["scores"] == f"{folder.evaluation('tiny-4steps')}/scores.json"
        assert len(entry["checkpoint_scores"]) == 2
    page = Path(result["html"]).read_text(encoding="utf-8")
    assert "dripper:cpu/md" in page and "dripper:trafilatura/md" in page
