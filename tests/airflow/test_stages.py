"""The stage operators called directly (``execute`` with a stand-in for Airflow's context): the crawl
refresh's state, WARC selection (from the form or from a new-crawl asset event), worker processes started
from a task, and the long-job operators' failure modes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.sdk import Asset

from dripper.airflow.hooks import RunStorageHook, selection_key
from dripper.airflow.stages import (
    SELECTION_FILE,
    AblationReportOperator,
    FindNewCrawlsOperator,
    ModuleJobOperator,
    RecordKnownCrawlsOperator,
    SelectWarcsOperator,
    SimplifyBatchOperator,
    TokenizeOperator,
    WriteCrawlManifestOperator,
    spawn_without_airflow_main,
)
from tests.dags import SAMPLE

MANIFEST_ASSET = Asset(name="cc_crawl_manifest", uri="dripper://cc_snapshot_refresh/crawl_manifest")


class FakeTaskInstance:
    def __init__(self) -> None:
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = value


class FakeContext(dict):
    """The parts of Airflow's task context the operators use."""

    def __init__(self, triggering_asset_events=None, run_id: str = "manual__test") -> None:
        super().__init__(
            ti=FakeTaskInstance(),
            run_id=run_id,
            params={},
            outlet_events=defaultdict(lambda: SimpleNamespace(extra={})),
            triggering_asset_events=triggering_asset_events or {},
        )


def test_run_folder_names():
    assert selection_key(4, None, 0) == "n4-seed0"
    assert selection_key(None, 0.01, 7) == "f0.01-seed7"
    assert selection_key(None, None, 0, warcs_per_shard=2) == "all-seed0-w2"


def _refresh(root: Path, crawl_index: Path, max_new: int = 1) -> tuple[list[str], FakeContext]:
    context = FakeContext()
    publish = FindNewCrawlsOperator(
        task_id="find", crawl_index=str(crawl_index), storage_root=str(root), max_new_crawls=max_new
    ).execute(context)
    for crawl_id in publish:
        WriteCrawlManifestOperator(
            task_id="manifest",
            crawl_id=crawl_id,
            crawl_base=str(SAMPLE),
            storage_root=str(root),
            outlets=[MANIFEST_ASSET],
        ).execute(context)
    found = context["ti"].pushed["crawls"]
    RecordKnownCrawlsOperator(
        task_id="record", listed=found["listed"], published=found["publish"], storage_root=str(root)
    ).execute(context)
    return publish, context


def test_refresh_publishes_the_newest_new_crawl_once(tmp_path):
    index = tmp_path / "collinfo.json"
    index.write_text(
        json.dumps([{"id": f"CC-MAIN-2025-{w:02d}"} for w in (5, 13, 8)] + [{"id": "CC-MAIN-SAMPLE"}])
    )
    context = FakeContext()
    find = FindNewCrawlsOperator(task_id="find", crawl_index=str(index), storage_root=str(tmp_path))
    assert find.execute(context) == ["CC-MAIN-2025-13"]  # the newest; a first run starts one build
    assert len(context["ti"].pushed["crawls"]["new"]) == 4
    # With no build wanted, a run only records what it saw.
    publish, _ = _refresh(tmp_path, index, max_new=0)
    assert publish == []
    state = RunStorageHook(str(tmp_path)).read_json(str(tmp_path / "crawls" / "_known_crawls.json"))
    assert sorted(state["crawls"]) == [
        "CC-MAIN-2025-05",
        "CC-MAIN-2025-08",
        "CC-MAIN-2025-13",
        "CC-MAIN-SAMPLE",
    ]

    fresh = tmp_path / "fresh"
    index.write_text(json.dumps([{"id": "CC-MAIN-SAMPLE"}]))
    publish, context = _refresh(fresh, index)
    assert publish == ["CC-MAIN-SAMPLE"]
    event = next(iter(context["outlet_events"].values())).extra
    assert event["crawl_id"] == "CC-MAIN-SAMPLE" and event["warc_files"] == 4
    assert Path(event["manifest"]).exists()
    state = RunStorageHook(str(fresh)).read_json(str(fresh / "crawls" / "_known_crawls.json"))
    assert state["crawls"]["CC-MAIN-SAMPLE"]["published_by"] == "manual__test"
    assert _refresh(fresh, index)[0] == []  # known now: nothing new next week


