"""The corpus build's page stages as ``dripper run`` and the Airflow operators both run them, on one run
root: a batch of a WARC selection's simplify shards and their roll-up, the extractor spec from its fields,
refinement (without tokenize) and tokenization of an extractor's folder, and the build summary.

Each function calls the stage function and shapes its result into the small dict that the CLI prints and
the tasks return (XCom). Only the standard library is imported at module load.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dripper.config.simplify import SimplifyStageConfig

__all__ = [
    "build_summary",
    "record_simplify_batches",
    "refine_config",
    "refine_result",
    "selection_plan",
    "simplify_batch",
    "stage_report_dict",
    "tokenize_extractor",
]


def stage_report_dict(report: Any) -> dict[str, Any]:
    """The small form of a ``StageReport``: counts and the stage's roll-up, without per-shard lists."""
    data = report.to_dict()
    summary = data.pop("summary", {}) or {}
    for key in ("pages_in", "pages_out", "dropped", "fallbacks", "complete"):
        data[key] = summary.get(key)
    return data


# -- simplify ----------------------------------------------------------------------------------------------


def selection_plan(root: str, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{root}/_selection.json``: the selected WARC files and their shard plan."""
    from dripper.io.json_files import read_json
    from dripper.layout import RunLayout

    plan = read_json(RunLayout(root).selection_file, storage_options)
    if plan is None:
        raise FileNotFoundError(f"{RunLayout(root).selection_file} is missing: run select_warcs first")
    return plan


def simplify_batch(
    root: str,
    plan: dict[str, Any],
    batch: dict[str, Any],
    config: SimplifyStageConfig,
    *,
    storage_options: dict[str, Any] | None = None,
    input_storage_options: dict[str, Any] | None = None,
    force: bool = False,
    scheduler: Any = None,
) -> dict[str, Any]:
    """Simplify the shards ``batch["first_shard"]`` … ``+ batch["shards"]`` of a selection's ``plan`` with
    ``config``'s page limits and workers (the files and shard size are the plan's).

    Finished shards are skipped. Raises ``StageError`` when a shard failed. Returns ``{"batch", "shards",
    "written", "skipped", "pages_in", "pages_out", "wall_seconds"}``.
    """
    from dripper.stages.runner import StageError, StageReport
    from dripper.stages.simplify import SIMPLIFIED_STAGE, simplify_shards

    started = time.perf_counter()
    first, count = int(batch["first_shard"]), int(batch["shards"])
    shards = list(enumerate(plan["shards"][first : first + count], start=first))
    results, failures = simplify_shards(
        root, shards, config, storage_options, input_storage_options, force=force, progress=False,
        scheduler=scheduler,
    )  # fmt: skip
    if failures:
        raise StageError(StageReport(SIMPLIFIED_STAGE, root, len(shards), failed=failures))
    return {
        "batch": int(batch["batch"]),
        "shards": len(shards),
        "written": sum(r.status == "written" for r in results),
        "skipped": sum(r.status == "skipped" for r in results),
        "pages_in": sum(r.stats.rows_in for r in results),
        "pages_out": sum(r.stats.rows_out for r in results),
        "wall_seconds": round(time.perf_counter() - started, 3),
    }


def record_simplify_batches(
    root: str, batches: Sequence[dict[str, Any]], storage_options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Roll the batches' shards up into the stage summary and ``{root}/_run_summary.json``, once every
    batch is done (``batches``: :func:`simplify_batch`'s results). Raises ``RuntimeError`` when shards are
    missing. Returns :func:`stage_report_dict` of the stage."""
    from dripper.stages.runner import StageReport, record_stage_run
    from dripper.stages.simplify import SIMPLIFIED_STAGE

    plan = selection_plan(root, storage_options)
    batches = [dict(batch) for batch in batches]
    report = StageReport(
        stage=SIMPLIFIED_STAGE,
        root=root,
        shards=len(plan["shards"]),
        written=sum(b["written"] for b in batches),
        skipped=sum(b["skipped"] for b in batches),
        wall_seconds=max((b["wall_seconds"] for b in batches), default=0.0),
    )
    record_stage_run(
        root,
        report,
        expected_shards=len(plan["shards"]),
        storage_options=storage_options,
        parameters={"airflow_tasks": len(batches), "warc_files": len(plan["warc_files"])},
    )
    if not report.summary.get("complete", True):
        raise RuntimeError(
            f"{root}/simplified is incomplete (missing shards {report.summary.get('shards_missing')}); "
            "rerun the failed simplify tasks"
        )
    return stage_report_dict(report)


