"""One thin operator per stage: templated paths and options in, a stage function call, a small dict out.

Data moves between tasks as files under the storage root (layout: :mod:`operators.hooks`); XCom carries
paths, counts and summaries only. Every operator is idempotent: the stage functions skip finished shards
(and datatrove tasks), and the small JSON files written here are rewritten with the same content on a
rerun. Heavy libraries (pyarrow, Dask, datatrove, labelers) are imported when a task runs, never when a
DAG file is parsed.

============================  ==============================================================================
operator                      calls
============================  ==============================================================================
FindNewCrawlsOperator         ``dripper_core.io.snapshots.list_crawls`` + the known-crawls state file
WriteCrawlManifestOperator    ``read_warc_paths``; writes the crawl's manifest, emits the manifest asset
RecordKnownCrawlsOperator     updates the known-crawls state file
SelectWarcsOperator           ``select_warc_paths`` / ``warc_urls`` / ``plan_simplify_shards``
SimplifyBatchOperator         ``simplify_shard`` for one batch of shards, via ``run_shard_tasks`` (Dask)
RecordSimplifyOperator        ``record_stage_run`` once every batch is done
ExtractOperator               ``extract_stage``
RefineOperator                ``dripper_core.refine.run_refine`` (without tokenize)
TokenizeOperator              ``MegatronTokenWriter`` per corpus file + ``write_tokens_summary``
PublishCorpusOperator         writes ``_build_summary.json``, emits the corpus asset
ModuleJobOperator             ``python -m MODULE …`` in a process of its own (long jobs: training, evaluation)
PretrainOperator              ``python -m pretrain train`` (``torchrun`` on GPUs) and ``… export``
ExtractionBenchmarkOperator   ``python -m eval.extraction``; stores the table under the storage root
EvaluateOperator              ``python -m eval.lm_suite`` on an exported model
AblationReportOperator        ``python -m eval.report`` over the runs of an ablation
============================  ==============================================================================
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from operators.hooks import RunStorageHook, extractor_key, selection_key
from operators.storage import DEFAULT_AWS_CONN_ID, input_storage_options

__all__ = [
    "AblationReportOperator",
    "EvaluateOperator",
    "ExtractOperator",
    "ExtractionBenchmarkOperator",
    "FindNewCrawlsOperator",
    "ModuleJobOperator",
    "PretrainOperator",
    "PublishCorpusOperator",
    "RecordKnownCrawlsOperator",
    "RecordSimplifyOperator",
    "RefineOperator",
    "SelectWarcsOperator",
    "SimplifyBatchOperator",
    "TokenizeOperator",
    "WriteCrawlManifestOperator",
    "stage_report_dict",
]

SELECTION_FILE = "_selection.json"
#: XCom key of the select task's summary (its return value is the list of batches).
SELECTION_XCOM_KEY = "selection"
BUILD_SUMMARY_FILE = "_build_summary.json"


@contextmanager
def spawn_without_airflow_main() -> Iterator[None]:
    """Let a stage start worker processes (Dask's LocalCluster, datatrove's local executor) from a task.

    multiprocessing's ``spawn`` re-imports the parent's ``__main__`` in every child: in a task that is the
    ``airflow`` command, whose import fails there (task processes get no metadata database). The children
    need only the stage's own modules, so ``__main__`` is kept from them while the stage runs.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__") if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.update(saved)
        if "__spec__" not in saved:
            main.__dict__.pop("__spec__", None)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def stage_report_dict(report: Any) -> dict[str, Any]:
    """The XCom form of a ``StageReport``: counts and the stage's roll-up, without per-shard lists."""
    data = report.to_dict()
    summary = data.pop("summary", {}) or {}
    data["pages_in"] = summary.get("pages_in")
    data["pages_out"] = summary.get("pages_out")
    data["dropped"] = summary.get("dropped")
    data["fallbacks"] = summary.get("fallbacks")
    data["complete"] = summary.get("complete")
    return data


class _StorageOperator(BaseOperator):
    """Base of the operators that read or write under a storage root with ``aws_conn_id``'s credentials."""

    ui_color = "#e8f1fb"

    def __init__(self, *, storage_root: str | None = None, aws_conn_id: str = DEFAULT_AWS_CONN_ID, **kwargs):
        super().__init__(**kwargs)
        self.storage_root = storage_root
        self.aws_conn_id = aws_conn_id

    def hook(self, root: str | None = None) -> RunStorageHook:
        return RunStorageHook(root or self.storage_root, self.aws_conn_id)


# -- cc_snapshot_refresh -----------------------------------------------------------------------------------


class FindNewCrawlsOperator(_StorageOperator):
    """List the crawls of ``crawl_index`` (a ``collinfo.json`` URL or path) and find those not in the
    known-crawls state under ``storage_root``.

    Returns the crawl ids to publish (what the manifest task is mapped over): at most ``max_new_crawls``
    of the new ones, newest first. Pushes ``{"listed": [...], "new": [...], "publish": [...]}`` as XCom key
    ``crawls``. The other new crawls count as known once the run succeeds: a first run starts one build,
    not one per crawl in Common Crawl's history.
    """

    template_fields: Sequence[str] = ("crawl_index", "storage_root", "aws_conn_id", "max_new_crawls")

    def __init__(self, *, crawl_index: str, max_new_crawls: int = 1, **kwargs):
        super().__init__(**kwargs)
        self.crawl_index = crawl_index
        self.max_new_crawls = max_new_crawls

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper_core.io.snapshots import list_crawls

        hook = self.hook()
        crawls = list_crawls(self.crawl_index, input_storage_options(self.crawl_index, self.aws_conn_id))
        known = (hook.read_json(hook.known_crawls_path(), {}) or {}).get("crawls", {})
        listed = [crawl.id for crawl in crawls]
        new = [crawl_id for crawl_id in listed if crawl_id not in known]
        publish = new[: max(0, int(self.max_new_crawls))]
        self.log.info(
            "%d crawls listed in %s, %d known before, %d new; publishing %s",
            len(listed),
            self.crawl_index,
            len(known),
            len(new),
            publish or "none",
        )
        context["ti"].xcom_push(key="crawls", value={"listed": listed, "new": new, "publish": publish})
        return publish