def _select(root: Path, context: FakeContext | None = None, **options) -> tuple[list[dict], FakeContext]:
    context = context or FakeContext()
    arguments = {"crawl_id": "CC-MAIN-SAMPLE", "crawl_base": str(SAMPLE), "warcs_per_task": 2}
    config = {"warc_count": 3}
    for name, value in options.items():
        (arguments if name in arguments else config)[name] = value
    batches = SelectWarcsOperator(
        task_id="select", storage_root=str(root), config=config, **arguments
    ).execute(context)
    return batches, context


def test_a_whole_crawl_must_be_asked_for(tmp_path, monkeypatch):
    """Neither a count nor a fraction: a listing past the guard is refused with the fix named (a real
    crawl has ~100,000 files); fraction 1 asks for all of it, and a small listing is taken whole."""
    from airflow.sdk.exceptions import AirflowFailException

    import dripper.stages.selection

    assert (
        len(_select(tmp_path / "small", warc_count=None)[0][0]["selection_root"]) > 0
    )  # 4 files: taken whole
    monkeypatch.setattr(dripper.stages.selection, "WHOLE_CRAWL_GUARD", 3)
    with pytest.raises(AirflowFailException, match=r"lists 4 WARC files.*warc_count.*warc_fraction 1"):
        _select(tmp_path / "guarded", warc_count=None)
    batches, context = _select(tmp_path / "all", warc_count=None, warc_fraction=1)
    assert context["ti"].pushed["selection"]["warc_files"] == 4


def test_select_plans_batches_of_shards(tmp_path):
    batches, context = _select(tmp_path)
    selection = context["ti"].pushed["selection"]
    root = tmp_path / "runs" / "CC-MAIN-SAMPLE" / "n3-seed0"
    assert selection["selection_root"] == str(root)
    assert (selection["warc_files"], selection["shards"], selection["batches"]) == (3, 3, 2)
    assert [(b["first_shard"], b["shards"]) for b in batches] == [(0, 2), (2, 1)]
    plan = json.loads((root / SELECTION_FILE).read_text())
    assert [files[0] for files in plan["shards"]] == plan["warc_files"]
    # The same selection again is the same plan; a larger count keeps the smaller one's files first.
    assert _select(tmp_path)[0] == batches
    bigger = json.loads(
        (Path(_select(tmp_path, warc_count=4)[0][0]["selection_root"]) / SELECTION_FILE).read_text()
    )
    assert bigger["warc_files"][:3] == plan["warc_files"]


def test_select_refuses_bad_or_mixed_selections(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(
        AirflowFailException, match="simplify config: give warc_count or warc_fraction, not both"
    ):
        _select(tmp_path, warc_count=2, warc_fraction=0.5)
    with pytest.raises(
        AirflowFailException, match="simplify config: warc_fraction: .*less than or equal to 1"
    ):
        _select(tmp_path, warc_count=None, warc_fraction=1.5)
    batches, _ = _select(tmp_path, warc_count=2)
    plan_path = Path(batches[0]["selection_root"]) / SELECTION_FILE
    plan = json.loads(plan_path.read_text())
    plan["shards"] = [["s3://elsewhere/a.warc.gz"], ["s3://elsewhere/b.warc.gz"]]
    plan_path.write_text(json.dumps(plan))
    with pytest.raises(ValueError, match="other WARC files"):
        _select(tmp_path, warc_count=2)


@pytest.mark.parametrize(
    "values, flags",
    [
        ({"warc_count": 2, "warc_fraction": 0.5}, ["--warc-count", "2", "--warc-fraction", "0.5"]),
        ({"warc_count": 0}, ["--warc-count", "0"]),
        ({"warc_fraction": 1.5}, ["--warc-fraction", "1.5"]),
    ],
)
def test_a_value_the_config_refuses_fails_the_task_with_the_clis_message(tmp_path, values, flags):
    """The select task validates through the simplify config: the same bad value gives the task and
    ``dripper run simplify`` one message."""
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException) as failure:
        _select(tmp_path, **{"warc_count": None, **values})
    command = [str(Path(sys.executable).parent / "dripper"), "run", "simplify", "--input", str(SAMPLE), "--output",
               str(tmp_path / "cli"), *flags]  # fmt: skip
    cli = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert cli.returncode != 0 and str(failure.value) in cli.stderr, (str(failure.value), cli.stderr)