# -- refine and tokenize -----------------------------------------------------------------------------------

#: The refinement summary's counts that the refine stage returns.
_REFINE_COUNTS = (
    "documents_in", "documents_out", "tokens_in", "tokens_out", "token_unit", "dropped", "balanced",
    "complete", "wall_seconds", "decontamination",
)  # fmt: skip


def refine_config(
    steps: Sequence[str] | None, tasks: Any, workers: Any, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``RefineConfig`` dict of the refine stage: ``options`` with the steps (tokenize left out: it is
    the tokenize stage's), tasks and worker processes."""
    config = dict(options or {})
    if steps is not None:
        config["steps"] = [step for step in steps if step != "tokenize"]
    config["tasks"] = int(tasks)
    config["workers"] = int(workers)
    return config


def refine_result(root: str, summary: dict[str, Any]) -> dict[str, Any]:
    """The small form of a refinement summary: its counts, the steps run and where the corpus is."""
    from dripper.io.storage import join_path

    result = {key: summary[key] for key in _REFINE_COUNTS if key in summary}
    result["steps"] = [row["step"] for row in summary.get("steps", [])[1:]]
    result["root"] = root
    result["corpus"] = join_path(root, "corpus")
    result["summary"] = join_path(root, "refine", "_summary.json")
    return result


def tokenize_extractor(
    root: str,
    tokenizer: str,
    eos_token: str | None,
    *,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    log: Any = None,
) -> dict[str, Any]:
    """Tokenize ``{root}/corpus/`` into ``{root}/tokens/`` (:func:`dripper.refine.tokenize.tokenize_corpus`;
    ``eos_token`` empty: none). Returns the tokens summary's counts and where the tokens are."""
    from dripper.io.storage import join_path
    from dripper.refine.tokenize import tokenize_corpus

    tokens = join_path(root, "tokens")
    summary = tokenize_corpus(join_path(root, "corpus"), tokens, str(tokenizer), eos_token or None,
                              storage_options=storage_options, force=force, log=log)  # fmt: skip
    return {
        "root": root,
        "tokens": tokens,
        "documents": summary["documents"],
        "token_count": summary["tokens"],
        "tokenizer": summary["tokenizer"],
        "megatron_data_path": summary["megatron_data_path"],
    }


# -- the build summary -------------------------------------------------------------------------------------


def build_summary(
    root: str,
    selection_root: str,
    storage_options: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """Every stage's roll-up of an extractor folder ``root`` (simplify's from ``selection_root``; extract,
    refine, tokens), with ``fields`` (crawl, run, parameters) first: what ``_build_summary.json`` holds."""
    from dripper.io.json_files import read_json
    from dripper.io.storage import join_path

    simplify = read_json(join_path(selection_root, "_run_summary.json"), storage_options, {}) or {}
    extract = read_json(join_path(root, "_run_summary.json"), storage_options, {}) or {}
    refine = read_json(join_path(root, "refine", "_summary.json"), storage_options, {}) or {}
    tokens = read_json(join_path(root, "tokens", "_summary.json"), storage_options)
    return {
        **fields,
        "run_root": root,
        "selection_root": selection_root,
        "corpus": join_path(root, "corpus"),
        "tokens": join_path(root, "tokens") if tokens else None,
        "stages": {**(simplify.get("stages") or {}), **(extract.get("stages") or {})},
        "stage_runs": {**(simplify.get("stage_runs") or {}), **(extract.get("stage_runs") or {})},
        "refine": {k: v for k, v in refine.items() if k != "config"},
        "tokens_summary": tokens,
    }