class WriteCrawlManifestOperator(_StorageOperator):
    """Write a crawl's WARC listing to ``{storage_root}/crawls/{crawl_id}/warc_manifest.json.gz`` and emit
    the manifest asset (event extra: ``crawl_id``, ``crawl_base``, ``manifest``, ``warc_files``).

    The manifest keeps the listing's relative paths and the base, so a build selects from it exactly as
    from ``snapshot:{crawl_id}@{crawl_base}``.
    """

    template_fields: Sequence[str] = ("crawl_id", "crawl_base", "storage_root", "aws_conn_id")

    def __init__(self, *, crawl_id: str, crawl_base: str = "s3", **kwargs):
        super().__init__(**kwargs)
        self.crawl_id = crawl_id
        self.crawl_base = crawl_base

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper_core.io.snapshots import read_warc_paths, resolve_base

        hook = self.hook()
        base = resolve_base(self.crawl_base)
        paths = read_warc_paths(base, self.crawl_id, input_storage_options(base, self.aws_conn_id))
        manifest_path = hook.crawl_manifest_path(self.crawl_id)
        hook.write_json(
            manifest_path,
            {
                "crawl_id": self.crawl_id,
                "crawl_base": base,
                "warc_files": len(paths),
                "paths": paths,
                "written_at": _now(),
            },
        )
        extra = {
            "crawl_id": self.crawl_id,
            "crawl_base": base,
            "manifest": manifest_path,
            "warc_files": len(paths),
        }
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = extra
        self.log.info("%s: %d WARC files listed in %s", self.crawl_id, len(paths), manifest_path)
        return extra


class RecordKnownCrawlsOperator(_StorageOperator):
    """Add ``listed`` crawls to the known-crawls state (``published`` ones with the run that published
    them), so the next refresh only looks at crawls that appear later."""

    template_fields: Sequence[str] = ("listed", "published", "storage_root", "aws_conn_id")

    def __init__(self, *, listed: Any, published: Any = (), **kwargs):
        super().__init__(**kwargs)
        self.listed = listed
        self.published = published

    def execute(self, context: Any) -> dict[str, Any]:
        hook = self.hook()
        path = hook.known_crawls_path()
        state = hook.read_json(path, {}) or {}
        crawls = dict(state.get("crawls") or {})
        now = _now()
        run_id = context["run_id"]
        added = 0
        for crawl_id in self.listed or []:
            if crawl_id not in crawls:
                crawls[crawl_id] = {"first_seen": now}
                added += 1
        for crawl_id in self.published or []:
            crawls.setdefault(crawl_id, {"first_seen": now}).update(
                published_by=run_id, manifest=hook.crawl_manifest_path(crawl_id)
            )
        hook.write_json(path, {"crawls": crawls, "updated_at": now})
        return {"state": path, "known": len(crawls), "added": added}


# -- corpus_build ------------------------------------------------------------------------------------------


def _triggering_crawl(context: Any) -> dict[str, Any] | None:
    """The newest manifest event (``crawl_id`` in its extra) that triggered this run, if any."""
    events = context.get("triggering_asset_events") or {}
    found = []
    for asset in events:
        for event in events[asset]:
            extra = dict(getattr(event, "extra", None) or {})
            if extra.get("crawl_id"):
                found.append((getattr(event, "timestamp", None) or datetime.min.replace(tzinfo=UTC), extra))
    if not found:
        return None
    found.sort(key=lambda item: item[0])
    return found[-1][1] | {"events": len(found)}