@pytest.mark.parametrize(
    "values, flags",
    [
        ({"batch_size": 0}, ["--batch-size", "0"]),
        ({"extractor": "qwen=vllm"}, ["--extractor", "qwen=vllm"]),
        ({"extractor": "c=cpu,threshhold=0.5"}, ["--extractor", "c=cpu,threshhold=0.5"]),
    ],
)
def test_the_extract_task_refuses_what_the_cli_refuses_with_its_message(tmp_path, values, flags):
    """The extract task builds the extract config (the spec in it) from its values and checks the spec's
    labeler before any shard: the message is ``dripper run extract``'s for the same value."""
    from airflow.sdk.exceptions import AirflowFailException

    from dripper.airflow.stages import ExtractOperator

    task = ExtractOperator(
        task_id="extract", input_root=str(tmp_path / "run"), config={"workers": 0, **values}
    )
    with pytest.raises(AirflowFailException) as failure:
        task.execute(FakeContext())
    command = [str(Path(sys.executable).parent / "dripper"), "run", "extract", "--input", str(tmp_path / "run"),
               *flags]  # fmt: skip
    cli = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert cli.returncode != 0 and str(failure.value) in cli.stderr, (str(failure.value), cli.stderr)
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_the_evaluate_task_validates_its_config_before_running():
    from airflow.sdk.exceptions import AirflowFailException

    from dripper.airflow.stages import EvaluateOperator

    model = {"run_dir": "/nonexistent", "root": "/nonexistent", "hf_dir": "/nonexistent"}
    task = EvaluateOperator(task_id="evaluate", model=model, config={"limit": 0})
    with pytest.raises(AirflowFailException, match=r"evaluate config: limit: Input should be greater than"):
        task.execute(FakeContext())


def test_select_takes_the_crawl_from_a_new_crawl_event(tmp_path):
    """A run started by cc_snapshot_refresh builds the crawl of the newest manifest event."""
    _, refresh_context = _refresh(tmp_path, SAMPLE / "collinfo.json")
    extra = next(iter(refresh_context["outlet_events"].values())).extra
    older = SimpleNamespace(extra={"crawl_id": "CC-MAIN-OLDER", "crawl_base": "s3"}, timestamp=1)
    newest = SimpleNamespace(extra=extra, timestamp=2)
    context = FakeContext(triggering_asset_events={"cc_crawl_manifest": [newest, older]})
    _, context = _select(tmp_path, context, crawl_id="CC-MAIN-2099-01", crawl_base="s3", warc_count=1)
    selection = context["ti"].pushed["selection"]
    assert selection["crawl_id"] == "CC-MAIN-SAMPLE"
    assert selection["crawl_base"] == str(SAMPLE)  # from the manifest the refresh wrote


@pytest.mark.slow
def test_simplify_starts_dask_workers_from_a_task_process(tmp_path, monkeypatch):
    """In a task, __main__ is the `airflow` command, whose import fails in spawned children (no database
    for tasks): the Dask LocalCluster the stage starts must not re-import it."""
    hostile = tmp_path / "airflow_main.py"
    hostile.write_text("raise SystemExit('spawned child re-imported the task main module')\n")
    monkeypatch.setattr(sys.modules["__main__"], "__file__", str(hostile), raising=False)
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", None, raising=False)  # as for a console script
    batches, _ = _select(tmp_path, warc_count=1, warcs_per_task=1)
    result = SimplifyBatchOperator(
        task_id="simplify", batch=batches[0], storage_root=str(tmp_path), config={"workers": 1}
    ).execute(FakeContext())
    assert (result["shards"], result["written"], result["skipped"]) == (1, 1, 0)
    assert result["pages_out"] in (47, 50, 49)
    assert sys.modules["__main__"].__file__ == str(hostile)  # restored after the stage


def test_spawn_guard_restores_main():
    main = sys.modules["__main__"]
    before = (getattr(main, "__file__", None), getattr(main, "__spec__", None))
    with spawn_without_airflow_main():
        assert getattr(main, "__file__", None) is None and main.__spec__ is None
    assert (getattr(main, "__file__", None), getattr(main, "__spec__", None)) == before


def test_tokenize_without_a_tokenizer_is_skipped(tmp_path):
    from airflow.sdk.exceptions import AirflowSkipException

    with pytest.raises(AirflowSkipException, match="no tokenizer"):
        TokenizeOperator(
            task_id="tokenize", root=str(tmp_path), config={"tokenizer": None}, storage_root=str(tmp_path)
        ).execute(FakeContext())


