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
    arms = ("cpu", "fineweb", "dclm")  # ours and the baselines as FineWeb's and DCLM's extraction ran them
    for name in arms:
        report = _run(capsys, "extract", "--input", root, "--extractor", name, "--quiet")
        assert report["root"] == layout.extractor(name).root and report["written"] == 1
        refine = _run(capsys, "refine", "--input", root, "--extractor", name, "--tasks", "1", "--workers", "1",
                      "--steps", "language,decontaminate,minhash", "--quiet")  # fmt: skip
        assert refine["documents_out"] > 0
        tokens = _run(
            capsys, "tokenize", "--input", root, "--extractor", name, "--tokenizer", tokenizer, "--quiet"
        )
        assert tokens["documents"] == refine["documents_out"]
    # Every arm, two seeds each, on one token budget (4 steps of 4 x 64 tokens) and their corpora cut to the
    # smallest one's tokens: six runs, each in its own folder.
    trained = _run(capsys, "pretrain", "--input", root, "--extractor", *arms, "--tokenizer", tokenizer,
                   "--train-tokens", "1024", "--seeds", "1", "2", "--equalize-corpora", "--eval-every", "2",
                   "--device", "cpu", "--quiet")  # fmt: skip
    smallest = min(
        json.loads(Path(layout.extractor(name).tokens_summary).read_text())["tokens"] for name in arms
    )
    assert [(Path(r["run_dir"]).name, r["data_token_limit"]) for r in trained["runs"]] == [
        (f"tiny-1024tokens-seed{seed}", smallest) for _ in arms for seed in (1, 2)
    ]
    for name in arms:
        for seed in (1, 2):
            run = f"tiny-1024tokens-seed{seed}"
            assert sorted(p.name for p in Path(layout.extractor(name).hf_checkpoints(run)).iterdir()) == [
                "iter_0000002",
                "iter_0000004",
            ]
            data = json.loads(Path(layout.extractor(name).pretrain(run), "run.json").read_text())["data"]
            assert data["tokens"] <= smallest and data["train_tokens"] == 1024
    evaluated = _run(capsys, "evaluate", "--input", root, "--extractor", *arms, "--suite", "local",
                     "--limit", "8", "--quiet")  # fmt: skip
    assert len(evaluated["runs"]) == 6
    for run in evaluated["runs"]:  # the early signal: every checkpoint's loss on the held-out reference
        assert all(loss > 0 for loss in run["reference_loss"].values())
    held_out = json.loads(Path(root, "reference", "held_out_summary.json").read_text())
    assert held_out["held_out"] > 0 and held_out["excluded_url"] > 0  # the run's own pages are left out
    result = _run(capsys, "report", "--input", root, "--extractor", *arms, "--name", "cli",
                  "--labelled-limit", "4", "--quiet")  # fmt: skip
    assert result["html"] == f"{layout.ablation('cli')}/report/report.html"
    manifest = json.loads(Path(layout.ablation("cli"), "report", "manifest.json").read_text())
    assert [e["name"] for e in manifest["extractors"]] == list(arms)
    for entry in manifest["extractors"]:
        folder = layout.extractor(entry["name"])
        assert [run["seed"] for run in entry["runs"]] == [1, 2]
        assert entry["runs"][0]["scores"] == f"{folder.evaluation('tiny-1024tokens-seed1')}/scores.json"
        assert all(len(run["checkpoint_scores"]) == 2 for run in entry["runs"])
    page = Path(result["html"]).read_text(encoding="utf-8")
    assert all(f"dripper:{name}/md" in page for name in arms)
    data = json.loads(
        page[page.index('id="report-data">') + 17 : page.index("</script>", page.index('id="report-data">'))]
    )
    for arm in data["extractors"]:
        assert arm["scores"]["seeds"] == 2 and arm["scores"]["reference_loss"] > 0
        assert arm["budget"]["train_tokens"] == 1024 and arm["budget"]["cut"] == (
            arm["budget"]["corpus_tokens"] > smallest
        )
        assert arm["budget"]["epochs"] == pytest.approx(1024 / arm["budget"]["unique_tokens"])
    assert len(data["comparisons"]) == 3 and all("reference_loss" in pair for pair in data["comparisons"])
    for arm in data["extractors"]:  # decontaminated against the suite it is scored on
        assert (
            arm["decontamination"]["suite"] == "local"
            and "local_text" in arm["decontamination"]["benchmarks"]
        )
    for section in ("budget", "seeds", "early-signal", "settings"):
        assert f'<section id="{section}">' in page
