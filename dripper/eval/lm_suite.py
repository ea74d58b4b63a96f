"""Benchmark suites for the pretrained models: lm-eval tasks from a config file, scores per task and category.

A suite file (``dripper/eval/suites/paper13.yaml``) lists tasks with their lm-eval name, shots, reported metric and
category. :func:`run_suite` evaluates a Hugging Face model folder (the output of ``python -m dripper.pretrain export``)
with lm-eval and returns each task's score, the mean per category and the plain mean over all tasks::

    python -m dripper.eval.lm_suite --model-dir runs/dripper/hf --suite dripper/eval/suites/paper13.yaml --out scores.json

Production runs read the real datasets through lm-eval's built-in task configs. ``--fixtures MANIFEST``
serves small local files in each benchmark's own schema in place of the Hub datasets those same configs
name (see ``tests/fixtures/lm_eval/manifest.yaml``), so the production configs run offline. A suite may also
name local task folders (``include``, e.g. ``dripper/eval/tasks``) holding custom task YAMLs.

Output JSON: ``{"suite", "model", "step", "tokens", "tasks": {name: {"task", "category", "metric",
"num_fewshot", "score", "stderr", "samples"}}, "categories": {category: mean}, "categories_stderr",
"mean", "mean_stderr", "lm_eval_version", "seconds"}`` (scores in [0, 1]; ``step`` and ``tokens`` from the
model folder's ``export.json`` when ``python -m dripper.pretrain export`` wrote it).

Each score carries lm-eval's standard error (the sample standard error of the per-document metric); a mean
over tasks carries ``sqrt(sum se_i^2) / n``, the standard error of a mean of independent estimates.

Several ``--model-dir`` folders (the checkpoints of one training run) are scored in one process with
``--out-dir``: one ``{folder name}.json`` each. ``--check`` only verifies that every benchmark's data can be
loaded (offline: from the local cache or ``--fixtures``) and names the ones that cannot, before any model
is trained on their behalf.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

SUITES_DIR = Path(__file__).resolve().parent / "suites"

# Where each built-in task config of the paper13 suite lives under lm_eval/tasks. Indexing only these
# folders takes about a second; indexing all of lm-eval's tasks takes 15-45 s.
BUILTIN_TASK_DIRS = {
    "mmlu": "mmlu/default",
    "arc_easy": "arc",
    "arc_challenge": "arc",
    "hellaswag": "hellaswag",
    "piqa": "piqa",
    "social_iqa": "siqa",
    "winogrande": "winogrande",
    "openbookqa": "openbookqa",
    "commonsense_qa": "commonsense_qa",
    "boolq": "super_glue/boolq",
    "race": "race",
    "triviaqa": "triviaqa",
    "nq_open": "nq_open",
}


@dataclass(frozen=True, slots=True)
class SuiteTask:
    """One benchmark of a suite.

    Attributes:
        name: The name reported (and the key in the output).
        task: lm-eval task or group name.
        num_fewshot: Few-shot examples.
        metric: lm-eval metric reported (``acc``, ``acc_norm``, ``exact_match``).
        filter: lm-eval filter of that metric (``none``, ``remove_whitespace``).
        category: Category key of the suite.
        source: Where the setting (shots, metric, filter) comes from: a paper, or lm-eval's default.
    """

    name: str
    task: str
    num_fewshot: int
    metric: str
    category: str
    filter: str = "none"
    source: str = ""

    @property
    def result_key(self) -> str:
        return f"{self.metric},{self.filter}"


@dataclass(frozen=True, slots=True)
class Suite:
    name: str
    tasks: tuple[SuiteTask, ...]
    categories: dict[str, str] = field(default_factory=dict)
    description: str = ""
    include: tuple[Path, ...] = ()

    def category_label(self, key: str) -> str:
        return self.categories.get(key, key)


def load_suite(path: Path | str) -> Suite:
    """Read and validate a suite file; a bare name (``paper13``) is looked up in ``dripper/eval/suites/``."""
    import yaml

    path = Path(path)
    if not path.suffix and not path.exists():
        path = SUITES_DIR / f"{path}.yaml"
    if not path.exists():
        available = ", ".join(sorted(p.stem for p in SUITES_DIR.glob("*.yaml")))
        raise FileNotFoundError(f"suite {path} not found; available: {available}")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    categories = dict(data.get("categories") or {})
    tasks = []
    for index, entry in enumerate(data.get("tasks") or []):
        missing = {"name", "task", "metric", "category"} - set(entry)
        if missing:
            raise ValueError(f"{path}: task #{index + 1} lacks {sorted(missing)}")
        if categories and entry["category"] not in categories:
            raise ValueError(f"{path}: task {entry['name']!r} has unknown category {entry['category']!r}")
        tasks.append(
            SuiteTask(
                name=entry["name"],
                task=entry["task"],
                num_fewshot=int(entry.get("num_fewshot", 0)),
                metric=entry["metric"],
                filter=entry.get("filter", "none"),
                category=entry["category"],
                source=str(entry.get("source") or ""),
            )
        )
    names = [task.name for task in tasks]
    if not tasks or len(set(names)) != len(names):
        raise ValueError(f"{path}: a suite needs at least one task and unique task names, got {names}")
    include = tuple((path.parent / item).resolve() for item in data.get("include") or [])
    return Suite(
        name=data.get("name", path.stem),
        tasks=tuple(tasks),
        categories=categories,
        description=data.get("description", ""),
        include=include,
    )


def load_fixture_manifest(path: Path | str) -> dict[str, dict[str, dict[str, str]]]:
    """``{dataset_path: {dataset_name or "*": {split: absolute file}}}`` from a fixture manifest."""
    import yaml

    path = Path(path)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    manifest: dict[str, dict[str, dict[str, str]]] = {}
    for dataset_path, names in data.items():
        manifest[dataset_path] = {}
        for name, splits in names.items():
            resolved = {split: str((path.parent / file).resolve()) for split, file in splits.items()}
            for split, file in resolved.items():
                if not Path(file).exists():
                    raise FileNotFoundError(f"{path}: {dataset_path}/{name} split {split}: {file} is missing")
            manifest[dataset_path][str(name)] = resolved
    return manifest


@contextlib.contextmanager
def fixture_datasets(manifest: dict[str, dict[str, dict[str, str]]]) -> Iterator[None]:
    """Serve the manifest's local files wherever ``datasets.load_dataset`` is asked for a listed Hub dataset.

    Any other Hub dataset raises (so a test cannot silently reach the network); local builders (``json``,
    ``csv``, ``parquet``) pass through.
    """
    import datasets

    original = datasets.load_dataset
    local_builders = {"json", "csv", "parquet", "text", "arrow"}

    def load_dataset(path: str, name: str | None = None, *args: Any, **kwargs: Any):
        if path in manifest:
            names = manifest[path]
            splits = names.get(str(name)) or names.get("*")
            if splits is None:
                raise FileNotFoundError(f"fixture manifest has {path} but not its config {name!r}")
            return original("json", data_files=splits)
        if path in local_builders or Path(str(path)).exists():
            return original(path, name, *args, **kwargs)
        raise FileNotFoundError(
            f"dataset {path}/{name} is not in the fixture manifest (no Hub access in fixture runs)"
        )

    datasets.load_dataset = load_dataset
    try:
        yield
    finally:
        datasets.load_dataset = original


def task_manager(suite: Suite, full_index: bool = False):
    """An lm-eval ``TaskManager`` indexing the suite's built-in task folders and its ``include`` folders.

    With ``full_index`` (or a task not in :data:`BUILTIN_TASK_DIRS`), all of lm-eval's tasks are indexed.
    """
    import lm_eval
    from lm_eval.tasks import TaskManager

    builtin_root = Path(lm_eval.__file__).parent / "tasks"
    include = [str(path) for path in suite.include]
    builtin = {BUILTIN_TASK_DIRS.get(task.task) for task in suite.tasks if task.task in BUILTIN_TASK_DIRS}
    unknown = [t.task for t in suite.tasks if t.task not in BUILTIN_TASK_DIRS]
    if full_index or (unknown and not include):
        return TaskManager(include_path=include or None)
    return TaskManager(
        include_defaults=False, include_path=sorted(str(builtin_root / d) for d in builtin) + include
    )


def mean_stderr(errors: Sequence[float | None]) -> float | None:
    """Standard error of the plain mean of independent estimates with these standard errors."""
    if not errors or any(e is None for e in errors):
        return None
    return math.sqrt(sum(e * e for e in errors)) / len(errors)


def _stderr(row: dict[str, Any], task: SuiteTask) -> float | None:
    value = row.get(f"{task.metric}_stderr,{task.filter}")
    try:
        value = float(value)
    except (TypeError, ValueError):  # lm-eval writes "N/A" where it computed none
        return None
    return value if math.isfinite(value) else None


def summarize(suite: Suite, results: dict[str, Any]) -> dict[str, Any]:
    """Pick each task's reported metric and its standard error out of lm-eval's results; means per category
    and overall, each with its standard error."""
    per_task: dict[str, dict[str, Any]] = {}
    table = {**results.get("results", {}), **results.get("groups", {})}
    samples = results.get("n-samples", {})
    for task in suite.tasks:
        row = table.get(task.task)
        if row is None or task.result_key not in row:
            available = sorted(k for k in (row or {}) if not k.endswith("_stderr") and "," in k)
            raise KeyError(
                f"{task.name}: no {task.result_key!r} in lm-eval results for {task.task!r} (has {available})"
            )
        count = samples.get(task.task, {}).get("effective")
        if count is None:  # a group: add up its leaf tasks
            count = (
                sum(s.get("effective", 0) for name, s in samples.items() if name.startswith(f"{task.task}_"))
                or None
            )
        per_task[task.name] = {
            "task": task.task,
            "category": task.category,
            "metric": task.result_key,
            "num_fewshot": task.num_fewshot,
            "score": float(row[task.result_key]),
            "stderr": _stderr(row, task),
            "samples": count,
        }
    categories: dict[str, float] = {}
    categories_stderr: dict[str, float | None] = {}
    for category in dict.fromkeys(task.category for task in suite.tasks):
        rows = [row for row in per_task.values() if row["category"] == category]
        categories[category] = sum(row["score"] for row in rows) / len(rows)
        categories_stderr[category] = mean_stderr([row["stderr"] for row in rows])
    mean = sum(row["score"] for row in per_task.values()) / len(per_task)
    return {
        "suite": suite.name,
        "tasks": per_task,
        "categories": categories,
        "categories_stderr": categories_stderr,
        "mean": mean,
        "mean_stderr": mean_stderr([row["stderr"] for row in per_task.values()]),
    }


def _checkpoint_position(model_dir: Path) -> dict[str, Any]:
    """``step`` and ``tokens`` of an exported checkpoint (its ``export.json``), when known."""
    try:
        data = json.loads((model_dir / "export.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return {key: data[key] for key in ("step", "tokens") if data.get(key) is not None}


def _check_model_dir(model_dir: Path) -> None:
    if not (model_dir / "config.json").exists():
        raise FileNotFoundError(
            f"{model_dir}: no config.json; pass a folder written by `python -m dripper.pretrain export`"
        )


def run_suite(
    suite: Suite | Path | str,
    model_dir: Path | str,
    *,
    out: Path | str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Evaluate ``model_dir`` on the suite with lm-eval; returns (and writes to ``out``) the summary.

    Takes the keyword options of :func:`run_suite_many`.
    """
    summaries = run_suite_many(suite, [model_dir], **options)
    summary = summaries[0]
    if out:
        _write_json(Path(out), summary)
    return summary


