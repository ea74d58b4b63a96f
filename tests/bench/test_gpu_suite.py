"""``bench/gpu_suite.py`` on CPU with 2-layer models: its plan (both LM architectures, both micro-batches),
and one LM step and one pretraining step run as the GPU run starts them.

The GPU run is one shot (15 minutes of device time, all tries together), so the script itself is what is
tested here: each kind of step runs, every figure it writes is there and consistent with the counts beside
it, each engine's answers equal the reference's, and a step cut off by its time limit keeps the lines it
wrote. (The two steps left out run the same scripts with another ``--arch`` or micro-batch size.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.bench import load_bench
from tests.conftest import SAMPLE_PAGES

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / ".cache" / "models" / "qwen-tokenizer"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def suite():
    return load_bench("gpu_suite")


@pytest.fixture(scope="module")
def calls_file(tmp_path_factory) -> Path:
    """Prompts of 2 sample pages prepared as for the GPU run (oracle labels, CPU-labeler drafts)."""
    if not (TOKENIZER / "tokenizer.json").exists():
        pytest.skip(f"{TOKENIZER} is missing: build it with `python scripts/make_tiny_models.py`")
    path = tmp_path_factory.mktemp("calls") / "calls.json.gz"
    load_bench("lm_engine").prepare(SAMPLE_PAGES, 4096, path, limit=2)
    return path


def test_carry_list_names_the_prepared_files_under_the_limit(suite, capsys):
    assert suite.main(["--list-carry"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["carry"] == [
        ".cache/bench/lm_calls.json.gz",
        ".cache/models/qwen-tokenizer",
        ".cache/gpu-wheels",
    ]
    assert listing["limit_mib"] == 64
    present = [size for size in listing["bytes"].values() if size is not None]
    assert listing["total_mib"] == pytest.approx(sum(present) / 2**20, abs=0.01)
    assert listing["total_mib"] + (listing["working_tree_mib"] or 0) < 64  # both travel within 64 MiB


def test_the_plan_has_both_architectures_and_both_micro_batches(suite, tmp_path):
    plan = suite.steps(False, tmp_path / "calls.json.gz", tmp_path / "out")
    assert [name for name, _, _ in plan] == [
        "lm-qwen3-0.6b",
        "lm-qwen3-0.6b-cascade30",
        "lm-hunyuan-0.5b",
        "pretrain-1b-mbs8",
        "pretrain-1b-mbs16",
    ]
    assert sum(share for _, _, share in plan) == pytest.approx(1.0)
    arguments = {name: argv for name, argv, _ in plan}
    assert arguments["lm-qwen3-0.6b"][arguments["lm-qwen3-0.6b"].index("--arch") + 1] == "qwen3"
    assert arguments["lm-hunyuan-0.5b"][arguments["lm-hunyuan-0.5b"].index("--arch") + 1] == "hunyuan"
    for name, size in (("pretrain-1b-mbs8", "8"), ("pretrain-1b-mbs16", "16")):
        assert arguments[name][arguments[name].index("--micro-batch-size") + 1] == size
    cascade = arguments["lm-qwen3-0.6b-cascade30"]
    assert cascade[cascade.index("--routed-share") + 1] == "0.3" and "--shipped-only" in cascade


def test_routed_share_keeps_the_pages_the_cascade_routes(tmp_path):
    """``--routed-share``: the pages the CPU labeler declined first, then its least confident, by the
    pipeline's own rule; ``--pages`` applies after."""
    import gzip

    engine = load_bench("lm_engine")
    keys = {0: [False, 0.95], 1: [True, None], 2: [False, 0.40], 3: [False, 0.99], 4: [False, 0.70]}
    calls = [
        {
            "page": page,
            "first_block": 0,
            "n_blocks": 1,
            "oracle": None,
            "cpu_draft": None if declined else [True],
            "cpu_route": [declined, score],
            "prompt_ids": [1, 2, 3],
            "regex": "x",
            "max_tokens": 4,
        }
        for page, (declined, score) in keys.items()
    ]
    path = tmp_path / "calls.json.gz"
    with gzip.open(path, "wt") as out:
        json.dump({"source": "s", "context": 64, "pages": 5, "failed_pages": 0, "calls": calls}, out)
    assert {c.page for c in engine.load_calls(path, 0, 0, 0.4).calls} == {1, 2}  # round(0.4 x 5) = 2
    assert {c.page for c in engine.load_calls(path, 0, 0, 0.6).calls} == {1, 2, 4}
    assert {c.page for c in engine.load_calls(path, 0, 0, None).calls} == {0, 1, 2, 3, 4}


