"""The corpus build's page stages after the selection: simplify (mapped over WARC batches) → extract →
refine → tokenize → publish. Each operator calls a stage function and returns a small dict."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowSkipException

from dripper_core.config.extract import ExtractStageConfig
from dripper_core.config.refine import RefineStageConfig
from dripper_core.config.simplify import SimplifyStageConfig
from dripper_core.config.tokenize import TokenizeStageConfig
from operators.base import (
    BUILD_SUMMARY_FILE,
    SELECTION_FILE,
    DaskStageOperator,
    StorageOperator,
    spawn_without_airflow_main,
    stage_report_dict,
    utc_now,
)
from operators.hooks import RunStorageHook
from operators.storage import input_storage_options

# The stage configs' defaults (one default per field: dripper_core.config).
_SIMPLIFY, _EXTRACT = SimplifyStageConfig(), ExtractStageConfig()
_REFINE, _TOKENIZE = RefineStageConfig(), TokenizeStageConfig()


class SimplifyBatchOperator(DaskStageOperator):
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
        "max_payload_bytes",
        "max_page_bytes",
        "force",
        "aws_conn_id",
    )

    def __init__(
        self,
        *,
        batch: Any,
        selection_root: str | None = None,
        max_payload_bytes: Any = _SIMPLIFY.max_payload_bytes,
        max_page_bytes: Any = _SIMPLIFY.max_page_bytes,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.batch = batch
        self.selection_root = selection_root
        self.max_payload_bytes = max_payload_bytes
        self.max_page_bytes = max_page_bytes

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper_core.stages.runner import StageError, StageReport
        from dripper_core.stages.simplify import SIMPLIFIED_STAGE, SimplifyStageOptions, simplify_shards

        started = time.perf_counter()
        root = self.selection_root or self.batch["selection_root"]
        hook = self.hook(root)
        plan = hook.read_json(f"{root}/{SELECTION_FILE}")
        if plan is None:
            raise FileNotFoundError(f"{root}/{SELECTION_FILE} is missing: run select_warcs first")
        first, count = int(self.batch["first_shard"]), int(self.batch["shards"])
        options = SimplifyStageOptions(
            warcs_per_shard=plan.get("warcs_per_shard", 1),
            max_payload_bytes=int(self.max_payload_bytes),
            max_page_bytes=int(self.max_page_bytes),
        )
        shards = list(enumerate(plan["shards"][first : first + count], start=first))
        inputs = input_storage_options(plan["warc_files"][0], self.aws_conn_id)
        with spawn_without_airflow_main():
            results, failures = simplify_shards(
                root, shards, options, hook.storage_options, inputs, force=bool(self.force), progress=False,
                **self.dask_arguments(),
            )  # fmt: skip
        if failures:
            report = StageReport(SIMPLIFIED_STAGE, root, len(shards), failed=failures)
            raise StageError(report)
        return {
            "batch": int(self.batch["batch"]),
            "shards": len(shards),
            "written": sum(r.status == "written" for r in results),
            "skipped": sum(r.status == "skipped" for r in results),
            "pages_in": sum(r.stats.rows_in for r in results),
            "pages_out": sum(r.stats.rows_out for r in results),
            "wall_seconds": round(time.perf_counter() - started, 3),
        }


class RecordSimplifyOperator(StorageOperator):
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


class ExtractOperator(DaskStageOperator):
    """Run the extract stage: ``{input_root}/simplified/`` → ``{output_root}/extracted/`` with one extractor.

    The extractor is ``extractor`` (a spec: ``dripper_core.config.extractor``, as a dict or its shorthand
    ``NAME=LABELER,key=value``), or else built from ``labeler``, ``labeler_model``, ``labeler_options``,
    ``fallback`` and ``fallback_on_empty`` with a name derived from them (``labeler_spec``, as ``dripper run extract`` names it). Its folder,
    unless ``output_root`` is given, is ``{input_root}/extractors/{name}``; the spec is recorded there and
    a folder holding another spec is refused (unless ``force``). Returns the stage report (counts,
    fallbacks by reason), ``output_root``, the extractor's name, labeler and spec.
    """

    template_fields: Sequence[str] = (
        "input_root",
        "output_root",
        "extractor",
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
        extractor: Any = None,
        labeler: Any = None,
        output_root: str | None = None,
        labeler_model: Any = None,
        labeler_options: Any = None,
        fallback: Any = _EXTRACT.fallback,
        fallback_on_empty: Any = _EXTRACT.fallback_on_empty,
        batch_size: Any = _EXTRACT.batch_size,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if extractor is None and labeler is None:
            raise ValueError("ExtractOperator needs an extractor spec or a labeler")
        self.input_root = input_root
        self.output_root = output_root
        self.extractor = extractor
        self.labeler = labeler
        self.labeler_model = labeler_model
        self.labeler_options = labeler_options
        self.fallback = fallback
        self.fallback_on_empty = fallback_on_empty
        self.batch_size = batch_size

    def spec(self) -> Any:
        """The extractor spec this task runs (validated; errors name the extractor and the field)."""
        from dripper_core.config.extractor import check_labeler_options, labeler_spec, parse_extractor

        if self.extractor:
            spec = parse_extractor(self.extractor)
        else:
            options = labeler_options_with_model(self.labeler_options, self.labeler_model)
            spec = labeler_spec(str(self.labeler), options, self.fallback, bool(self.fallback_on_empty))
        check_labeler_options([spec])
        return spec

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from dripper_core.config.extractor import ExtractorSpecError
        from dripper_core.stages.extract import extract_with_spec

        try:
            spec = self.spec()
        except ExtractorSpecError as error:
            raise AirflowFailException(str(error)) from None  # a retry cannot fix a bad spec
        output_root = self.output_root or RunStorageHook.extractor_root(self.input_root, spec.name)
        hook = self.hook(self.input_root)
        self.log.info("extractor %s → %s", spec.describe(), output_root)
        with spawn_without_airflow_main():
            try:
                report = extract_with_spec(
                    self.input_root,
                    spec,
                    output_root,
                    batch_size=int(self.batch_size),
                    storage_options=hook.storage_options,
                    force=bool(self.force),
                    progress=False,
                    **self.dask_arguments(),
                )
            except ValueError as error:  # another spec in this folder: a retry cannot fix it
                raise AirflowFailException(str(error)) from None
        return {
            **stage_report_dict(report),
            "output_root": output_root,
            "extractor": spec.name,
            "labeler": spec.labeler,
            "spec": spec.to_dict(),
        }


class RefineOperator(StorageOperator):
    """Refine ``{root}/extracted/`` into ``{root}/corpus/`` with datatrove (``dripper_core.refine``).

    ``steps``, ``tasks``, ``workers`` and ``options`` (more ``RefineConfig`` fields) make the config;
    tokenization is the tokenize task's. A rerun resumes (finished datatrove tasks are skipped); a changed
    config is refused unless ``force``. Returns the refinement's counts. ``run_on="slurm"`` submits the
    passes to Slurm through datatrove's ``SlurmPipelineExecutor`` and waits in the triggerer
    (:func:`operators.slurm.submit_refine`; ``slurm``: the executor's options).
    """

    template_fields: Sequence[str] = (
        "root", "steps", "tasks", "workers", "options", "force", "aws_conn_id", "run_on", "slurm",
    )  # fmt: skip

    def __init__(
        self,
        *,
        root: str,
        steps: Any = tuple(_REFINE.steps),
        tasks: Any = _REFINE.tasks,
        workers: Any = _REFINE.workers,
        options: Any = None,  # more RefineConfig fields
        force: Any = False,
        run_on: Any = "local",
        slurm: Any = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.root = root
        self.steps = steps
        self.tasks = tasks
        self.workers = workers
        self.options = options
        self.force = force
        self.run_on = run_on
        self.slurm = slurm

    def config(self) -> dict[str, Any]:
        config = dict(self.options or {})
        if self.steps is not None:
            config["steps"] = [step for step in self.steps if step != "tokenize"]
        config["tasks"] = int(self.tasks)
        config["workers"] = int(self.workers)
        return config

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from dripper_core.refine import run_refine

        if self.run_on == "slurm":
            from operators.slurm import submit_refine

            return submit_refine(self, context)  # defers to execute_slurm_complete
        if self.run_on != "local":
            raise AirflowFailException(f"{self.task_id}: run_on={self.run_on!r}: use 'local' or 'slurm'")
        hook = self.hook(self.root)
        with spawn_without_airflow_main():
            summary = run_refine(
                self.root,
                self.root,
                self.config(),
                storage_options=hook.storage_options,
                force=bool(self.force),
            )
        return self.refine_result(summary)

    def execute_slurm_complete(self, context: Any, event: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Resumed when the Slurm jobs ended (``run_on="slurm"``)."""
        from operators.slurm import refine_jobs_complete

        return refine_jobs_complete(self, event, **kwargs)

    def on_kill(self) -> None:
        from operators.slurm import on_kill_cancel

        on_kill_cancel(self)  # the Slurm jobs submitted, if any
        super().on_kill()

    def refine_result(self, summary: dict[str, Any]) -> dict[str, Any]:
        """The XCom form of a refinement summary: its counts, the steps run and where the corpus is."""
        from dripper_core.io.storage import join_path

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


class TokenizeOperator(StorageOperator):
    """Tokenize ``{root}/corpus/`` into Megatron ``{root}/tokens/part-NNNNN.bin/.idx`` with a local
    tokenizer (``tokenizer.json`` or its folder): one token file per corpus file, row-aligned.

    Skipped (the task shows as skipped) without a tokenizer. Finished files are kept on a rerun; tokens of
    another tokenizer are refused unless ``force``. Returns the tokens summary's counts.
    """

    template_fields: Sequence[str] = ("root", "tokenizer", "eos_token", "force", "aws_conn_id")

    def __init__(
        self,
        *,
        root: str,
        tokenizer: Any,
        eos_token: Any = _TOKENIZE.eos_token,
        force: Any = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.root = root
        self.tokenizer = tokenizer
        self.eos_token = eos_token
        self.force = force

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper_core.io.storage import join_path
        from dripper_core.refine.tokenize import tokenize_corpus

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


class PublishCorpusOperator(StorageOperator):
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
            "written_at": utc_now(),
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