def run_suite_many(
    suite: Suite | Path | str,
    model_dirs: Sequence[Path | str],
    *,
    out_dir: Path | str | None = None,
    device: str = "cpu",
    batch_size: int | str = 8,
    limit: int | float | None = None,
    fixtures: Path | str | None = None,
    model_backend: str = "hf",
    full_index: bool = False,
    max_gen_toks: int | None = None,
    bootstrap_iters: int = 100,
    reference: Path | str | None = None,
) -> list[dict[str, Any]]:
    """Evaluate each model folder (e.g. the checkpoints of one run) on the suite, in one process.

    Args:
        suite: A :class:`Suite`, a suite file or a suite name.
        model_dirs: Hugging Face model folders (with their tokenizer).
        out_dir: Write each summary to ``{out_dir}/{folder name}.json`` as soon as it is done.
        device: ``cpu``, ``cuda``, ``cuda:0``...
        batch_size: lm-eval batch size (``auto`` on GPU).
        limit: Evaluate at most this many documents per task (for smoke runs).
        fixtures: A fixture manifest: serve local files instead of the Hub datasets (offline runs).
        model_backend: lm-eval model type (``hf``; ``vllm`` where vLLM is installed).
        full_index: Index all of lm-eval's tasks, not only the suite's folders.
        max_gen_toks: Cap on generated tokens for the generative tasks (TriviaQA, NQ-Open; lm-eval's
            default is 256, more than a tiny model's context).
        bootstrap_iters: lm-eval's bootstrap iterations for metrics without a closed-form standard error
            (accuracy and exact match have one; 0 turns standard errors off).
        reference: A held-out reference text (:mod:`dripper.eval.reference`): each summary gets the model's
            ``reference_loss`` on it (the ablation's early signal) with its standard error.
    """
    import lm_eval
    from lm_eval.api.registry import get_model

    if not isinstance(suite, Suite):
        suite = load_suite(suite)
    model_dirs = [Path(d) for d in model_dirs]
    for model_dir in model_dirs:
        _check_model_dir(model_dir)
    reference_texts = None
    if reference:
        from dripper.eval.reference import read_reference, reference_loss

        reference_texts = read_reference(reference)
    manager = task_manager(suite, full_index=full_index)
    context = fixture_datasets(load_fixture_manifest(fixtures)) if fixtures else contextlib.nullcontext()
    # simple_evaluate takes one few-shot count per call: one call per distinct count, one loaded model.
    by_shots: dict[int, list[str]] = {}
    for task in suite.tasks:
        by_shots.setdefault(task.num_fewshot, []).append(task.task)
    summaries = []
    with context:
        for model_dir in model_dirs:
            start = time.perf_counter()
            model_args = {"pretrained": str(model_dir), "dtype": "float32" if device == "cpu" else "bfloat16"}
            lm = get_model(model_backend).create_from_arg_obj(
                model_args, {"batch_size": batch_size, "device": device}
            )
            results: dict[str, dict[str, Any]] = {"results": {}, "groups": {}, "n-samples": {}}
            for shots, names in by_shots.items():
                part = lm_eval.simple_evaluate(
                    model=lm,
                    tasks=names,
                    num_fewshot=shots,
                    limit=limit,
                    task_manager=manager,
                    log_samples=False,
                    bootstrap_iters=bootstrap_iters,
                    gen_kwargs={"max_gen_toks": max_gen_toks} if max_gen_toks else None,
                )
                for key in results:
                    results[key].update(part.get(key) or {})
            summary = summarize(suite, results)
            summary["model"] = str(model_dir)
            summary.update(_checkpoint_position(model_dir))
            if reference_texts is not None:
                summary.update(reference_loss(model_dir, reference_texts, device))
                summary["reference"] = str(reference)
            summary["lm_eval_version"] = getattr(lm_eval, "__version__", None)
            summary["seconds"] = time.perf_counter() - start
            if out_dir:
                _write_json(Path(out_dir) / f"{model_dir.name}.json", summary)
            summaries.append(summary)
            del lm
    return summaries


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)


