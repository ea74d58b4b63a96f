"""extractor_ablation end to end with ``dag.test()`` on the bundled sample: a cascade whose second labeler
is an LM (the tiny local Qwen3 through the ``torch`` labeler: vLLM in the extract stage's Dask workers is
tests/labelers/test_dask_stage's) in a Dask worker process on the form's default worker count, its corpus
pretrained on the tiny model with two evaluated checkpoints, then the report, whose figures are read back
and checked against the run's own outputs. Then arms × seeds on a token
budget, and the checks that stop a run before any WARC is read: a bad extractor spec and a benchmark suite
whose data is not here. (``trafilatura`` runs through the DAGs in test_corpus_build and the REST test.)"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.dags import DAGS_DIR, SAMPLE, dag_run_xcoms, small_crawl, task_seconds

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TINY_QWEN = REPO / ".cache" / "models" / "tiny-qwen3"
SECTIONS = (
    "run", "summary", "training-scores", "scores", "corpus", "extraction", "lm-cost", "training",
)  # fmt: skip


#: Pages of the crawl the LM extractors label: the tiny model in vLLM's CPU build takes seconds a page (the
#: LM tasks are most of this test's time; at least one of the first 6 pages fits its 1,024-token context).
CRAWL_PAGES = 6


@pytest.fixture(scope="module")
def crawl(tmp_path_factory) -> Path:
    return small_crawl(tmp_path_factory.mktemp("crawl"), CRAWL_PAGES)


@pytest.fixture(scope="module")
def ablation():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(DAGS_DIR / "extractor_ablation.py"))
    assert bag.import_errors == {}
    return bag.dags["extractor_ablation"]


def _vllm_spec(name: str, extra: str = "") -> str:
    return (
        f"{name}=vllm,model={TINY_QWEN},max_model_len=1024,dtype=float32,enforce_eager=true,"
        f"gpu_memory_utilization=0.2{extra}"
    )


def _conf(tmp_path: Path, tokenizer: str, extractors: list[str], crawl: Path | None = None, **more) -> dict:
    return {
        "crawl_id": "CC-MAIN-SMALL" if crawl else "CC-MAIN-SAMPLE",
        "crawl_base": str(crawl or SAMPLE),
        "warc_count": 1,
        "warcs_per_task": 1,
        "extractors": extractors,
        "storage_root": str(tmp_path / "runs"),
        "simplify_workers": 0,
        # extract_workers keeps its default (1): each extract task's labeler lives in a Dask worker process.
        "refine_tasks": 1,
        "refine_workers": 1,
        "tokenizer": tokenizer,
        "train_steps": 4,
        "eval_every": 2,
        "report_labelled_limit": 1,
        "report_name": "test",
        **more,
    }


class _Report(HTMLParser):
    """The report's sections (their text) and figure data."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, str] = {}
        self.figure_data: dict[str, object] = {}
        self._section: str | None = None
        self._script: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self._section = attrs.get("id")
            self.sections[self._section] = ""
        if tag == "script" and attrs.get("class") == "figure-data":
            self._script = attrs["data-figure"]

    def handle_endtag(self, tag):
        if tag == "section":
            self._section = None
        if tag == "script":
            self._script = None

    def handle_data(self, data):
        if self._script:
            self.figure_data[self._script] = json.loads(data)
        elif self._section:
            self.sections[self._section] += data


