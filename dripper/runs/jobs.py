"""The stages after tokenize as ``dripper run`` and the Airflow operators both run them: pretraining, the
benchmark suite, the extraction benchmark and the ablation report.

Their folders in the run layout (:mod:`dripper.layout`), the command lines of their jobs and what they
return live here; the CLI runs the jobs in its own process, the operators in processes of their own
(``python -m MODULE ARGUMENTS``, :class:`dripper.airflow.jobs.ModuleJobOperator`). Only the standard library is
imported at module load.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EvaluationFolders",
    "PretrainJob",
    "ReportFiles",
    "collect_scores",
    "extraction_benchmark_arguments",
    "last_json_object",
    "missing_modules",
    "pretrain_job",
    "pretrain_result",
    "store_extraction_benchmark",
    "suite_arguments",
    "training_plan",
    "write_report_manifest",
]


# -- jobs in processes of their own ------------------------------------------------------------------------

_PROBE = """import importlib.util, sys
def found(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False
print(' '.join(name for name in sys.argv[1:] if not found(name)))"""


def missing_modules(modules: Sequence[str], env: dict[str, str] | None = None) -> list[str]:
    """Those of ``modules`` that ``python`` (this interpreter, with ``env``) cannot import."""
    probe = [sys.executable, "-c", _PROBE, *modules]
    return subprocess.run(probe, capture_output=True, text=True, env=env, check=True).stdout.split()


def last_json_object(lines: Iterable[str]) -> dict[str, Any] | None:
    """The last JSON object printed on a line of its own (the project's CLIs print their result as one).

    A line holding several objects back to back counts by its last: the ranks of a multi-process job write
    into one log, and two ranks' results can land on one line without a newline between them.
    """
    decoder = json.JSONDecoder()
    result = None
    for line in lines:
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            continue
        index, last = 0, None
        try:
            while index < len(line):
                last, index = decoder.raw_decode(line, index)
                while index < len(line) and line[index].isspace():
                    index += 1
        except json.JSONDecodeError:
            continue
        if isinstance(last, dict):
            result = last
    return result


# -- pretrain ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PretrainJob:
    """A training run on an extractor folder's tokens: ``python -m dripper.pretrain {train}``, then ``{export}``
    (``None`` where the training process exports its checkpoints itself: its result's ``export``)."""

    root: str
    run_dir: str
    hf_root: str
    train: list[str]
    export: list[str] | None
    #: ``torchrun …`` replacing ``python -m`` (data parallel), or ``None``.
    launcher: list[str] | None


def pretrain_job(
    stage: Any,
    root: str,
    tokens: str,
    tokenizer: str,
    run: str | None = None,
    seed: int | None = None,
    data_token_limit: int | None = None,
    export_in_training: bool = False,
) -> PretrainJob:
    """The training run ``run`` (default ``{model}-{budget}-seed{seed}``) of ``stage`` (a
    ``PretrainStageConfig``) with ``seed`` (default: its first) on ``tokens`` in ``{root}/pretrain/{run}``,
    every checkpoint exported to its ``hf-checkpoints/``; ``data_token_limit`` cuts the corpus
    (:func:`training_plan`). ``export_in_training``: a single-process run exports in its own process
    (``train --export-to``, one interpreter start fewer); a ``torchrun`` one still exports afterwards.

    ``tokenizer``: a ``tokenizer.json`` or its folder (the training CLI wants the folder).
    """
    from dripper.eval.ablation import default_train_run
    from dripper.layout import ExtractorLayout

    folder = ExtractorLayout(root)
    seed = stage.seeds[0] if seed is None else int(seed)
    run = str(run or default_train_run(stage.model, stage.budget, seed))
    tokenizer = os.path.dirname(tokenizer) if os.path.isfile(tokenizer) else tokenizer
    run_dir, hf_root = folder.pretrain(run), folder.hf_checkpoints(run)
    train = stage.train_arguments(run_dir, tokens, tokenizer, seed, data_token_limit)
    launcher = stage.launcher()
    in_training = export_in_training and launcher is None
    return PretrainJob(
        root=root,
        run_dir=run_dir,
        hf_root=hf_root,
        train=[*train, "--export-to", hf_root] if in_training else train,
        export=None if in_training else stage.export_arguments(run_dir, hf_root),
        launcher=launcher,
    )


def training_plan(stage: Any, arms: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One training run per arm and seed of ``stage`` (a ``PretrainStageConfig``), in arm order.

    ``arms``: the tokenize stage's results (``root``, ``tokens``, ``token_count``). With
    ``equalize_corpora`` every run gets ``data_token_limit``, the smallest arm's tokens (an arm at that
    size trains on all of it). Returns ``[{"root", "tokens", "seed", "data_token_limit", "corpus_tokens"}]``.
    """
    arms = [dict(arm) for arm in arms]
    if not arms:
        raise ValueError("no tokenized corpus to train on")
    limit = None
    if stage.equalize_corpora:
        counts = [arm.get("token_count") for arm in arms]
        if any(count is None for count in counts):
            raise ValueError("equalize_corpora needs every arm's token_count (the tokenize stage's result)")
        limit = int(min(counts))
        if limit < 1:
            raise ValueError(
                f"equalize_corpora: the smallest corpus holds {limit} tokens; nothing to train on"
            )
    return [
        {
            "root": arm["root"],
            "tokens": arm["tokens"],
            "seed": int(seed),
            "data_token_limit": limit,
            "corpus_tokens": arm.get("token_count"),
        }
        for arm in arms
        for seed in stage.seeds
    ]


def pretrain_result(job: PretrainJob, train: Any, export: dict[str, Any] | None) -> dict[str, Any]:
    """What the pretrain task returns: the run, its exported checkpoints (the last as ``hf_dir``) and the
    jobs' own results."""
    checkpoints = [item["out"] for item in (export or {}).get("checkpoints") or []]
    seed = job.train[job.train.index("--seed") + 1] if "--seed" in job.train else None
    return {
        "run_dir": job.run_dir,
        "seed": int(seed) if seed is not None else None,
        "hf_dir": checkpoints[-1] if checkpoints else job.hf_root,
        "checkpoints": checkpoints,
        "root": job.root,
        "train": train,
        "export": export,
    }


# -- evaluate ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvaluationFolders:
    """A training run's scores: ``{root}/eval/{run}/checkpoints/{checkpoint}.json`` and ``scores.json``."""

    folder: str

    @classmethod
    def of(cls, root: str, run: str) -> EvaluationFolders:
        from dripper.layout import ExtractorLayout

        return cls(ExtractorLayout(root).evaluation(run))

    @property
    def checkpoints(self) -> str:
        return os.path.join(self.folder, "checkpoints")

    @property
    def scores(self) -> str:
        return os.path.join(self.folder, "scores.json")

    def checkpoint_scores(self, models: Sequence[Any]) -> list[str]:
        return [
            os.path.join(self.checkpoints, f"{os.path.basename(str(m).rstrip('/'))}.json") for m in models
        ]


def suite_arguments(
    models: Sequence[Any],
    suite: Any,
    out_dir: str,
    device: Any,
    limit: Any = None,
    fixtures: Any = None,
    extra: Sequence[Any] = (),
    reference: Any = None,
) -> list[Any]:
    """``python -m dripper.eval.lm_suite`` flags scoring each model folder into ``out_dir/{folder name}.json``
    (with ``reference``, each checkpoint's loss on that held-out text too)."""
    return [
        "--model-dir", *models, "--suite", suite, "--out-dir", out_dir, "--device", device,
        *(["--limit", limit] if limit not in (None, "") else []),
        *(["--fixtures", fixtures] if fixtures not in (None, "") else []),
        *(["--reference", reference] if reference not in (None, "") else []),
        *(extra or []),
    ]  # fmt: skip


def collect_scores(folders: EvaluationFolders, models: Sequence[Any]) -> dict[str, Any]:
    """Copy the last model's scores to ``scores.json``; returns it with the per-checkpoint files."""
    checkpoint_scores = folders.checkpoint_scores(models)
    shutil.copyfile(checkpoint_scores[-1], folders.scores)
    with open(folders.scores, encoding="utf-8") as f:
        summary = json.load(f)
    return {
        "scores": folders.scores,
        "checkpoint_scores": checkpoint_scores,
        **{key: summary.get(key) for key in ("mean", "mean_stderr", "categories")},
    }


# -- extraction benchmark ----------------------------------------------------------------------------------


def extraction_benchmark_arguments(
    data: Any,
    extractors: Any,
    dripper_labelers: Any,
    extractor_specs: Any,
    group_by: Any,
    workers: Any,
    limit: Any,
    summary_file: str,
    pages_file: str,
) -> list[Any]:
    """``python -m dripper.eval.extraction`` flags: ``extractors`` by name, ``dripper:{labeler}`` per labeler, the
    specs (dicts) as JSON; the summary and per-page scores to the two files."""
    extractors = [extractors] if isinstance(extractors, str) else list(extractors or [])
    extractors += [f"dripper:{labeler}" for labeler in dripper_labelers or []]
    specs = [json.dumps(spec, sort_keys=True) for spec in extractor_specs or []]
    return [
        "--data", *([data] if isinstance(data, str) else list(data)),
        *(["--extractor", *extractors] if extractors else []),
        *(["--extractor-spec", *specs] if specs else []),
        "--group-by", group_by if isinstance(group_by, str) else ",".join(group_by or []),
        "--workers", int(workers), "--out", summary_file, "--pages-out", pages_file, "--no-progress",
        *(["--limit", int(limit)] if limit not in (None, "") else []),
    ]  # fmt: skip


def store_extraction_benchmark(
    output_dir: str, summary_file: str, pages_file: str, storage_options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Put a benchmark's summary, its printed table and the per-page scores in ``output_dir`` (local or
    ``s3://``: ``summary.json``, ``report.txt``, ``pages.jsonl``); returns where, and each row's figures."""
    from dripper.eval.extraction import format_report
    from dripper.io.json_files import write_json
    from dripper.io.storage import filesystem_for, join_path

    with open(summary_file, encoding="utf-8") as f:
        summary = json.load(f)
    fs, base = filesystem_for(output_dir, storage_options)
    base = base.rstrip("/")
    fs.makedirs(base, exist_ok=True)
    fs.put_file(pages_file, f"{base}/pages.jsonl")
    write_json(join_path(output_dir, "summary.json"), summary, storage_options)
    with fs.open(f"{base}/report.txt", "w") as f:
        f.write(format_report(summary) + "\n")
    rows = {row: data["all"] for row, data in summary["rows"].items()}
    return {
        "output_dir": output_dir,
        "report": join_path(output_dir, "report.txt"),
        "extractors": list(rows),
        "summary": join_path(output_dir, "summary.json"),
        "rows": rows,
    }


# -- report ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportFiles:
    """An ablation report's folder: ``manifest.json`` in, ``report.html`` and ``report.md`` out."""

    folder: str

    @property
    def manifest(self) -> str:
        return os.path.join(self.folder, "manifest.json")

    @property
    def html(self) -> str:
        return os.path.join(self.folder, "report.html")

    @property
    def markdown(self) -> str:
        return os.path.join(self.folder, "report.md")

    def arguments(self) -> list[str]:
        """``python -m dripper.eval.report`` flags."""
        return ["--manifest", self.manifest, "--html", self.html, "--markdown", self.markdown]


def write_report_manifest(folder: str, manifest: dict[str, Any]) -> ReportFiles:
    """Write ``manifest`` (``dripper.eval.ablation.ablation_manifest``) into the report folder ``folder``."""
    files = ReportFiles(str(folder))
    os.makedirs(files.folder, exist_ok=True)
    with open(files.manifest, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
    return files