class SuiteDataUnavailable(FileNotFoundError):
    """Some benchmarks of a suite cannot load their data here; the message names them and the fix."""


def load_failure(error: BaseException) -> str:
    """Why a benchmark's data did not load, in one line: ``Kind: first line of the message``."""
    first_line = next(iter(str(error).splitlines()), "")[:200]
    kind = type(error).__name__
    return f"{kind}: {first_line}" if first_line else kind


def check_suite_data(
    suite: Suite | Path | str, *, fixtures: Path | str | None = None, full_index: bool = False
) -> dict[str, str]:
    """Load every task of the suite (its data included, as an evaluation would) without a model.

    Returns:
        ``{task name: "ok"}`` for a suite whose data is all at hand.

    Raises:
        SuiteDataUnavailable: naming each benchmark whose data could not be loaded, the error, and how to
            make it available.
    """
    from lm_eval.tasks import get_task_dict

    if not isinstance(suite, Suite):
        suite = load_suite(suite)
    manager = task_manager(suite, full_index=full_index)
    context = fixture_datasets(load_fixture_manifest(fixtures)) if fixtures else contextlib.nullcontext()
    status: dict[str, str] = {}
    with context:
        for task in suite.tasks:
            try:
                get_task_dict([task.task], manager)
                status[task.name] = "ok"
            except Exception as error:  # noqa: BLE001 - any failure to load is reported per benchmark
                status[task.name] = load_failure(error)
    missing = {name: why for name, why in status.items() if why != "ok"}
    if missing:
        offline = os.environ.get("HF_DATASETS_OFFLINE") or os.environ.get("HF_HUB_OFFLINE")
        lines = "\n".join(f"  {name}: {why}" for name, why in missing.items())
        raise SuiteDataUnavailable(
            f"suite {suite.name!r}: {len(missing)} of {len(suite.tasks)} benchmarks cannot load their data "
            f"here ({', '.join(missing)}):\n{lines}\n"
            "Make it available: on a machine with Hub access run the suite once (or "
            "`datasets.load_dataset(...)` for each) to fill the Hugging Face cache, then copy the cache "
            "(HF_HOME / HF_DATASETS_CACHE) to the workers and set HF_DATASETS_OFFLINE=1"
            + ("" if offline else " (it is not set here, so a missing network also shows as this error)")
            + "; or pass --fixtures MANIFEST with local files in each benchmark's schema; or choose the "
            "offline suite `local`."
        )
    return status