def test_the_suite_runs_on_cpu(suite, calls_file, tmp_path):
    """One LM step (HunYuan: the architecture only this script benches; the Qwen3 path of the same
    ``bench/lm_engine.py`` is test_torch_engine's) and one pretraining step, as the GPU run starts them."""
    pytest.importorskip("megatron.core")
    out = tmp_path / "out"
    # A generous budget: about 50 s of CPU in all, but 1 to 3 minutes of wall time on 2 shared cores.
    only = ["--only", "lm-hunyuan-0.5b", "--only", "pretrain-1b-mbs8"]
    assert suite.main([str(out), "--tiny", "--calls", str(calls_file), "--budget", "1500", *only]) == 0
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    steps = {line["suite_step"]: line for line in lines if "suite_step" in line}
    assert list(steps) == ["lm-hunyuan-0.5b", "pretrain-1b-mbs8"]
    assert all(step["status"] == "ok" for step in steps.values()), steps
    assert lines[0]["suite"] == "bench/gpu_suite.py" and lines[0]["calls_sha256"]

    for run, architecture in (("lm-hunyuan-0.5b", "hunyuan_v1_dense"),):
        mine = [line for line in lines if line.get("run") == run]
        (model,) = [line for line in mine if "architecture" in line]
        assert model["architecture"] == architecture and model["layers"] == 2
        engines = {line["engine"]: line for line in mine if "engine" in line}
        assert set(engines) == {
            "torch (speculation=previous)",
            "torch (speculation=none)",
            "torch (speculation=draft)",
            "transformers generate + constraint",
            "torch (sequential runner, speculation=previous)",
        }
        for engine in engines.values():
            assert "error" not in engine, engine
            seconds = engine["seconds"]
            assert engine["pages_per_s"] == pytest.approx(engine["pages"] / seconds, rel=0.05)
            assert engine["prompt_tokens_per_s"] == pytest.approx(engine["prompt_tokens"] / seconds, rel=0.05)
            assert engine["achieved_tflops"] == pytest.approx(
                engine["model_tflop"] / seconds, rel=0.05, abs=1e-3
            )
            assert engine["forward_passes_per_page"] > 0 and engine["gpu_peak_memory_gib"] is None  # CPU
            assert 0 < engine["prefill_tflop"] <= engine["model_tflop"]
        # generate: one forward pass per answer token; ours: fewer (forced tokens cost none).
        generate = engines["transformers generate + constraint"]
        assert generate["forward_passes_per_page"] == generate["answer_tokens"] / generate["pages"]
        assert engines["torch (speculation=none)"]["forward_passes_per_page"] < (
            engines["torch (speculation=none)"]["answer_tokens"]
            / engines["torch (speculation=none)"]["pages"]
        )
        agreements = [line for line in mine if "agreement_with_torch_speculation" in line]
        assert len(agreements) == 4
        for line in agreements:
            same, total = line["identical_answers"].split("/")
            assert same == total and int(total) >= 1 and line["differing_calls"] == [], line

    results = {line["run"]: line["pretrain_result"] for line in lines if "pretrain_result" in line}
    assert set(results) == {"pretrain-1b-mbs8"}
    for result in results.values():
        assert result["timed_steps"] == 2 and result["tokens_per_second"] > 0
    assert sum("pretrain_step" in line for line in lines) == 3  # one line per step, warm-up included


def test_a_step_cut_off_by_its_limit_keeps_its_lines(suite, tmp_path):
    """What a step appended before the time limit stays in results.jsonl; the step reads ``timeout``."""
    script = (
        "import json, sys, time\n"
        "open(sys.argv[1], 'a').write(json.dumps({'engine': 'first', 'pages_per_s': 1.0}) + '\\n')\n"
        "time.sleep(60)\n"
    )
    results = tmp_path / "results.jsonl"
    step = suite.run_step("slow", [sys.executable, "-c", script, str(results)], 8, tmp_path)
    assert step["status"] == "timeout" and step["seconds"] < 60  # cut before its sleep ended
    assert json.loads(results.read_text()) == {"engine": "first", "pages_per_s": 1.0}


def test_missing_calls_file_names_the_prepare_command(suite, tmp_path):
    with pytest.raises(SystemExit, match="lm_engine.py --prepare"):
        suite.main([str(tmp_path / "out"), "--calls", str(tmp_path / "absent.json.gz")])
