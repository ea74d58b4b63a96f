"""The corpus build's page stages after the selection: simplify (mapped over WARC batches) → extract →
refine → tokenize → publish. Each operator calls a stage function and returns a small dict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowSkipException

from dripper.airflow.base import (
    BUILD_SUMMARY_FILE,
    DaskStageOperator,
    StorageOperator,
    spawn_without_airflow_main,
    stage_report_dict,
    utc_now,
)
from dripper.airflow.hooks import RunStorageHook
from dripper.airflow.storage import input_storage_options
from dripper.config.extract import ExtractStageConfig
from dripper.config.refine import RefineStageConfig
from dripper.config.simplify import SimplifyStageConfig
from dripper.config.tokenize import TokenizeStageConfig


class SimplifyBatchOperator(DaskStageOperator):
    """Simplify one batch of shards of a selection (``batch``: an item of the select task's return value;
    ``selection_root`` defaults to the batch's; ``config``: the simplify stage's, of which it reads
    ``max_payload_bytes``, ``max_page_bytes``, ``keep_truncated`` and ``workers``).

    Mapped over the batches; each task submits its shards to Dask. Finished shards are skipped.
    Returns ``{"batch", "shards", "written", "skipped", "pages_in", "pages_out", "wall_seconds"}``.
    With ``extract_config`` (the extract stage's config of the one extractor that follows), the task is
    skipped where that extractor reads the WARC files in one pass
    (:func:`dripper.stages.one_pass.chooses_one_pass`): there is no ``simplified/`` to write.
    """

    template_fields: Sequence[str] = (
        "selection_root", "batch", "config", "extract_config", "dask_scheduler", "force", "aws_conn_id",
    )  # fmt: skip
    config_class = SimplifyStageConfig

    def __init__(
        self, *, batch: Any, selection_root: str | None = None, extract_config: Any = None, **kwargs
    ):
        super().__init__(**kwargs)
        self.batch = batch
        self.selection_root = selection_root
        self.extract_config = self.config_values(extract_config)

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper.runs.corpus import selection_plan, simplify_batch

        config = self.stage_config()
        root = self.selection_root or self.batch["selection_root"]
        hook = self.hook(root)
        if self.extract_config is not None and one_pass(self.extract_config, root, hook.storage_options):
            raise AirflowSkipException(
                "the extractor reads the WARC files in one pass (extract_one_pass): nothing to simplify"
            )
        plan = selection_plan(root, hook.storage_options)
        with spawn_without_airflow_main():
            return simplify_batch(
                root, plan, self.batch, config, storage_options=hook.storage_options,
                input_storage_options=input_storage_options(plan["warc_files"][0], self.aws_conn_id),
                force=bool(self.force), scheduler=self.dask_scheduler or None,
            )  # fmt: skip


def _parse_config(config_class: Any, values: Any) -> Any:
    """A stage config from a task's rendered values (``None``: an empty form field, the default), with the
    CLI's message for a bad one (no retry fixes it)."""
    from airflow.sdk.exceptions import AirflowFailException

    from dripper.config.settings import StageConfigError

    given = {name: value for name, value in dict(values or {}).items() if value is not None}
    try:
        return config_class.parse(given)
    except StageConfigError as error:
        raise AirflowFailException(str(error)) from None


def one_pass(extract_values: Any, root: str, storage_options: dict[str, Any] | None) -> bool:
    """Whether the extractor of the extract config ``extract_values`` (rendered) reads the selection's WARC
    files under ``root`` in one pass (:func:`dripper.stages.one_pass.chooses_one_pass`)."""
    from dripper.stages.one_pass import chooses_one_pass

    return chooses_one_pass(_parse_config(ExtractStageConfig, extract_values), root, storage_options)


def _selection_plan(root: str, storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """``{root}/_selection.json`` where the root is a selection's folder, else ``None``."""
    from dripper.runs.corpus import selection_plan

    try:
        return selection_plan(root, storage_options)
    except FileNotFoundError:
        return None


class RecordSimplifyOperator(StorageOperator):
    """Roll the simplified shards up into the stage summary and ``{selection_root}/_run_summary.json``,
    once every batch is done (``batch_results``: the mapped simplify tasks' return values)."""

    template_fields: Sequence[str] = ("selection_root", "batch_results", "aws_conn_id")

    def __init__(self, *, selection_root: str, batch_results: Any, **kwargs):
        super().__init__(**kwargs)
        self.selection_root = selection_root
        self.batch_results = batch_results

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper.runs.corpus import record_simplify_batches

        root = self.selection_root
        return record_simplify_batches(root, self.batch_results or [], self.hook(root).storage_options)


class ExtractOperator(DaskStageOperator):
    """Run the extract stage: ``{input_root}/simplified/`` → ``{output_root}/extracted/`` with one extractor,
    or, with ``simplify_config`` where the extractor reads WARC files in one pass
    (:func:`dripper.stages.one_pass.chooses_one_pass`), the selection's WARC files (``_selection.json``
    under ``input_root``) → ``{output_root}/extracted/`` with no ``simplified/`` between.

    ``config``: the extract stage's (:class:`~dripper.config.extract.ExtractStageConfig`: ``extractor``, a
    spec as a dict or its shorthand ``NAME=LABELER,key=value``; ``batch_size``; ``workers``; ``one_pass``),
    validated in the task; ``simplify_config``: the simplify stage's, whose page limits the one pass reads
    with. The extractor's folder, unless ``output_root`` is given, is ``{input_root}/extractors/{name}``;
    the spec is recorded there and a folder holding another spec is refused (unless ``force``). Returns the
    stage report (counts, fallbacks by reason), ``output_root``, the extractor's name, labeler and spec, and
    ``one_pass``.
    """

    template_fields: Sequence[str] = (
        "input_root", "output_root", "config", "simplify_config", "dask_scheduler", "force", "aws_conn_id",
    )  # fmt: skip
    config_class = ExtractStageConfig

    def __init__(
        self, *, input_root: str, output_root: str | None = None, simplify_config: Any = None, **kwargs
    ):
        super().__init__(**kwargs)
        self.input_root = input_root
        self.output_root = output_root
        self.simplify_config = self.config_values(simplify_config)

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from dripper.stages.extractor import run_extractor, run_extractor_one_pass
        from dripper.stages.one_pass import chooses_one_pass

        config = self.stage_config()  # the spec is parsed here, once
        spec = config.extractor
        output_root = self.output_root or RunStorageHook.extractor_root(self.input_root, spec.name)
        hook = self.hook(self.input_root)
        plan = _selection_plan(self.input_root, hook.storage_options)
        inputs = input_storage_options(plan["warc_files"][0], self.aws_conn_id) if plan else None
        single = (
            self.simplify_config is not None
            and plan is not None
            and chooses_one_pass(config, self.input_root, hook.storage_options)
        )
        self.log.info("extractor %s → %s%s", spec.describe(), output_root, " in one pass" if single else "")
        run = {
            "storage_options": hook.storage_options, "input_storage_options": inputs, "force": bool(self.force),
            "progress": False, "scheduler": self.dask_scheduler or None,
        }  # fmt: skip
        with spawn_without_airflow_main():
            try:
                if single:
                    reading = _parse_config(SimplifyStageConfig, self.simplify_config)
                    shards = list(enumerate(plan["shards"]))
                    report = run_extractor_one_pass(
                        self.input_root, shards, config, reading, output_root, **run
                    )
                else:
                    # its workers are ignored with a scheduler
                    report = run_extractor(self.input_root, config, output_root, **run)
            # A bad labeler option, or another spec in this folder: no retry fixes it.
            except ValueError as error:
                raise AirflowFailException(str(error)) from None
        return {
            **stage_report_dict(report),
            "output_root": output_root,
            "extractor": spec.name,
            "labeler": spec.labeler,
            "spec": spec.to_dict(),
            "one_pass": single,
        }


class RefineOperator(StorageOperator):
    """Refine ``{root}/extracted/`` into ``{root}/corpus/`` with datatrove (``dripper.refine``).

    ``config``: the refine stage's (:class:`~dripper.config.refine.RefineStageConfig`: ``steps``, ``tasks``,
    ``workers``, ``options``: more ``RefineConfig`` fields); tokenization is the tokenize task's. A rerun
    resumes (finished datatrove tasks are skipped); a changed config is refused unless ``force``. Returns the
    refinement's counts. ``run_on="slurm"`` submits the passes to Slurm through datatrove's
    ``SlurmPipelineExecutor`` and waits in the triggerer (:func:`dripper.airflow.slurm.submit_refine`;
    ``slurm``: the executor's options).
    """

    template_fields: Sequence[str] = ("root", "config", "force", "aws_conn_id", "run_on", "slurm")
    config_class = RefineStageConfig

    def __init__(
        self,
        *,
        root: str,
        config: Any = None,
        force: Any = False,
        run_on: Any = "local",
        slurm: Any = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.root = root
        self.config = self.config_values(config)
        self.force = force
        self.run_on = run_on
        self.slurm = slurm

    def refine_config(self) -> dict[str, Any]:
        """The ``RefineConfig`` dict of the stage config (validated: the CLI's messages)."""
        from dripper.runs.corpus import refine_config

        stage = self.stage_config()
        return refine_config(stage.steps, stage.tasks, stage.workers, stage.refine_options())

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from dripper.refine import run_refine

        if self.run_on == "slurm":
            from dripper.airflow.slurm import submit_refine

            return submit_refine(self, context)  # defers to execute_slurm_complete
        if self.run_on != "local":
            raise AirflowFailException(f"{self.task_id}: run_on={self.run_on!r}: use 'local' or 'slurm'")
        hook = self.hook(self.root)
        with spawn_without_airflow_main():
            summary = run_refine(
                self.root,
                self.root,
                self.refine_config(),
                storage_options=hook.storage_options,
                force=bool(self.force),
            )
        return self.refine_result(summary)

    def execute_slurm_complete(self, context: Any, event: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Resumed when the Slurm jobs ended (``run_on="slurm"``)."""
        from dripper.airflow.slurm import refine_jobs_complete

        return refine_jobs_complete(self, event, **kwargs)

    def on_kill(self) -> None:
        from dripper.airflow.slurm import on_kill_cancel

        on_kill_cancel(self)  # the Slurm jobs submitted, if any
        super().on_kill()

    def refine_result(self, summary: dict[str, Any]) -> dict[str, Any]:
        """The XCom form of a refinement summary (:func:`dripper.runs.corpus.refine_result`)."""
        from dripper.runs.corpus import refine_result

        return refine_result(self.root, summary)


class SlurmRefineOperator(RefineOperator):
    """:class:`RefineOperator` with ``run_on="slurm"``: the passes go to Slurm through datatrove's
    ``SlurmPipelineExecutor`` (:func:`dripper.airflow.slurm.submit_refine`), the task waits in the
    triggerer, and when the last job ended every task's completion marker is checked and the summary
    written. A failed job fails the task with its log tail and cancels the jobs still queued behind it;
    clearing the task resubmits only the datatrove tasks that did not finish."""

    def __init__(self, *, slurm: Any, **kwargs: Any) -> None:
        super().__init__(run_on="slurm", slurm=slurm, **kwargs)


class TokenizeOperator(StorageOperator):
    """Tokenize ``{root}/corpus/`` into Megatron ``{root}/tokens/part-NNNNN.bin/.idx`` with a local
    tokenizer (``config``: the tokenize stage's, :class:`~dripper.config.tokenize.TokenizeStageConfig`): one
    token file per corpus file, row-aligned.

    Skipped (the task shows as skipped) without a tokenizer. Finished files are kept on a rerun; tokens of
    another tokenizer are refused unless ``force``. Returns the tokens summary's counts.
    """

    template_fields: Sequence[str] = ("root", "config", "force", "aws_conn_id")
    config_class = TokenizeStageConfig

    def __init__(self, *, root: str, config: Any = None, force: Any = False, **kwargs):
        super().__init__(**kwargs)
        self.root = root
        self.config = self.config_values(config)
        self.force = force

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper.runs.corpus import tokenize_extractor

        config = self.stage_config()
        if not config.tokenizer:
            raise AirflowSkipException(
                "no tokenizer given: the corpus is not tokenized (set the tokenizer param)"
            )
        with spawn_without_airflow_main():
            return tokenize_extractor(self.root, str(config.tokenizer), config.eos_token or None,
                                      storage_options=self.hook(self.root).storage_options,
                                      force=bool(self.force), log=self.log)  # fmt: skip


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
        from dripper.io.storage import join_path
        from dripper.runs.corpus import build_summary

        hook = self.hook(self.root)
        summary = build_summary(
            self.root, self.selection_root, hook.storage_options, crawl_id=self.crawl_id,
            dag_run=context["run_id"], written_at=utc_now(),
            parameters={key: context["params"][key] for key in context.get("params") or {}},
        )  # fmt: skip
        path = hook.write_json(join_path(self.root, BUILD_SUMMARY_FILE), summary)
        extra = {
            "crawl_id": self.crawl_id,
            "run_root": self.root,
            "corpus": summary["corpus"],
            "tokens": summary["tokens"],
            "build_summary": path,
            "documents": summary["refine"].get("documents_out"),
            "token_count": (summary["tokens_summary"] or {}).get("tokens"),
        }
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = extra
        return extra