def test_ablation_with_an_lm_cascade_runs_to_a_report_that_reads_back(
    ablation, airflow_db, tokenizer_dir, crawl, tmp_path
):
    pytest.importorskip("matplotlib")
    if not (TINY_QWEN / "config.json").exists():
        pytest.skip(f"{TINY_QWEN} is missing: `python scripts/make_tiny_models.py` (make install) builds it")
    names = ["casc"]  # cpu's own arm: the test below
    # A cascade: the CPU labeler on every page, the least sure half to the tiny Qwen3.
    lm = {"model": str(TINY_QWEN), "max_model_len": 1024, "device": "cpu"}
    cascade = {"name": "casc", "labeler": "cpu", "route": {"labeler": "torch", "options": lm, "share": 0.5}}
    # One seed: this test checks each figure against its run's own files (seeds: the test below).
    conf = _conf(tmp_path, tokenizer_dir, [json.dumps(cascade)], crawl, report_lm_pages_per_second=2.5,
                 seeds=[1234])  # fmt: skip
    assert "extract_workers" not in conf  # the default: 1, a LocalCluster worker per extract task
    run = ablation.test(run_conf=conf)
    print("task times:", task_seconds(run))
    states = {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    assert run.state == "success", states
    xcoms = dag_run_xcoms(run)

    # One corpus per spec name, each folder recording its spec.
    extracts = {xcoms[("extract", i)]["extractor"]: xcoms[("extract", i)] for i in range(len(names))}
    assert sorted(extracts) == sorted(names)
    for name, result in extracts.items():
        root = Path(result["output_root"])
        assert root.name == name and root.parent.name == "extractors"
        assert json.loads((root / "_extractor.json").read_text())["name"] == name
    assert extracts["casc"]["spec"]["route"]["labeler"] == "torch"
    summaries = {
        name: json.loads((Path(extracts[name]["output_root"]) / "_run_summary.json").read_text())
        for name in names
    }
    # The cascade: every page through its CPU step, the least sure half routed to the LM.
    assert extracts["casc"]["failed"] == {}
    cascade_counters = summaries["casc"]["stages"]["extracted"]["counters"]
    scored, routed = cascade_counters["route:pages_scored"], cascade_counters["route:pages_routed"]
    assert routed == int(0.5 * scored + 0.5) and summaries["casc"]["stages"]["cascade_first"]["pages_out"] > 0
    assert cascade_counters.get("extractor:dripper:torch", 0) > 0  # routed pages labelled by the LM

    # Each model: two checkpoints exported and scored.
    evaluations = {
        Path(xcoms[("evaluate", i)]["root"]).name: xcoms[("evaluate", i)] for i in range(len(names))
    }
    assert sorted(evaluations) == sorted(names)
    for evaluation in evaluations.values():
        assert len(evaluation["checkpoint_scores"]) == 2

    report = xcoms[("ablation_report", -1)]
    page = Path(report["html"]).read_text(encoding="utf-8")
    parsed = _Report()
    parsed.feed(page)
    for section in SECTIONS:
        for name in names:
            assert name in parsed.sections[section], (section, name)

    data = json.loads(
        re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page).group(1)
    )
    by_name = {e["name"]: e for e in data["extractors"]}
    for name in names:
        root = Path(extracts[name]["output_root"])
        # Scores over training: the curve's points are the per-checkpoint score files.
        points = [json.loads(Path(p).read_text()) for p in evaluations[name]["checkpoint_scores"]]
        curve = parsed.figure_data["curve"][name]
        assert curve["step"] == [p["step"] for p in points] == [2, 4]
        assert curve["tokens"] == [p["tokens"] for p in points]
        assert curve["mean"] == pytest.approx([100 * p["mean"] for p in points])
        assert curve["mean_stderr"] == pytest.approx([100 * p["mean_stderr"] for p in points])
        final = json.loads(Path(evaluations[name]["scores"]).read_text())
        assert parsed.figure_data["scores"][name] == pytest.approx(
            {task: 100 * row["score"] for task, row in final["tasks"].items()}
        )
        # Corpus size: the refinement summary and the tokens the model trained on.
        refine = json.loads((root / "refine" / "_summary.json").read_text())
        assert parsed.figure_data["corpus"][name]["docs_out"] == [row["docs_out"] for row in refine["steps"]]
        tokens = json.loads((root / "tokens" / "_summary.json").read_text())
        assert by_name[name]["tokens"]["tokens"] == tokens["tokens"]
        assert f"{tokens['tokens']:,}" in parsed.sections["summary"]
        # Extraction quality: the same spec, scored on the labelled pages.
        assert by_name[name]["extraction_row"] == f"dripper:{name}/md"
        assert by_name[name]["extraction"] is not None
        # Training loss: the run's own log.
        log = [json.loads(line) for line in (Path(evaluations[name]["run_dir"]) / "train_log.jsonl").open()]
        assert parsed.figure_data["loss"][name]["loss"] == [r["loss"] for r in log]
    # What each extractor asked of the LM: none, the cascade's routed share, at 2.5 pages/s.
    costs = {name: by_name[name]["lm_cost"] for name in names}
    pages = summaries["casc"]["stages"]["extracted"]["pages_out"]
    assert costs["casc"]["page_share"] == pytest.approx(routed / pages)
    token_share = (
        cascade_counters["route:routed_prompt_tokens_estimate"]
        / cascade_counters["route:prompt_tokens_estimate"]
    )
    assert costs["casc"]["gpu_hours_per_million_pages"] == pytest.approx(token_share * 1e6 / (2.5 * 3600))
    assert f"{100 * routed / pages:.1f}%" in parsed.sections["lm-cost"]
    assert f"{token_share * 1e6 / (2.5 * 3600):,.1f}" in parsed.sections["lm-cost"]
    extraction = json.loads(Path(xcoms[("extraction_quality", -1)]["summary"]).read_text())
    assert parsed.figure_data["extraction"] == {
        row: v["all"]["rouge5_f1"] for row, v in extraction["rows"].items()
    }
    assert data["comparisons"] == []  # one arm: nothing to compare (pairs: the test below)
    assert "tokenizer" not in " ".join(re.findall(r"<th>(.*?)</th>", page)).lower()