def format_markdown(summaries: dict[str, dict[str, Any]], suite: Suite | None = None) -> str:
    """A Markdown table in the shape of the paper's Table 5: one row per model, tasks by category, then the mean.

    ``summaries`` maps a row label (an extractor) to a :func:`run_suite` summary; scores are shown in percent.
    """
    first = next(iter(summaries.values()))
    names = list(first["tasks"])
    categories = list(first["categories"])
    ordered = [n for c in categories for n in names if first["tasks"][n]["category"] == c]
    label = suite.category_label if suite else (lambda key: key)
    header = ["Corpus", *ordered, *(f"{label(c)} avg" for c in categories), "Average"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for row_label, summary in summaries.items():
        cells = [f"{100 * summary['tasks'][n]['score']:.2f}" for n in ordered]
        cells += [f"{100 * summary['categories'][c]:.2f}" for c in categories]
        cells.append(f"**{100 * summary['mean']:.2f}**")
        lines.append("| " + " | ".join([row_label, *cells]) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dripper.eval.lm_suite", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--model-dir", type=Path, nargs="+", default=None, help="Hugging Face model folder(s)"
    )
    parser.add_argument(
        "--suite", default="paper13", help="suite file or name in dripper/eval/suites (default: %(default)s)"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the summary JSON here (one model)")
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="write {model folder name}.json per model here"
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:0 (default: %(default)s)")
    parser.add_argument("--batch-size", default="8", help="lm-eval batch size or 'auto'")
    parser.add_argument("--limit", type=float, default=None, help="at most N documents per task")
    parser.add_argument(
        "--fixtures", type=Path, default=None, help="fixture manifest: local files for Hub datasets"
    )
    parser.add_argument(
        "--reference",
        type=Path,
        default=None,
        help="held-out reference text (plain text, or JSONL with a text field): each model's loss on it",
    )
    parser.add_argument("--model-backend", default="hf", help="lm-eval model type (default: %(default)s)")
    parser.add_argument("--max-gen-toks", type=int, default=None, help="cap generated tokens (tiny models)")
    parser.add_argument("--offline", action="store_true", help="set HF_HUB_OFFLINE/HF_DATASETS_OFFLINE")
    parser.add_argument(
        "--check", action="store_true", help="only check that every benchmark's data loads; no model"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.offline:
        os.environ.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    batch_size: int | str = int(args.batch_size) if args.batch_size.isdigit() else args.batch_size
    limit = int(args.limit) if args.limit is not None and args.limit >= 1 else args.limit
    try:
        suite = load_suite(args.suite)
        if args.check:
            status = check_suite_data(suite, fixtures=args.fixtures)
            print(json.dumps({"suite": suite.name, "tasks": status}))
            return 0
        if not args.model_dir:
            raise ValueError("--model-dir is required (or --check)")
        if args.out and len(args.model_dir) > 1:
            raise ValueError("--out takes one model; use --out-dir for several")
        summaries = run_suite_many(
            suite,
            args.model_dir,
            out_dir=args.out_dir,
            device=args.device,
            batch_size=batch_size,
            limit=limit,
            fixtures=args.fixtures,
            model_backend=args.model_backend,
            max_gen_toks=args.max_gen_toks,
            reference=args.reference,
        )
        if args.out:
            _write_json(args.out, summaries[0])
    except (FileNotFoundError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_markdown({Path(s["model"]).name: s for s in summaries}, suite))
    print(json.dumps({"scores": [s["model"] for s in summaries], "mean": [s["mean"] for s in summaries]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
