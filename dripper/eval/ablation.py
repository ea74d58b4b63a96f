"""The ablation report's manifest from a run root's layout (``dripper.layout``): what the CLI
(``dripper run report``) and the Airflow report task both write, so the two find the same files.

For each extractor folder it lists the spec (``_extractor.json``), the refinement and tokens summaries, and
its training run with its final and per-checkpoint scores, or (several seeds) ``runs``, one such entry per
seed; missing files are left out, and the report says they are missing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dripper.layout import ExtractorLayout

__all__ = ["ablation_manifest", "default_train_run", "extractor_entry"]


def default_train_run(model: str, budget: str, seed: int | None = None) -> str:
    """The training run's folder name under ``pretrain/`` (and ``eval/``) when none is given:
    ``{model}-{budget}-seed{seed}`` (``budget``: ``5120tokens`` or ``20steps``)."""
    return f"{model}-{budget}" + (f"-seed{int(seed)}" if seed is not None else "")


def _run_entry(layout: ExtractorLayout, train_run: str) -> dict[str, Any]:
    """One training run of an extractor: its folder, seed (from its ``run.json``) and scores."""
    entry: dict[str, Any] = {"train_run": layout.pretrain(train_run)}
    run_file = _local(layout.pretrain(train_run)) / "run.json"
    if run_file.exists():
        entry["seed"] = json.loads(run_file.read_text(encoding="utf-8")).get("train", {}).get("seed")
    evaluation = _local(layout.evaluation(train_run))
    if (evaluation / "scores.json").exists():
        entry["scores"] = str(evaluation / "scores.json")
    checkpoints = sorted((evaluation / "checkpoints").glob("*.json"))
    if checkpoints:
        entry["checkpoint_scores"] = [str(path) for path in checkpoints]
    return entry


def _local(path: str) -> Path:
    return Path(str(path).removeprefix("file://"))


def extractor_entry(root: str, train_run: str | Sequence[str] | None) -> dict[str, Any]:
    """One extractor's manifest entry from its folder (``{run root}/extractors/{name}``): one training run
    (``train_run``, ``scores``, ``checkpoint_scores``), or several, one per seed, as ``runs``."""
    layout = ExtractorLayout(str(root).rstrip("/"))
    spec_path = _local(layout.spec_file)
    spec = json.loads(spec_path.read_text(encoding="utf-8")) if spec_path.exists() else {}
    name = spec.get("name") or layout.name
    entry: dict[str, Any] = {
        "name": name,
        "labeler": spec.get("labeler"),
        "spec": spec,
        "run_summary": layout.run_summary,
        "refine_summary": layout.refine_summary,
        "tokens_summary": layout.tokens_summary,
        "extraction_row": f"dripper:{name}/md",
    }
    runs = [train_run] if isinstance(train_run, str) else list(train_run or [])
    if len(runs) == 1:
        entry.update({k: v for k, v in _run_entry(layout, runs[0]).items() if k != "seed"})
    elif runs:
        entry["runs"] = [_run_entry(layout, run) for run in runs]
    return entry


def ablation_manifest(
    extractor_roots: Sequence[str],
    *,
    train_runs: dict[str, str | list[str]] | str | None = None,
    extraction_summary: str | None = None,
    title: str = "Extractor ablation",
    run: dict[str, Any] | None = None,
    lm_pages_per_second: float | None = None,
) -> dict[str, Any]:
    """The report manifest (``dripper.eval.report`` reads it) for these extractor folders.

    Args:
        extractor_roots: ``{run root}/extractors/{name}`` folders, in report order.
        train_runs: The training run of each extractor (by folder path; a list: one run per seed), or one
            run name for all.
        extraction_summary: An ``dripper.eval.extraction`` summary scoring the same specs (rows ``dripper:{name}/md``).
        title: The report's title.
        run: What was run (crawl, WARC files, model, steps, suite, tokenizer), shown at the top.
        lm_pages_per_second: One GPU's LM pages/s, for the GPU-hours per million pages of each extractor.
    """
    entries = []
    for root in extractor_roots:
        key = str(root).rstrip("/")
        train_run = train_runs.get(key) if isinstance(train_runs, dict) else train_runs
        entries.append(extractor_entry(key, train_run))
    manifest: dict[str, Any] = {"title": title, "extractors": entries}
    if run:
        manifest["run"] = dict(run)
    if extraction_summary:
        manifest["extraction"] = str(extraction_summary)
    if lm_pages_per_second:
        manifest["lm_pages_per_second"] = float(lm_pages_per_second)
    return manifest