def test_arms_times_seeds_on_one_token_budget_with_the_early_signal(
    ablation, airflow_db, tokenizer_dir, tmp_path
):
    """cpu and the baselines, two seeds each, on one token budget with the corpora cut to the smallest: one
    pretrain and evaluate task per (arm, seed), and a report with the budget and epochs, the spread across
    seeds, the early signal and a reading of each difference."""
    pytest.importorskip("matplotlib")
    names = ["cpu", "fineweb", "dclm"]
    # A user's own refinement step from the form, placed after the language filter, in every arm's funnel.
    step = {
        "factory": "tests.refine.user_steps:WordCountFilter",
        "options": {"min_words": 20},
        "after": "language",
    }
    # One scored checkpoint per run (the last of 4 steps): two per run are the test above's.
    conf = _conf(tmp_path, tokenizer_dir, names, train_steps=None, train_tokens=1024, seeds=[1, 2],
                 equalize_corpora=True, eval_limit=8, eval_every=4, refine_custom_steps=[step])  # fmt: skip
    run = ablation.test(run_conf=conf)
    print("task times:", task_seconds(run))
    states = {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    assert run.state == "success", states
    xcoms = dag_run_xcoms(run)
    plan = xcoms[("training_plan", -1)]
    assert [(Path(p["root"]).name, p["seed"]) for p in plan] == [(n, s) for n in names for s in (1, 2)]
    tokens = {
        Path(xcoms[("tokenize", i)]["root"]).name: xcoms[("tokenize", i)]["token_count"] for i in range(3)
    }
    assert {p["data_token_limit"] for p in plan} == {min(tokens.values())}
    for i in range(3):
        refine = json.loads((Path(xcoms[("tokenize", i)]["root"]) / "refine" / "_summary.json").read_text())
        steps = [row["step"] for row in refine["steps"]]
        assert steps[steps.index("language") + 1] == "word_count_filter"
        row = refine["steps"][steps.index("word_count_filter")]
        assert row["docs_out"] + sum(row["dropped"].values()) == row["docs_in"]
    evaluations = [xcoms[("evaluate", i)] for i in range(6)]
    assert sorted((Path(e["root"]).name, Path(e["run_dir"]).name) for e in evaluations) == sorted(
        (n, f"tiny-1024tokens-seed{s}") for n in names for s in (1, 2)
    )
    reference = evaluations[0]["reference"]
    assert reference["held_out"] > 0 and Path(reference["file"]).is_file()
    for evaluation in evaluations:
        for path in evaluation["checkpoint_scores"]:
            assert json.loads(Path(path).read_text())["reference_loss"] > 0

    page = Path(xcoms[("ablation_report", -1)]["html"]).read_text(encoding="utf-8")
    parsed = _Report()
    parsed.feed(page)
    data = json.loads(
        re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page).group(1)
    )
    for arm in data["extractors"]:
        assert arm["seeds"] == [1, 2] and arm["scores"]["seeds"] == 2
        assert (
            arm["scores"]["mean_seed_sd"] is not None and arm["scores"]["reference_loss_seed_sd"] is not None
        )
        budget = arm["budget"]
        assert budget["train_tokens"] == 1024 and budget["unique_tokens"] <= min(tokens.values())
        assert budget["epochs"] == pytest.approx(1024 / budget["unique_tokens"])
        for section in ("budget", "seeds", "early-signal", "comparisons"):
            assert arm["name"] in parsed.sections[section], (section, arm["name"])
    assert sorted(parsed.figure_data["reference"]) == sorted(names)
    # The baseline arms' exact settings and every arm's decontamination (on by default here), in the report.
    by_name = {arm["name"]: arm for arm in data["extractors"]}
    assert by_name["cpu"]["baseline"] is None
    assert by_name["fineweb"]["baseline"]["settings"]["favour_precision"] is True
    assert by_name["dclm"]["baseline"]["settings"]["main_content"] is True
    for arm in data["extractors"]:
        decont = arm["decontamination"]
        assert decont["suite"] == "local" and decont["n"] == 13 and "local_text" in decont["benchmarks"]
    assert "Baseline arms" in parsed.sections["corpus"] and "Decontamination" in parsed.sections["corpus"]
    assert len(data["comparisons"]) == 3
    for pair in data["comparisons"]:
        for result in (pair["mean"], pair["reference_loss"]):
            assert result["seed_stderr"] is not None and result["reading"]
    assert data["run"]["seeds"] == "[1, 2]" or data["run"]["seeds"] == [1, 2]


