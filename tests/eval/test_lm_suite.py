"""lm-eval on the tiny exported model, offline: the local task and the 13 production task configs on fixtures."""

from __future__ import annotations

import json
import socket
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
def tiny_model(tmp_path_factory) -> Path:
    """The tiny Llama-style model trained 12 steps on the toy corpus and exported to Hugging Face format."""
    from pretrain.export import export_checkpoint
    from pretrain.train import train

    root = tmp_path_factory.mktemp("lm")
    corpus = make_toy_corpus(root / "toy")
    result = train(tiny_train_config(corpus, root / "run", steps=12, save_interval=12))
    return export_checkpoint(result.out_dir, root / "hf").out_dir


def test_suite_files_are_valid():
    from eval.lm_suite import load_suite

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
    from eval.lm_suite import load_suite

    bad = tmp_path / "bad.yaml"
    bad.write_text("categories: {a: A}\ntasks:\n  - {name: x, task: x, metric: acc, category: b}\n")
    with pytest.raises(ValueError, match="unknown category 'b'"):
        load_suite(bad)
    with pytest.raises(FileNotFoundError, match="paper13"):
        load_suite("no_such_suite")


def test_local_task_runs_offline_on_the_tiny_model(tiny_model, network_unreachable, tmp_path):
    from eval.lm_suite import run_suite

    summary = run_suite("local", tiny_model, out=tmp_path / "scores.json", batch_size=16)
    task = summary["tasks"]["local_text"]
    assert task["samples"] == 36 and task["metric"] == "acc,none"
    assert 0.0 <= task["score"] <= 1.0 and summary["mean"] == task["score"]
    assert json.loads((tmp_path / "scores.json").read_text())["tasks"]["local_text"]["score"] == task["score"]


def test_paper13_production_configs_run_on_fixtures(tiny_model, network_unreachable):
    from eval.lm_suite import format_markdown, load_suite, run_suite

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

    from eval.lm_suite import fixture_datasets, load_fixture_manifest

    with fixture_datasets(load_fixture_manifest(MANIFEST)):
        arc = datasets.load_dataset("allenai/ai2_arc", "ARC-Easy")
        assert set(arc) == {"train", "validation", "test"} and arc["test"][0]["answerKey"] == "B"
        with pytest.raises(FileNotFoundError, match="not in the fixture manifest"):
            datasets.load_dataset("some/other_dataset")
    assert datasets.load_dataset.__name__ == "load_dataset" and datasets.load_dataset.__module__.startswith(
        "datasets"
    )
