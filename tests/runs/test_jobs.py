"""The later stages' command lines, folders and results, shared by ``dripper run`` and the operators."""

from __future__ import annotations

import json
from pathlib import Path

from dripper.config.pretrain import PretrainStageConfig
from dripper.runs.jobs import (
    EvaluationFolders,
    collect_scores,
    extraction_benchmark_arguments,
    last_json_object,
    missing_modules,
    pretrain_job,
    pretrain_result,
    suite_arguments,
    write_report_manifest,
)


def test_pretrain_job_is_the_run_folder_and_both_command_lines(tmp_path):
    tokenizer = tmp_path / "tok" / "tokenizer.json"
    tokenizer.parent.mkdir()
    tokenizer.write_text("{}")
    root = str(tmp_path / "x")
    stage = PretrainStageConfig.parse(train_steps=4, eval_every=2, nproc=2)
    job = pretrain_job(stage, root, f"{root}/tokens", str(tokenizer))
    # The first seed's run (1234); another seed, another folder.
    assert (
        job.run_dir == f"{root}/pretrain/tiny-4steps-seed1234"
        and job.hf_root == f"{job.run_dir}/hf-checkpoints"
    )
    assert job.train == stage.train_arguments(job.run_dir, f"{root}/tokens", str(tokenizer.parent), 1234)
    assert pretrain_job(stage, root, "t", str(tokenizer), seed=1235).run_dir.endswith("/tiny-4steps-seed1235")
    assert job.export == ["export", "--checkpoint", job.run_dir, "--out", job.hf_root, "--every-checkpoint"]
    assert job.launcher[:2] == ["torchrun", "--standalone"]
    assert pretrain_job(stage, root, "t", str(tokenizer), "mine").run_dir.endswith("/pretrain/mine")
    result = pretrain_result(job, {"ok": 1}, {"checkpoints": [{"out": "a"}, {"out": "b"}]})
    assert (result["hf_dir"], result["checkpoints"], result["root"], result["seed"]) == (
        "b",
        ["a", "b"],
        root,
        1234,
    )
    assert pretrain_result(job, None, None)["hf_dir"] == job.hf_root


def test_evaluation_scores_and_arguments(tmp_path):
    folders = EvaluationFolders.of(str(tmp_path / "x"), "tiny-4steps")
    Path(folders.checkpoints).mkdir(parents=True)
    models = [f"{tmp_path}/hf/iter_{s:07d}" for s in (2, 4)]
    for step, mean in ((2, 0.25), (4, 0.5)):
        Path(folders.checkpoints, f"iter_{step:07d}.json").write_text(json.dumps({"mean": mean}))
    result = collect_scores(folders, models)
    assert result["mean"] == 0.5 and json.loads(Path(folders.scores).read_text()) == {"mean": 0.5}
    assert result["checkpoint_scores"] == [f"{folders.checkpoints}/iter_{s:07d}.json" for s in (2, 4)]
    assert suite_arguments(models[:1], "local", "out", "cpu", 8, "", ["--x"]) == [
        "--model-dir", models[0], "--suite", "local", "--out-dir", "out", "--device", "cpu", "--limit", 8, "--x",
    ]  # fmt: skip
    assert suite_arguments(models[:1], "local", "out", "cpu", reference="ref.jsonl")[-2:] == [
        "--reference",
        "ref.jsonl",
    ]


def test_extraction_benchmark_arguments():
    arguments = extraction_benchmark_arguments(
        "pages.jsonl", "trafilatura", ["cpu"], [{"name": "a", "labeler": "cpu"}], ("source",), "2", None,
        "s.json", "p.jsonl",
    )  # fmt: skip
    assert arguments == [
        "--data", "pages.jsonl", "--extractor", "trafilatura", "dripper:cpu",
        "--extractor-spec", '{"labeler": "cpu", "name": "a"}', "--group-by", "source", "--workers", 2,
        "--out", "s.json", "--pages-out", "p.jsonl", "--no-progress",
    ]  # fmt: skip


def test_report_files_and_job_helpers(tmp_path):
    files = write_report_manifest(str(tmp_path / "r"), {"title": "t"})
    assert json.loads(Path(files.manifest).read_text()) == {"title": "t"}
    assert files.arguments() == [
        "--manifest",
        files.manifest,
        "--html",
        files.html,
        "--markdown",
        files.markdown,
    ]
    assert last_json_object(["{", '{"a": 1}', "text", '{"b": 2}', "{bad}"]) == {"b": 2}
    # Two ranks' results on one line of a job's log (seen on Slurm): the last one counts.
    assert last_json_object(['{"rank": 0, "step": 8}{"rank": 1, "step": 8}']) == {"rank": 1, "step": 8}
    assert last_json_object(['{"a": 1} trailing {"b": 2}']) is None
    assert missing_modules(["json", "no_such_module_here"]) == ["no_such_module_here"]