def test_bad_specs_and_missing_benchmark_data_stop_the_run_before_any_warc(
    ablation, airflow_db, tokenizer_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-cache"))
    conf = _conf(
        tmp_path, tokenizer_dir, ["cpu", "x=vllm,model=/models/m,answer_format=compakt"], eval_suite="paper13"
    )
    run = ablation.test(run_conf=conf)
    states = {ti.task_id: ti.state for ti in run.get_task_instances() if ti.map_index == -1}
    assert run.state == "failed"
    assert states["check_extractors"] == "failed" and states["check_suite"] == "failed"
    assert states["select_warcs"] == "upstream_failed"
    assert not (tmp_path / "runs").exists()  # nothing selected, read or written


def test_spec_errors_name_the_extractor_and_the_field(ablation):
    from airflow.sdk.exceptions import AirflowFailException

    check = ablation.get_task("check_extractors").python_callable
    with pytest.raises(
        AirflowFailException, match=r"extractor 'x': options: answer_format 'compakt'.*'compact'"
    ):
        check(params={"extractors": ["cpu", "x=vllm,model=/m,answer_format=compakt"]})
    with pytest.raises(
        AirflowFailException, match=r"extractor 'y': options\.model: the vllm labeler needs model"
    ):
        check(params={"extractors": ["y=vllm"]})
    with pytest.raises(
        AirflowFailException, match=r"extractor 'z': options\.thresold.*did you mean 'threshold'"
    ):
        check(params={"extractors": ["z=cpu,thresold=0.5"]})
    with pytest.raises(AirflowFailException, match=r"extract config: batch_size: Input should be greater"):
        check(params={"extractors": ["cpu"], "extract_batch_size": 0})  # the form's, checked with the specs
    configs = check(
        params={"extractors": ["cpu", _vllm_spec("v10", ",answer_format=json")], "extract_workers": 2}
    )
    specs = [config["extractor"] for config in configs]  # one extract config per spec, the form's workers
    assert [s["name"] for s in specs] == ["cpu", "v10"] and specs[1]["options"]["answer_format"] == "json"
    assert [config["workers"] for config in configs] == [2, 2]


def test_missing_benchmark_data_names_the_benchmarks_and_the_fix(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from dripper.airflow.stages import CheckSuiteOperator

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-cache"))
    with pytest.raises(AirflowFailException) as failure:
        CheckSuiteOperator(task_id="check_suite", config={"suite": "paper13"}).execute({})
    message = str(failure.value)
    for benchmark in ("mmlu", "hellaswag", "boolq"):
        assert benchmark in message
    assert "HF_DATASETS_OFFLINE" in message and "--fixtures" in message
    assert CheckSuiteOperator(task_id="check_suite", config={"suite": "local"}).execute({})["result"][
        "tasks"
    ] == {"local_text": "ok"}