class SelectWarcsOperator(_StorageOperator):
    """Pick a crawl's WARC files deterministically and plan the simplify shards and their batches.

    The crawl is ``crawl_id`` under ``crawl_base``, or, for a run started by a manifest asset event, the
    event's crawl and base. The file list comes from the crawl's manifest under the storage root when there
    is one, else from the crawl's listing (``crawl-data/{crawl_id}/warc.paths.gz`` under the base). Writes
    ``{selection_root}/_selection.json`` (the files and the shard plan). Returns the batches, one per
    simplify task (``[{"batch": i, "first_shard": s, "shards": n, "selection_root": …}, ...]``: what the
    simplify task is mapped over), and pushes XCom key ``selection``::

        {"crawl_id", "crawl_base", "selection", "selection_root", "warc_files", "shards", "batches"}

    A selection root planned from other files is refused, never mixed.
    """

    template_fields: Sequence[str] = (
        "crawl_id",
        "crawl_base",
        "count",
        "fraction",
        "seed",
        "warcs_per_task",
        "storage_root",
        "aws_conn_id",
    )

    def __init__(
        self,
        *,
        crawl_id: str,
        crawl_base: str = "s3",
        count: Any = None,
        fraction: Any = None,
        seed: Any = 0,
        warcs_per_task: Any = 2,
        warcs_per_shard: int = 1,
        from_asset_event: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.crawl_id = crawl_id
        self.crawl_base = crawl_base
        self.count = count
        self.fraction = fraction
        self.seed = seed
        self.warcs_per_task = warcs_per_task
        self.warcs_per_shard = warcs_per_shard
        self.from_asset_event = from_asset_event

    def _crawl(self, context: Any) -> tuple[str, str]:
        crawl_id, crawl_base = str(self.crawl_id), str(self.crawl_base)
        if self.from_asset_event:
            event = _triggering_crawl(context)
            if event is not None:
                if event["events"] > 1:
                    self.log.warning(
                        "%d new-crawl events triggered this run; building the newest, %s (trigger the "
                        "others from the form)",
                        event["events"],
                        event["crawl_id"],
                    )
                crawl_id, crawl_base = event["crawl_id"], event.get("crawl_base") or crawl_base
                self.log.info("crawl %s from the asset event (manifest %s)", crawl_id, event.get("manifest"))
        return crawl_id, crawl_base

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper_core.io.snapshots import read_warc_paths, resolve_base, select_warc_paths, warc_urls
        from dripper_core.stages.simplify import plan_simplify_shards

        count = None if self.count in (None, "") else int(self.count)
        fraction = None if self.fraction in (None, "") else float(self.fraction)
        if count is not None and fraction is not None:
            raise ValueError(
                f"give the number of WARC files ({count}) or the fraction ({fraction}), not both: "
                "empty one of them in the trigger form"
            )
        warcs_per_task = int(self.warcs_per_task)
        if warcs_per_task < 1:
            raise ValueError(f"warcs_per_task must be at least 1, got {warcs_per_task}")
        hook = self.hook()
        crawl_id, crawl_base = self._crawl(context)
        base = resolve_base(crawl_base)
        # The listing as the refresh recorded it, else the crawl's own (same relative paths either way).
        manifest = hook.read_json(hook.crawl_manifest_path(crawl_id))
        if manifest is not None:
            entries = manifest["paths"]
            self.log.info(
                "%s: %d WARC files from %s", crawl_id, len(entries), hook.crawl_manifest_path(crawl_id)
            )
        else:
            entries = read_warc_paths(base, crawl_id, input_storage_options(base, self.aws_conn_id))
            self.log.info("%s: %d WARC files listed under %s", crawl_id, len(entries), base)
        chosen = select_warc_paths(entries, count=count, fraction=fraction, seed=self.seed)
        if not chosen:
            raise ValueError(
                f"{crawl_id}: the selection is empty (the crawl lists {len(entries)} WARC files)"
            )
        files = warc_urls(base, chosen)
        shards = plan_simplify_shards(files, self.warcs_per_shard)
        shards_per_task = max(1, math.ceil(warcs_per_task / self.warcs_per_shard))
        selection = selection_key(count, fraction, self.seed, self.warcs_per_shard)
        root = hook.selection_root(crawl_id, selection)
        batches = [
            {
                "batch": b,
                "first_shard": first,
                "shards": min(shards_per_task, len(shards) - first),
                "selection_root": root,
            }
            for b, first in enumerate(range(0, len(shards), shards_per_task))
        ]
        path = f"{root}/{SELECTION_FILE}"
        previous = hook.read_json(path)
        if previous is not None and previous.get("shards") != shards:
            raise ValueError(
                f"{root} was planned from other WARC files ({previous.get('crawl_base')}); its shards would "
                "mix two selections. Use the same crawl location, or another storage root"
            )
        hook.write_json(
            path,
            {
                "crawl_id": crawl_id,
                "crawl_base": base,
                "count": count,
                "fraction": fraction,
                "seed": self.seed,
                "warcs_per_shard": self.warcs_per_shard,
                "warc_files": files,
                "shards": shards,
                "planned_at": (previous or {}).get("planned_at") or _now(),
            },
        )
        self.log.info(
            "%d WARC files → %d shards in %d simplify tasks → %s", len(files), len(shards), len(batches), root
        )
        summary = {
            "crawl_id": crawl_id,
            "crawl_base": base,
            "selection": selection,
            "selection_root": root,
            "warc_files": len(files),
            "shards": len(shards),
            "batches": len(batches),
        }
        context["ti"].xcom_push(key=SELECTION_XCOM_KEY, value=summary)
        return batches


class _DaskOperator(_StorageOperator):
    """A stage on Dask: the scheduler at ``dask_scheduler``, else a LocalCluster of ``dask_workers``
    processes started by the task (``0``: in the task's process)."""

    def __init__(self, *, dask_scheduler: Any = None, dask_workers: Any = 2, force: Any = False, **kwargs):
        super().__init__(**kwargs)
        self.dask_scheduler = dask_scheduler
        self.dask_workers = dask_workers
        self.force = force

    def dask_arguments(self) -> dict[str, Any]:
        scheduler = self.dask_scheduler or None
        return {"scheduler": scheduler, "workers": None if scheduler else int(self.dask_workers)}


class SimplifyBatchOperator(_DaskOperator):
    """Simplify one batch of shards of a selection (``batch``: an item of the select task's return value;
    ``selection_root`` defaults to the batch's).

    Mapped over the batches; each task submits its shards to Dask. Finished shards are skipped.
    Returns ``{"batch", "shards", "written", "skipped", "pages_in", "pages_out", "wall_seconds"}``.
    """

    template_fields: Sequence[str] = (
        "selection_root",
        "batch",
        "dask_scheduler",
        "dask_workers",
        "force",
        "aws_conn_id",
    )

    def __init__(self, *, batch: Any, selection_root: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.batch = batch
        self.selection_root = selection_root

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper_core.io.storage import join_path
        from dripper_core.stages.runner import ShardTask, StageError, StageReport, run_shard_tasks
        from dripper_core.stages.simplify import SIMPLIFIED_STAGE, SimplifyStageOptions, simplify_shard

        started = time.perf_counter()
        root = self.selection_root or self.batch["selection_root"]
        hook = self.hook(root)
        plan = hook.read_json(f"{root}/{SELECTION_FILE}")
        if plan is None:
            raise FileNotFoundError(f"{root}/{SELECTION_FILE} is missing: run select_warcs first")
        first, count = int(self.batch["first_shard"]), int(self.batch["shards"])
        options = SimplifyStageOptions(warcs_per_shard=plan.get("warcs_per_shard", 1))
        storage_options = hook.storage_options
        inputs = input_storage_options(plan["warc_files"][0], self.aws_conn_id)
        stage_dir = join_path(root, SIMPLIFIED_STAGE)
        force = bool(self.force)
        tasks = [
            ShardTask(
                index,
                simplify_shard,
                (root, index, files, options, storage_options, inputs, force),
                stage_dir=stage_dir,
                marker_extra={"inputs": files},
                storage_options=storage_options,
            )
            for index, files in enumerate(plan["shards"][first : first + count], start=first)
        ]
        with spawn_without_airflow_main():
            results, failures = run_shard_tasks(
                SIMPLIFIED_STAGE, tasks, progress=False, force=force, **self.dask_arguments()
            )
        if failures:
            report = StageReport(SIMPLIFIED_STAGE, root, len(tasks), failed=failures)
            raise StageError(report)
        return {
            "batch": int(self.batch["batch"]),
            "shards": len(tasks),
            "written": sum(r.status == "written" for r in results),
            "skipped": sum(r.status == "skipped" for r in results),
            "pages_in": sum(r.stats.rows_in for r in results),
            "pages_out": sum(r.stats.rows_out for r in results),
            "wall_seconds": round(time.perf_counter() - started, 3),
        }


class RecordSimplifyOperator(_StorageOperator):
    """Roll the simplified shards up into the stage summary and ``{selection_root}/_run_summary.json``,
    once every batch is done (``batch_results``: the mapped simplify tasks' return values)."""

    template_fields: Sequence[str] = ("selection_root", "batch_results", "aws_conn_id")

    def __init__(self, *, selection_root: str, batch_results: Any, **kwargs):
        super().__init__(**kwargs)
        self.selection_root = selection_root
        self.batch_results = batch_results

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper_core.stages.runner import StageReport, record_stage_run
        from dripper_core.stages.simplify import SIMPLIFIED_STAGE

        hook = self.hook(self.selection_root)
        plan = hook.read_json(f"{self.selection_root}/{SELECTION_FILE}")
        batches = [dict(result) for result in (self.batch_results or [])]
        report = StageReport(
            stage=SIMPLIFIED_STAGE,
            root=self.selection_root,
            shards=len(plan["shards"]),
            written=sum(b["written"] for b in batches),
            skipped=sum(b["skipped"] for b in batches),
            wall_seconds=max((b["wall_seconds"] for b in batches), default=0.0),
        )
        record_stage_run(
            self.selection_root,
            report,
            expected_shards=len(plan["shards"]),
            storage_options=hook.storage_options,
            parameters={"airflow_tasks": len(batches), "warc_files": len(plan["warc_files"])},
        )
        if not report.summary.get("complete", True):
            raise RuntimeError(
                f"{self.selection_root}/simplified is incomplete (missing shards "
                f"{report.summary.get('shards_missing')}); rerun the failed simplify tasks"
            )
        return stage_report_dict(report)


def labeler_options_with_model(labeler_options: Any, model: Any) -> dict[str, Any]:
    """``labeler_options`` plus ``model`` when one is given."""
    options = dict(labeler_options or {})
    if model:
        options["model"] = model
    return options


class ExtractOperator(_DaskOperator):
    """Run the extract stage: ``{input_root}/simplified/`` → ``{output_root}/extracted/`` with ``labeler``.

    ``output_root`` defaults to ``{input_root}/extractors/{extractor_key}`` (one folder per extractor
    configuration). Returns the stage report (counts, fallbacks by reason) and ``output_root``.
    """

    template_fields: Sequence[str] = (
        "input_root",
        "output_root",
        "labeler",
        "labeler_model",
        "labeler_options",
        "fallback",
        "fallback_on_empty",
        "batch_size",
        "dask_scheduler",
        "dask_workers",
        "force",
        "aws_conn_id",
    )

    def __init__(
        self,
        *,
        input_root: str,
        labeler: str,
        output_root: str | None = None,
        labeler_model: Any = None,
        labeler_options: Any = None,
        fallback: Any = "trafilatura",
        fallback_on_empty: Any = False,
        batch_size: Any = 64,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.input_root = input_root
        self.output_root = output_root
        self.labeler = labeler
        self.labeler_model = labeler_model
        self.labeler_options = labeler_options
        self.fallback = fallback
        self.fallback_on_empty = fallback_on_empty
        self.batch_size = batch_size

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper_core.stages.extract import ExtractStageOptions, extract_stage

        fallback = None if self.fallback in (None, "", "none") else str(self.fallback)
        options = labeler_options_with_model(self.labeler_options, self.labeler_model)
        key = extractor_key(self.labeler, options, fallback, bool(self.fallback_on_empty))
        output_root = self.output_root or RunStorageHook.extractor_root(self.input_root, key)
        hook = self.hook(self.input_root)
        with spawn_without_airflow_main():
            report = extract_stage(
                self.input_root,
                output_root,
                labeler=self.labeler,
                labeler_options=options or None,
                options=ExtractStageOptions(
                    batch_size=int(self.batch_size),
                    fallback=fallback,
                    fallback_on_empty=bool(self.fallback_on_empty),
                ),
                storage_options=hook.storage_options,
                force=bool(self.force),
                progress=False,
                **self.dask_arguments(),
            )
        return {
            **stage_report_dict(report),
            "output_root": output_root,
            "extractor": key,
            "labeler": self.labeler,
        }


class RefineOperator(_StorageOperator):
    """Refine ``{root}/extracted/`` into ``{root}/corpus/`` with datatrove (``dripper_core.refine``).

    ``steps``, ``tasks``, ``workers`` and ``options`` (more ``RefineConfig`` fields) make the config;
    tokenization is the tokenize task's. A rerun resumes (finished datatrove tasks are skipped); a changed
    config is refused unless ``force``. Returns the refinement's counts.
    """

    template_fields: Sequence[str] = ("root", "steps", "tasks", "workers", "options", "force", "aws_conn_id")

    def __init__(
        self,
        *,
        root: str,
        steps: Any = None,
        tasks: Any = 4,
        workers: Any = -1,
        options: Any = None,
        force: Any = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.root = root
        self.steps = steps
        self.tasks = tasks
        self.workers = workers
        self.options = options
        self.force = force

    def config(self) -> dict[str, Any]:
        config = dict(self.options or {})
        if self.steps is not None:
            config["steps"] = [step for step in self.steps if step != "tokenize"]
        config["tasks"] = int(self.tasks)
        config["workers"] = int(self.workers)
        return config

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper_core.io.storage import join_path
        from dripper_core.refine import run_refine

        hook = self.hook(self.root)
        with spawn_without_airflow_main():
            summary = run_refine(
                self.root,
                self.root,
                self.config(),
                storage_options=hook.storage_options,
                force=bool(self.force),
            )
        keep = (
            "documents_in",
            "documents_out",
            "tokens_in",
            "tokens_out",
            "token_unit",
            "dropped",
            "balanced",
            "complete",
            "wall_seconds",
        )
        result = {key: summary[key] for key in keep if key in summary}
        result["steps"] = [row["step"] for row in summary.get("steps", [])[1:]]
        result["root"] = self.root
        result["corpus"] = join_path(self.root, "corpus")
        result["summary"] = join_path(self.root, "refine", "_summary.json")
        return result


class TokenizeOperator(_StorageOperator):
    """Tokenize ``{root}/corpus/`` into Megatron ``{root}/tokens/part-NNNNN.bin/.idx`` with a local
    tokenizer (``tokenizer.json`` or its folder): one token file per corpus file, row-aligned.

    Skipped (the task shows as skipped) without a tokenizer. Finished files are kept on a rerun; tokens of
    another tokenizer are refused unless ``force``. Returns the tokens summary's counts.
    """

    template_fields: Sequence[str] = ("root", "tokenizer", "eos_token", "force", "aws_conn_id")

    def __init__(
        self, *, root: str, tokenizer: Any, eos_token: Any = "<|endoftext|>", force: Any = False, **kwargs
    ):
        super().__init__(**kwargs)
        self.root = root
        self.tokenizer = tokenizer
        self.eos_token = eos_token
        self.force = force

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper_core.io.storage import join_path

        if not self.tokenizer:
            raise AirflowSkipException(
                "no tokenizer given: the corpus is not tokenized (set the tokenizer param)"
            )
        summary = tokenize_corpus(
            join_path(self.root, "corpus"),
            join_path(self.root, "tokens"),
            str(self.tokenizer),
            self.eos_token or None,
            storage_options=self.hook(self.root).storage_options,
            force=bool(self.force),
            log=self.log,
        )
        return {
            "root": self.root,
            "tokens": join_path(self.root, "tokens"),
            "documents": summary["documents"],
            "token_count": summary["tokens"],
            "tokenizer": summary["tokenizer"],
            "megatron_data_path": summary["megatron_data_path"],
        }


def tokenize_corpus(
    corpus_dir: str,
    tokens_dir: str,
    tokenizer: str,
    eos_token: str | None = "<|endoftext|>",
    *,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    log: Any = None,
) -> dict[str, Any]:
    """``corpus/part-X.parquet`` → ``tokens/part-X.bin/.idx`` (+ ``part-X.done``) and ``tokens/_summary.json``.

    The building blocks are ``dripper_core.refine.tokenize``'s (the same writer and summary the refinement's
    own tokenize step uses); this loop only makes tokenization a step of its own, resumable per file.
    """
    import json
    import posixpath

    import pyarrow.parquet as pq
    from datatrove.data import Document

    from dripper_core.io.storage import filesystem_for
    from dripper_core.refine.tokenize import MegatronTokenWriter, check_tokenizer, write_tokens_summary

    info = check_tokenizer(tokenizer, eos_token)
    corpus_fs, corpus_path = filesystem_for(corpus_dir, storage_options)
    tokens_fs, tokens_path = filesystem_for(tokens_dir, storage_options)
    tokens_path = tokens_path.rstrip("/")
    summary_path = posixpath.join(tokens_path, "_summary.json")
    if tokens_fs.exists(summary_path) or tokens_fs.exists(tokens_path):
        previous = None
        if tokens_fs.exists(summary_path):
            with tokens_fs.open(summary_path, "rb") as f:
                previous = json.loads(f.read())
        same = previous is None or (
            previous.get("tokenizer") == info["tokenizer"] and previous.get("eos_token") == info["eos_token"]
        )
        if force or not same:
            if not force:
                raise ValueError(
                    f"{tokens_dir} holds tokens of {previous.get('tokenizer')}; tokenizing with "
                    f"{info['tokenizer']} would mix two vocabularies: set force to start over"
                )
            tokens_fs.rm(tokens_path, recursive=True)
    tokens_fs.makedirs(tokens_path, exist_ok=True)
    corpus_fs.invalidate_cache(corpus_path)
    files = sorted(p for p in corpus_fs.glob(posixpath.join(corpus_path.rstrip("/"), "*.parquet")))
    output = tokens_path if storage_options is None else (tokens_path, tokens_fs)
    writer = MegatronTokenWriter(output, tokenizer, eos_token)
    for source in files:
        name = posixpath.basename(source).removesuffix(".parquet")
        done = posixpath.join(tokens_path, f"{name}.done")
        if tokens_fs.exists(done):
            continue
        started = time.perf_counter()

        def documents(source: str = source) -> Any:
            with corpus_fs.open(source, "rb") as f:
                for batch in pq.ParquetFile(f).iter_batches(
                    batch_size=1000, columns=["id", "text", "extractor"]
                ):
                    for row in batch.to_pylist():
                        yield Document(
                            text=row["text"] or "", id=row["id"], metadata={"extractor": row["extractor"]}
                        )

        output_file = writer.write_tokens(documents(), name)
        with tokens_fs.open(done, "wb") as f:
            f.write(b"")
        if log is not None:
            log.info(
                "%s: %d documents, %d tokens in %.1f s",
                name,
                len(output_file.sequence_lengths),
                len(output_file),
                time.perf_counter() - started,
            )
    return write_tokens_summary(tokens_dir, info, storage_options)


class PublishCorpusOperator(_StorageOperator):
    """Write ``{root}/_build_summary.json`` (every stage's roll-up, the run's params) and emit the corpus
    asset with where the corpus and tokens are and their counts."""

    template_fields: Sequence[str] = ("root", "selection_root", "crawl_id", "aws_conn_id")

    def __init__(self, *, root: str, selection_root: str, crawl_id: str, **kwargs):
        super().__init__(**kwargs)
        self.root = root
        self.selection_root = selection_root
        self.crawl_id = crawl_id

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper_core.io.storage import join_path

        hook = self.hook(self.root)
        simplify = hook.read_json(join_path(self.selection_root, "_run_summary.json"), {}) or {}
        extract = hook.read_json(join_path(self.root, "_run_summary.json"), {}) or {}
        refine = hook.read_json(join_path(self.root, "refine", "_summary.json"), {}) or {}
        tokens = hook.read_json(join_path(self.root, "tokens", "_summary.json"))
        summary = {
            "crawl_id": self.crawl_id,
            "run_root": self.root,
            "selection_root": self.selection_root,
            "corpus": join_path(self.root, "corpus"),
            "tokens": join_path(self.root, "tokens") if tokens else None,
            "dag_run": context["run_id"],
            "written_at": _now(),
            "parameters": {key: context["params"][key] for key in context.get("params") or {}},
            "stages": {
                **(simplify.get("stages") or {}),
                **(extract.get("stages") or {}),
            },
            "stage_runs": {**(simplify.get("stage_runs") or {}), **(extract.get("stage_runs") or {})},
            "refine": {k: v for k, v in refine.items() if k not in ("config",)},
            "tokens_summary": tokens,
        }
        path = hook.write_json(join_path(self.root, BUILD_SUMMARY_FILE), summary)
        extra = {
            "crawl_id": self.crawl_id,
            "run_root": self.root,
            "corpus": summary["corpus"],
            "tokens": summary["tokens"],
            "build_summary": path,
            "documents": refine.get("documents_out"),
            "token_count": (tokens or {}).get("tokens"),
        }
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = extra
        return extra


# -- long jobs in their own processes ----------------------------------------------------------------------


class ModuleJobOperator(BaseOperator):
    """Run ``python -m {module} {arguments…}`` in a process of its own (training, evaluation, benchmarks).

    The job's output streams into the task log; killing the task terminates the process. A module that is
    not installed fails the task at once, without retries, saying which stage is missing. The last stdout
    line that parses as a JSON object is returned as ``result`` (the project's CLIs print one).

    Args:
        module: The module to run (``pretrain``, ``eval.extraction``).
        arguments: Its command-line arguments (templated; ``None`` entries are dropped).
        requires: More modules that must be importable (``megatron.core``, ``torch``).
        stage: What the job is, for messages (``pretraining``).
        launcher: Replaces ``[python, -m]``, e.g. ``["torchrun", "--nproc-per-node", "8", "-m"]``.
        env: Extra environment variables of the process.
    """

    template_fields: Sequence[str] = ("arguments", "env")
    ui_color = "#fdf1e6"

    def __init__(
        self,
        *,
        module: str,
        arguments: Any = (),
        requires: Sequence[str] = (),
        stage: str | None = None,
        launcher: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.module = module
        self.arguments = arguments
        self.requires = tuple(requires)
        self.stage = stage or module
        self.launcher = list(launcher) if launcher else None
        self.env = env
        self._process: Any = None

    def job_environment(self) -> dict[str, str]:
        import os

        return {**os.environ, **{k: str(v) for k, v in (self.env or {}).items()}}

    def check_available(self) -> None:
        """Fail (no retry) when the module or a requirement is not importable where the job runs."""
        import subprocess

        from airflow.sdk.exceptions import AirflowFailException

        probe = (
            "import importlib.util, sys\n"
            "def found(name):\n"
            "    try:\n"
            "        return importlib.util.find_spec(name) is not None\n"
            "    except ImportError:\n"
            "        return False\n"
            "print(' '.join(name for name in sys.argv[1:] if not found(name)))"
        )
        missing = subprocess.run(
            [sys.executable, "-c", probe, self.module, *self.requires],
            capture_output=True,
            text=True,
            env=self.job_environment(),
            check=True,
        ).stdout.split()
        if missing:
            raise AirflowFailException(
                f"{self.task_id}: the {self.stage} stage cannot run: module {missing[0]!r} is not importable in "
                "this Airflow environment. Install it (or the project extra that provides it) on the workers, "
                "then clear this task; the upstream outputs are kept."
            )

    def command(self) -> list[str]:
        import sys

        launcher = self.launcher or [sys.executable, "-m"]
        return [*launcher, self.module, *(str(a) for a in (self.arguments or []) if a is not None)]

    def execute(self, context: Any) -> dict[str, Any]:
        import contextlib
        import json
        import subprocess

        from airflow.sdk.exceptions import AirflowException

        self.check_available()
        command = self.command()
        self.log.info("running: %s", " ".join(command))
        env = self.job_environment()
        started = time.perf_counter()
        result = None
        tail: list[str] = []
        self._process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, bufsize=1
        )
        for line in self._process.stdout:
            line = line.rstrip("\n")
            self.log.info("%s", line)
            tail = [*tail[-19:], line]
            if line.startswith("{") and line.endswith("}"):
                with contextlib.suppress(json.JSONDecodeError):
                    result = json.loads(line)
        returncode = self._process.wait()
        if returncode != 0:
            raise AirflowException(
                f"{self.stage}: `{' '.join(command)}` exited with {returncode}; last lines:\n"
                + "\n".join(tail)
            )
        return {
            "module": self.module,
            "result": result,
            "wall_seconds": round(time.perf_counter() - started, 3),
        }

    def on_kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()


def _local_dir(path: str, what: str) -> str:
    from airflow.sdk.exceptions import AirflowFailException

    if "://" in str(path) and not str(path).startswith("file://"):
        raise AirflowFailException(
            f"{what} {path} is not on a local or shared filesystem: Megatron and lm-eval read local files; "
            "use a storage root on a filesystem the training workers mount"
        )
    return str(path).removeprefix("file://")


class PretrainOperator(ModuleJobOperator):
    """Train a model on one corpus's tokens with ``python -m pretrain train`` (own process; ``torchrun``
    with ``nproc`` > 1), then export it to Hugging Face format (``python -m pretrain export``).

    ``tokens``: the tokenize task's output (a dict with ``tokens`` and ``root``) or a tokens folder. The run
    folder is ``{root}/pretrain/{run_name}``; training resumes from its latest checkpoint.
    Returns ``{"run_dir", "hf_dir", "train": …, "export": …}``.
    """

    template_fields: Sequence[str] = (
        "tokens",
        "tokenizer",
        "model",
        "train_steps",
        "device",
        "nproc",
        "extra_arguments",
        "run_name",
    )

    def __init__(
        self,
        *,
        tokens: Any,
        tokenizer: Any,
        model: Any = "tiny",
        train_steps: Any = 20,
        device: Any = "auto",
        nproc: Any = 1,
        extra_arguments: Any = (),
        run_name: Any = None,
        **kwargs,
    ):
        super().__init__(
            module="pretrain",
            requires=("pretrain.train", "torch", "megatron.core"),
            stage="pretraining",
            **kwargs,
        )
        self.tokens = tokens
        self.tokenizer = tokenizer
        self.model = model
        self.train_steps = train_steps
        self.device = device
        self.nproc = nproc
        self.extra_arguments = extra_arguments
        self.run_name = run_name

    def execute(self, context: Any) -> dict[str, Any]:
        import os

        tokens = self.tokens["tokens"] if isinstance(self.tokens, dict) else self.tokens
        tokens = _local_dir(tokens, "tokens folder")
        root = os.path.dirname(tokens.rstrip("/"))
        tokenizer = str(self.tokenizer)
        if os.path.isfile(tokenizer):
            tokenizer = os.path.dirname(tokenizer)  # the CLI wants the tokenizer's folder
        run_dir = os.path.join(
            root, "pretrain", str(self.run_name or f"{self.model}-{self.train_steps}steps")
        )
        if int(self.nproc) > 1:
            self.launcher = ["torchrun", "--standalone", "--nproc-per-node", str(int(self.nproc)), "-m"]
        self.arguments = [
            "train",
            "--out-dir",
            run_dir,
            "--data",
            tokens,
            "--tokenizer",
            tokenizer,
            "--model",
            self.model,
            "--train-steps",
            int(self.train_steps),
            "--device",
            self.device,
            *(self.extra_arguments or []),
        ]
        train = super().execute(context)
        self.launcher = None
        hf_dir = os.path.join(run_dir, "hf")
        self.arguments = ["export", "--checkpoint", run_dir, "--out", hf_dir]
        export = super().execute(context)
        return {
            "run_dir": run_dir,
            "hf_dir": hf_dir,
            "root": root,
            "train": train["result"],
            "export": export["result"],
        }


class ExtractionBenchmarkOperator(ModuleJobOperator):
    """Score extractors on labelled pages with ``python -m eval.extraction`` (own process) and store the
    summary, the printed table and the per-page scores under ``output_dir`` (local or ``s3://``).
    ``dripper_labelers`` adds ``dripper:<labeler>`` (the Dripper pipeline with that labeler) per name.

    Returns ``{"output_dir", "summary", "report", "rows": {extractor: overall figures}}``.
    """

    template_fields: Sequence[str] = (
        "data",
        "extractors",
        "limit",
        "group_by",
        "workers",
        "output_dir",
        "dripper_labelers",
        "aws_conn_id",
    )

    def __init__(
        self,
        *,
        data: Any,
        extractors: Any = (),
        output_dir: str,
        dripper_labelers: Any = (),
        limit: Any = None,
        group_by: Any = ("source", "page_type"),
        workers: Any = 1,
        aws_conn_id: str = DEFAULT_AWS_CONN_ID,
        **kwargs,
    ):
        super().__init__(module="eval.extraction", stage="extraction benchmark", **kwargs)
        self.data = data
        self.extractors = extractors
        self.output_dir = output_dir
        self.limit = limit
        self.group_by = group_by
        self.workers = workers
        self.dripper_labelers = dripper_labelers
        self.aws_conn_id = aws_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        import json
        import os
        import tempfile

        from dripper_core.io.storage import join_path

        data = [self.data] if isinstance(self.data, str) else list(self.data)
        extractors = [self.extractors] if isinstance(self.extractors, str) else list(self.extractors or [])
        extractors += [f"dripper:{labeler}" for labeler in self.dripper_labelers or []]
        hook = RunStorageHook(self.output_dir, self.aws_conn_id)
        with tempfile.TemporaryDirectory(prefix="extraction-benchmark-") as tmp:
            summary_file, pages_file = os.path.join(tmp, "summary.json"), os.path.join(tmp, "pages.jsonl")
            group_by = self.group_by if isinstance(self.group_by, str) else ",".join(self.group_by or [])
            self.arguments = [
                "--data",
                *data,
                "--extractor",
                *extractors,
                "--group-by",
                group_by,
                "--workers",
                int(self.workers),
                "--out",
                summary_file,
                "--pages-out",
                pages_file,
                "--no-progress",
                *(["--limit", int(self.limit)] if self.limit not in (None, "") else []),
            ]
            super().execute(context)
            from eval.extraction import format_report

            with open(summary_file, encoding="utf-8") as f:
                summary = json.load(f)
            report = format_report(summary)
            from dripper_core.io.storage import filesystem_for

            fs, base = filesystem_for(self.output_dir, hook.storage_options)
            fs.makedirs(base, exist_ok=True)
            fs.put_file(pages_file, f"{base.rstrip('/')}/pages.jsonl")
        hook.write_json(join_path(self.output_dir, "summary.json"), summary)
        report_path = join_path(self.output_dir, "report.txt")
        with fs.open(f"{base.rstrip('/')}/report.txt", "w") as f:
            f.write(report + "\n")
        rows = {row: data["all"] for row, data in summary["rows"].items()}
        extra = {"output_dir": self.output_dir, "report": report_path, "extractors": list(rows)}
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = extra
        return {**extra, "summary": join_path(self.output_dir, "summary.json"), "rows": rows}


class EvaluateOperator(ModuleJobOperator):
    """Score a trained model on the benchmark suite with ``python -m eval.lm_suite`` (own process).

    ``model``: the pretrain task's output (``hf_dir``, ``run_dir``, ``root``). Scores go to
    ``{root}/eval/{run}/scores.json``. Returns ``{"root", "run_dir", "scores", "mean", "categories"}``.
    """

    template_fields: Sequence[str] = ("model", "suite", "device", "limit", "extra_arguments")

    def __init__(
        self,
        *,
        model: Any,
        suite: Any = "paper13",
        device: Any = "cpu",
        limit: Any = None,
        extra_arguments: Any = (),
        **kwargs,
    ):
        super().__init__(
            module="eval.lm_suite", requires=("lm_eval",), stage="evaluation (lm-eval suite)", **kwargs
        )
        self.model = model
        self.suite = suite
        self.device = device
        self.limit = limit
        self.extra_arguments = extra_arguments

    def execute(self, context: Any) -> dict[str, Any]:
        import json
        import os

        run_dir = _local_dir(self.model["run_dir"], "model run")
        root = self.model["root"]
        scores = os.path.join(root, "eval", os.path.basename(run_dir.rstrip("/")), "scores.json")
        os.makedirs(os.path.dirname(scores), exist_ok=True)
        self.arguments = [
            "--model-dir",
            self.model["hf_dir"],
            "--suite",
            self.suite,
            "--out",
            scores,
            "--device",
            self.device,
            *(["--limit", self.limit] if self.limit not in (None, "") else []),
            *(self.extra_arguments or []),
        ]
        super().execute(context)
        with open(scores, encoding="utf-8") as f:
            summary = json.load(f)
        return {
            "root": root,
            "run_dir": run_dir,
            "scores": scores,
            "mean": summary.get("mean"),
            "categories": summary.get("categories"),
        }


class AblationReportOperator(ModuleJobOperator):
    """Render the ablation report with ``python -m eval.report``: one HTML file with plots and a Markdown
    table, in ``output_dir``.

    Joins, by extractor folder, the extract tasks' outputs (``labeler``, ``output_root``) with the evaluate
    tasks' (``run_dir``, ``scores``) and writes the report's manifest (``output_dir/manifest.json``):
    each extractor's refinement summary, training run and scores, and the extraction benchmark's summary
    (``extraction``: the extraction-quality task's output, optional).
    """

    template_fields: Sequence[str] = ("extracts", "evaluations", "extraction", "output_dir", "title")

    def __init__(
        self,
        *,
        extracts: Any,
        evaluations: Any,
        output_dir: str,
        extraction: Any = None,
        title: Any = "Extractor ablation",
        **kwargs,
    ):
        super().__init__(module="eval.report", requires=("matplotlib",), stage="ablation report", **kwargs)
        self.extracts = extracts
        self.evaluations = evaluations
        self.extraction = extraction
        self.output_dir = output_dir
        self.title = title

    def manifest(self) -> dict[str, Any]:
        evaluations = {str(e["root"]).rstrip("/"): e for e in (self.evaluations or [])}
        extractors, summaries = [], []
        for extract in self.extracts or []:
            root = str(extract["output_root"]).rstrip("/")
            labeler = extract["labeler"]
            summaries.append(f"{root}/refine/_summary.json")
            entry = {
                "name": labeler,
                "refine_extractor": f"dripper:{labeler}",
                "extraction_row": f"dripper:{labeler}/md",
            }
            if root in evaluations:
                entry.update(train_run=evaluations[root]["run_dir"], scores=evaluations[root]["scores"])
            extractors.append(entry)
        manifest = {"title": self.title, "refine_summaries": summaries, "extractors": extractors}
        if self.extraction:
            extraction_dir = _local_dir(self.extraction["output_dir"], "extraction benchmark")
            manifest["extraction"] = f"{extraction_dir}/summary.json"
        return manifest

    def execute(self, context: Any) -> dict[str, Any]:
        import json
        import os

        output_dir = _local_dir(self.output_dir, "report folder")
        os.makedirs(output_dir, exist_ok=True)
        manifest_path = os.path.join(output_dir, "manifest.json")
        with open(manifest_path, "w", encoding="utf-8") as f:
            json.dump(self.manifest(), f, indent=1)
        html, markdown = os.path.join(output_dir, "report.html"), os.path.join(output_dir, "report.md")
        self.arguments = ["--manifest", manifest_path, "--html", html, "--markdown", markdown]
        super().execute(context)
        extra = {"html": html, "markdown": markdown, "manifest": manifest_path}
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = extra
        return extra