def test_a_missing_stage_fails_at_once_naming_the_module():
    from airflow.sdk.exceptions import AirflowFailException

    job = ModuleJobOperator(task_id="evaluate", module="eval.not_written_yet", stage="evaluation")
    with pytest.raises(
        AirflowFailException, match=r"evaluation stage cannot run: module 'eval.not_written_yet'"
    ):
        job.execute(FakeContext())


def test_a_job_runs_in_its_own_process_and_returns_its_json(tmp_path):
    from airflow.sdk.exceptions import AirflowException

    (tmp_path / "toy_job.py").write_text(
        textwrap.dedent(
            """
            import json, os, sys
            print("working")
            print(json.dumps({"pid": os.getpid(), "args": sys.argv[1:]}))
            sys.exit(int(os.environ.get("TOY_EXIT", "0")))
            """
        )
    )
    env = {"PYTHONPATH": str(tmp_path)}
    result = ModuleJobOperator(task_id="job", module="toy_job", argv=["--n", 3, None], env=env).execute(
        FakeContext()
    )
    assert result["result"]["args"] == ["--n", "3"]
    assert result["result"]["pid"] != __import__("os").getpid()
    with pytest.raises(AirflowException, match="exited with 3"):
        ModuleJobOperator(task_id="job", module="toy_job", env={**env, "TOY_EXIT": "3"}).execute(
            FakeContext()
        )


def test_ablation_report_manifest_joins_runs_by_extractor_folder(tmp_path):
    """Rows are keyed by the extractor spec's name (two specs of one labeler stay two rows), each with its
    own refinement and tokens summaries, training run, final and per-checkpoint scores, found in the run
    layout as the evaluate task wrote them."""
    import json

    from dripper.layout import RunLayout

    layout = RunLayout(str(tmp_path / "x"))
    for name in ("v10", "v11"):
        folder = layout.extractor(name)
        Path(folder.root).mkdir(parents=True)
        Path(folder.spec_file).write_text(json.dumps({"name": name, "labeler": "vllm"}))
        scores = Path(folder.evaluation("tiny-4steps-seed1234"))
        (scores / "checkpoints").mkdir(parents=True)
        for step in (2, 4):
            (scores / "checkpoints" / f"iter_{step:07d}.json").write_text("{}")
        (scores / "scores.json").write_text("{}")
    extracts = [{"output_root": layout.extractor(name).root} for name in ("v10", "v11", "trafilatura")]
    evaluations = [
        {
            "root": layout.extractor(name).root,
            "run_dir": layout.extractor(name).pretrain("tiny-4steps-seed1234"),
        }
        for name in ("v11", "v10")
    ]
    report = AblationReportOperator(
        task_id="report",
        extracts=extracts,
        evaluations=evaluations,
        extraction={"output_dir": f"{tmp_path}/bench"},
        output_dir=str(tmp_path / "report"),
        run_description={"crawl": "CC-MAIN-SAMPLE", "warc_files": 2},
    )
    manifest = report.manifest()
    assert [e["name"] for e in manifest["extractors"]] == ["v10", "v11", "trafilatura"]
    v10 = layout.extractor("v10")
    assert manifest["extractors"][0] == {
        "name": "v10",
        "labeler": "vllm",
        "spec": {"name": "v10", "labeler": "vllm"},
        "run_summary": v10.run_summary,
        "refine_summary": v10.refine_summary,
        "tokens_summary": v10.tokens_summary,
        "extraction_row": "dripper:v10/md",
        "train_run": v10.pretrain("tiny-4steps-seed1234"),
        "scores": f"{v10.evaluation('tiny-4steps-seed1234')}/scores.json",
        "checkpoint_scores": [
            f"{v10.evaluation('tiny-4steps-seed1234')}/checkpoints/iter_{s:07d}.json" for s in (2, 4)
        ],
    }
    assert manifest["extractors"][1]["train_run"].endswith("extractors/v11/pretrain/tiny-4steps-seed1234")
    assert "scores" not in manifest["extractors"][2]  # not evaluated: the report says so
    assert manifest["run"] == {"crawl": "CC-MAIN-SAMPLE", "warc_files": 2}
    assert manifest["extraction"] == f"{tmp_path}/bench/summary.json"
