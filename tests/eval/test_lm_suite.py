"""lm-eval on the tiny exported model, offline: the local task and the 13 production task configs on fixtures,
standard errors, several checkpoints in one process, and the check that a suite's data is at hand."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.pretrain import make_toy_corpus, tiny_train_config

pytest.importorskip("lm_eval")
pytest.importorskip("megatron.core")

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "tests" / "fixtures" / "lm_eval" / "manifest.yaml"


@pytest.fixture
def network_unreachable(monkeypatch):
    """Every connection to a non-loopback address fails, as on a machine without network."""
    real_connect = socket.socket.connect

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and not (host.startswith("127.") or host in ("localhost", "::1")):
            raise OSError(f"network unreachable in tests: {address}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, "1")


@pytest.fixture(scope="module")
def tiny_checkpoints(tmp_path_factory) -> list[Path]:
    """The tiny Llama-style model trained 12 steps on the toy corpus, checkpointed at steps 6 and 12, each
    checkpoint exported to Hugging Face format (``{root}/hf/iter_XXXXXXX``)."""
    from dripper.pretrain.export import export_every_checkpoint
    from dripper.pretrain.train import train

    root = tmp_path_factory.mktemp("lm")
    corpus = make_toy_corpus(root / "toy")
    result = train(tiny_train_config(corpus, root / "run", steps=12, save_interval=6))
    return [r.out_dir for r in export_every_checkpoint(result.out_dir, root / "hf")]


@pytest.fixture(scope="module")
def tiny_model(tiny_checkpoints) -> Path:
    """The final (step 12) exported model."""
    return tiny_checkpoints[-1]


def _lm_eval_stderr(score: float, samples: int) -> float:
    """lm-eval's closed-form standard error of a mean of 0/1 outcomes: the sample standard deviation
    (n - 1 in the denominator) over sqrt(n)."""
    return math.sqrt(score * (1 - score) / (samples - 1))


def test_suite_files_are_valid():
    from dripper.eval.lm_suite import load_suite

    suite = load_suite("paper13")
    assert len(suite.tasks) == 13
    by_category = {c: [t.name for t in suite.tasks if t.category == c] for c in suite.categories}
    assert by_category == {
        "general_knowledge": ["mmlu", "arc_easy", "arc_challenge", "triviaqa", "nq_open"],
        "commonsense": ["hellaswag", "piqa", "social_iqa", "winogrande", "openbookqa", "commonsense_qa"],
        "reading_comprehension": ["boolq", "race"],
    }
    shots = {t.name: t.num_fewshot for t in suite.tasks}
    assert shots["mmlu"] == shots["triviaqa"] == shots["nq_open"] == 5
    assert sum(shots.values()) == 15
    local = load_suite("local")
    assert [t.task for t in local.tasks] == ["local_text"] and local.include[0].name == "tasks"


def test_suite_errors_name_the_problem(tmp_path):
    from dripper.eval.lm_suite import load_suite

    bad = tmp_path / "bad.yaml"
    bad.write_text("categories: {a: A}\ntasks:\n  - {name: x, task: x, metric: acc, category: b}\n")
    with pytest.raises(ValueError, match="unknown category 'b'"):
        load_suite(bad)
    with pytest.raises(FileNotFoundError, match="paper13"):
        load_suite("no_such_suite")


def test_local_task_runs_offline_on_the_tiny_model(tiny_model, network_unreachable, tmp_path):
    from dripper.eval.lm_suite import run_suite

    summary = run_suite("local", tiny_model, out=tmp_path / "scores.json", batch_size=16)
    task = summary["tasks"]["local_text"]
    assert task["samples"] == 36 and task["metric"] == "acc,none"
    assert 0.0 <= task["score"] <= 1.0 and summary["mean"] == task["score"]
    assert json.loads((tmp_path / "scores.json").read_text()) == summary
    # The standard error is lm-eval's (bootstrap_iters > 0 turns them on), carried to the means unchanged
    # for a single task: sqrt(se^2) / 1.
    assert 0.0 < task["score"] < 1.0, "a degenerate score has no spread to check the standard error with"
    assert task["stderr"] == pytest.approx(_lm_eval_stderr(task["score"], 36), rel=1e-9)
    assert summary["mean_stderr"] == pytest.approx(task["stderr"])
    assert summary["categories_stderr"] == {"local": pytest.approx(task["stderr"])}
    assert (summary["step"], summary["tokens"]) == (12, 12 * 8 * 64)  # from the export's export.json


def test_run_suite_many_scores_every_checkpoint_in_one_process(
    tiny_checkpoints, network_unreachable, tmp_path
):
    from dripper.eval.lm_suite import run_suite_many

    assert [p.name for p in tiny_checkpoints] == ["iter_0000006", "iter_0000012"]
    summaries = run_suite_many("local", tiny_checkpoints, out_dir=tmp_path / "eval", batch_size=16)
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == ["iter_0000006.json", "iter_0000012.json"]
    for model_dir, summary in zip(tiny_checkpoints, summaries, strict=True):
        export = json.loads((model_dir / "export.json").read_text())
        assert summary["model"] == str(model_dir)
        assert (summary["step"], summary["tokens"]) == (export["step"], export["tokens"])
        assert json.loads((tmp_path / "eval" / f"{model_dir.name}.json").read_text()) == summary
        task = summary["tasks"]["local_text"]
        assert task["stderr"] == pytest.approx(_lm_eval_stderr(task["score"], 36), rel=1e-9)
    assert [(s["step"], s["tokens"]) for s in summaries] == [(6, 6 * 512), (12, 12 * 512)]
    with pytest.raises(FileNotFoundError, match="no config.json"):
        run_suite_many("local", [tiny_checkpoints[0], tmp_path], out_dir=tmp_path / "none")
    assert not (tmp_path / "none").exists()  # checked before any model is loaded


def test_paper13_production_configs_run_on_fixtures(tiny_model, network_unreachable):
    from dripper.eval.lm_suite import format_markdown, load_suite, run_suite

    suite = load_suite("paper13")
    summary = run_suite(suite, tiny_model, fixtures=MANIFEST, batch_size=16, max_gen_toks=8)
    tasks = summary["tasks"]
    assert list(tasks) == [t.name for t in suite.tasks]
    assert tasks["mmlu"]["samples"] == 57 * 2  # the group over all 57 subjects, aggregated by lm-eval
    assert tasks["triviaqa"]["metric"] == "exact_match,remove_whitespace"
    assert tasks["hellaswag"]["metric"] == "acc_norm,none" and tasks["hellaswag"]["samples"] == 3
    assert tasks["race"]["samples"] == 2 and tasks["nq_open"]["num_fewshot"] == 5
    assert all(0.0 <= row["score"] <= 1.0 for row in tasks.values())
    assert summary["mean"] == pytest.approx(sum(row["score"] for row in tasks.values()) / 13)
    # Every benchmark carries lm-eval's standard error; the means carry sqrt(sum se^2) / n.
    assert all(isinstance(row["stderr"], float) and row["stderr"] >= 0 for row in tasks.values())
    assert summary["mean_stderr"] == pytest.approx(
        math.sqrt(sum(r["stderr"] ** 2 for r in tasks.values())) / 13
    )
    reading = [tasks[n]["stderr"] for n in ("boolq", "race")]
    assert summary["categories_stderr"]["reading_comprehension"] == pytest.approx(
        math.sqrt(sum(se**2 for se in reading)) / 2
    )
    for name in ("piqa", "boolq"):  # 0/1 outcomes: the closed-form standard error of their mean
        row = tasks[name]
        assert row["stderr"] == pytest.approx(_lm_eval_stderr(row["score"], row["samples"]), rel=1e-9)
    commonsense = [
        tasks[n]["score"]
        for n in ("hellaswag", "piqa", "social_iqa", "winogrande", "openbookqa", "commonsense_qa")
    ]
    assert summary["categories"]["commonsense"] == pytest.approx(sum(commonsense) / 6)
    table = format_markdown({"alpha": summary, "beta": summary}, suite)
    assert table.count("\n") == 3 and "| Commonsense reasoning avg |" in table.splitlines()[0] + " |"
    assert f"**{100 * summary['mean']:.2f}**" in table


def test_fixture_datasets_refuse_unlisted_hub_datasets():
    import datasets

    from dripper.eval.lm_suite import fixture_datasets, load_fixture_manifest

    with fixture_datasets(load_fixture_manifest(MANIFEST)):
        arc = datasets.load_dataset("allenai/ai2_arc", "ARC-Easy")
        assert set(arc) == {"train", "validation", "test"} and arc["test"][0]["answerKey"] == "B"
        with pytest.raises(FileNotFoundError, match="not in the fixture manifest"):
            datasets.load_dataset("some/other_dataset")
    assert datasets.load_dataset.__name__ == "load_dataset" and datasets.load_dataset.__module__.startswith(
        "datasets"
    )


def test_summarize_reads_standard_errors_and_their_absence():
    from dripper.eval.lm_suite import load_suite, mean_stderr, summarize

    suite = load_suite("local")
    row = {"acc,none": 0.25, "acc_stderr,none": 0.05}
    summary = summarize(
        suite, {"results": {"local_text": row}, "n-samples": {"local_text": {"effective": 36}}}
    )
    assert summary["tasks"]["local_text"]["stderr"] == 0.05 and summary["mean_stderr"] == 0.05
    # bootstrap_iters=0 (or a metric without one): lm-eval writes "N/A"; no mean stderr is made up either.
    row = {"acc,none": 0.25, "acc_stderr,none": "N/A"}
    summary = summarize(suite, {"results": {"local_text": row}})
    assert summary["tasks"]["local_text"]["stderr"] is None and summary["mean_stderr"] is None
    assert summary["categories_stderr"] == {"local": None}
    assert mean_stderr([0.03, 0.04]) == pytest.approx(0.025) and mean_stderr([]) is None


# -- is the suite's data at hand? ------------------------------------------------------------------------


def _offline_env(tmp_path: Path) -> dict[str, str]:
    """This process's environment with the Hub offline and an empty Hugging Face cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.pop("TRANSFORMERS_CACHE", None)
    (tmp_path / "hf-home").mkdir(exist_ok=True)
    return {**env, "HF_HOME": str(tmp_path / "hf-home"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def test_check_suite_data_passes_for_local_and_paper13_on_fixtures(network_unreachable):
    from dripper.eval.lm_suite import check_suite_data, load_suite

    assert check_suite_data("local") == {"local_text": "ok"}
    status = check_suite_data("paper13", fixtures=MANIFEST)
    assert list(status) == [t.name for t in load_suite("paper13").tasks]
    assert set(status.values()) == {"ok"}


def test_check_suite_data_names_every_benchmark_without_data_offline(tmp_path):
    """Offline with an empty cache (a fresh process: datasets reads HF_* when imported): every paper13
    benchmark is named, with how to make its data available (no retries with back-off: bounded by the
    subprocess's timeout; the seconds are printed)."""
    script = (
        "import json, time\n"
        "from dripper.eval.lm_suite import SuiteDataUnavailable, check_suite_data\n"
        "start = time.perf_counter()\n"
        "try:\n"
        "    check_suite_data('paper13')\n"
        "except SuiteDataUnavailable as error:\n"
        "    print(json.dumps({'message': str(error), 'seconds': time.perf_counter() - start}))\n"
    )
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=_offline_env(tmp_path), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    wall = time.perf_counter() - started
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    message = result["message"]
    from dripper.eval.lm_suite import load_suite

    names = [t.name for t in load_suite("paper13").tasks]
    assert "13 of 13 benchmarks cannot load their data" in message
    for name in names:
        assert f"\n  {name}: " in message
    assert "Couldn't reach 'cais/mmlu'" in message
    assert "HF_DATASETS_OFFLINE=1" in message and "--fixtures" in message and "`local`" in message
    assert "it is not set here" not in message  # it is set
    print(
        f"check_suite_data('paper13') offline: {result['seconds']:.1f} s ({wall:.1f} s with the interpreter)"
    )


def test_check_cli_exit_codes(tmp_path, capsys):
    def check(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "dripper.eval.lm_suite", "--check", *args], cwd=REPO, env=_offline_env(tmp_path),
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    local = check("--suite", "local")
    assert local.returncode == 0, local.stderr
    assert json.loads(local.stdout.strip().splitlines()[-1]) == {
        "suite": "local",
        "tasks": {"local_text": "ok"},
    }
    offline = check("--suite", "paper13", "--offline")
    assert offline.returncode == 2 and offline.stdout == ""
    assert "error: suite 'paper13': 13 of 13 benchmarks cannot load their data" in offline.stderr
    from dripper.eval.lm_suite import main

    assert main(["--suite", "local"]) == 2
    assert "--model-dir is required (or --check)" in capsys.readouterr().err
    assert main(["--model-dir", str(tmp_path), str(tmp_path), "--out", "x.json", "--suite", "local"]) == 2
    assert "--out takes one model; use --out-dir" in capsys.readouterr().err
