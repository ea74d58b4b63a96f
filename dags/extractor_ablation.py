"""extractor_ablation: does the extractor matter? One corpus per extractor from the same WARC files, a model
pretrained on each, its checkpoints scored on the benchmark suite, and the ablation report.

    check_extractors, check_suite → select_warcs → simplify (mapped over WARC batches) → record_simplify
    → extract → refine → tokenize (each mapped over the extractors) → training_plan
    → pretrain → evaluate      (each mapped over the extractors × seeds)
    → extraction_quality (the same extractor specs on a labelled page set) → ablation_report

Extractors are specs (``dripper.config.extractor``): ``cpu``, ``trafilatura``, or
``NAME=LABELER,key=value,…`` such as ``v10=vllm,model=/models/MinerU-HTML,answer_format=json``; the name is
the corpus folder and the report row, so one labeler can sit in an ablation twice under two names. The
specs and the benchmark suite's data are checked first: a bad field or a benchmark whose data is not here
fails the run before any WARC is read or model trained.

The WARC selection and its simplified pages are shared (``{storage_root}/runs/{crawl}/{selection}/``, the
same folders ``corpus_build`` uses, so a corpus already built is reused); each extractor gets
``…/extractors/{name}/`` with its corpus, tokens, ``pretrain/`` and ``eval/``; the report goes to
``{selection}/ablations/{name}/report/``. Every arm trains on the same token budget (``train_tokens``; the
report shows each arm's epochs over its corpus), once per seed (``seeds``); each model is checkpointed every
``eval_every`` steps and every checkpoint is scored, on the benchmarks and by its loss on a held-out
reference text (the early signal), so the report shows both over training tokens, read against the spread
across seeds and the benchmarks' standard errors.
Pretraining (``python -m dripper.pretrain``), evaluation (``python -m dripper.eval.lm_suite``) and the report
(``python -m dripper.eval.report``) run in processes of their own; a worker without their modules fails those tasks
at once with a message naming the missing module, and the corpora before them are kept: clearing the tasks
later resumes. Pretraining and evaluation read local files: the storage root must be a filesystem the
workers mount.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from _common import (
    ABLATION_REPORT_ASSET,
    DEFAULT_ARGS,
    EXTRACT,
    REFINE,
    TOKENIZE,
    simplified_selection,
    templated,
)
from _params import extractor_ablation_params
from airflow.sdk import DAG, task

from dripper.airflow.stages import (
    AblationReportOperator,
    CheckSuiteOperator,
    EvaluateOperator,
    ExtractionBenchmarkOperator,
    ExtractOperator,
    PretrainOperator,
    RefineOperator,
    TokenizeOperator,
)
from dripper.config.evaluate import EvaluateStageConfig
from dripper.config.extract import ExtractStageConfig
from dripper.config.pretrain import PretrainStageConfig
from dripper.config.report import ReportStageConfig

#: The report config's fields, rendered from the form (the extraction-quality task reads its labelled pages).
REPORT = ReportStageConfig.form_templates()
#: Each arm's refinement: decontaminated unless the form says no, against the suite its models are scored on
#: (and that suite's fixtures) unless the form names another.
ABLATION_REFINE = REFINE | {
    "config": REFINE["config"]
    | {
        "decontaminate": "{{ params.refine_decontaminate is not false }}",
        "decont_suite": "{{ params.refine_decont_suite or params.eval_suite }}",
        "decont_fixtures": "{{ params.refine_decont_fixtures or params.eval_fixtures }}",
    }
}


def _spec(config: dict[str, Any]) -> dict[str, Any]:
    """The extractor spec of an extract config."""
    return config["extractor"]


def _root(result: dict[str, Any]) -> str:
    """The extractor's folder from an extract/refine result."""
    return result.get("root") or result["output_root"]


with DAG(
    dag_id="extractor_ablation",
    description="Corpus per extractor from the same WARCs, pretrain and evaluate each, render the report",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=extractor_ablation_params(),
    render_template_as_native_obj=True,
    tags=["dripper", "ablation"],
    doc_md=__doc__,
) as dag:

    @task(retries=0)
    def check_extractors(params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """One extract config per extractor spec (with the form's batch size and workers), validated: the
        specs' fields and labeler options, and the config's."""
        from airflow.sdk.exceptions import AirflowFailException

        from dripper.config.extractor import ExtractorSpecError, check_labeler_options, parse_extractors
        from dripper.config.settings import StageConfigError

        try:
            specs = parse_extractors(params["extractors"])
            check_labeler_options(specs)
            configs = [ExtractStageConfig.from_form(params, extractor=spec) for spec in specs]
            PretrainStageConfig.from_form(params)  # the budget and seeds, before any WARC is read
        except (ExtractorSpecError, StageConfigError) as error:
            raise AirflowFailException(str(error)) from None
        return [config.model_dump(mode="json") for config in configs]

    extractors = check_extractors()
    check_suite = CheckSuiteOperator(
        task_id="check_suite", config=EvaluateStageConfig.form_templates("suite", "fixtures", "arguments"),
        retries=0,
    )  # fmt: skip
    select, record_simplify, selection_root = simplified_selection(from_asset_event=False)
    [extractors, check_suite] >> select
    extract = ExtractOperator.partial(task_id="extract", input_root=selection_root, **EXTRACT).expand(
        config=extractors
    )
    refine = RefineOperator.partial(task_id="refine", **ABLATION_REFINE).expand(
        root=extract.output.map(_root)
    )
    tokenize = TokenizeOperator.partial(task_id="tokenize", **TOKENIZE).expand(root=refine.output.map(_root))

    @task(retries=0)
    def training_plan(
        arms: list[dict[str, Any]], params: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """One training run per arm and seed, on the same token budget; with ``equalize_corpora`` every
        arm's corpus cut to the smallest arm's tokens (:func:`dripper.runs.jobs.training_plan`)."""
        from airflow.sdk.exceptions import AirflowFailException

        from dripper.config.settings import StageConfigError
        from dripper.runs.jobs import training_plan as plan

        try:
            return plan(PretrainStageConfig.from_form(params), list(arms))
        except (StageConfigError, ValueError) as error:
            raise AirflowFailException(str(error)) from None

    pretrain = PretrainOperator.partial(
        task_id="pretrain",
        **templated("tokenizer"),
        config=PretrainStageConfig.form_templates(),
        **templated(run_on="pretrain_run_on", slurm="pretrain_slurm"),
        retries=0,
    ).expand(tokens=training_plan(tokenize.output))
    evaluate = EvaluateOperator.partial(
        task_id="evaluate",
        config=EvaluateStageConfig.form_templates(),
        **templated(run_on="eval_run_on", slurm="eval_slurm"),
        retries=0,
    ).expand(model=pretrain.output)
    ablation_dir = (
        selection_root
        + "/ablations/{{ params.report_name or (run_id | replace(':', '-') | replace('+', '-')) }}"
    )
    extraction_quality = ExtractionBenchmarkOperator(
        task_id="extraction_quality",
        **templated("aws_conn_id"),
        data=REPORT["labelled_pages"],
        limit=REPORT["labelled_limit"],
        extractor_specs=extractors.map(_spec),
        output_dir=ablation_dir + "/extraction",
        retries=0,
    )
    report = AblationReportOperator(
        task_id="ablation_report",
        extracts=extract.output,
        evaluations=evaluate.output,
        extraction=extraction_quality.output,
        output_dir=ablation_dir + "/report",
        title="Extractor ablation, {{ params.crawl_id }}",
        run_description={
            "crawl": "{{ params.crawl_id }}",
            "warc_files": "{{ ti.xcom_pull(task_ids='select_warcs', key='selection')['warc_files'] }}",
            "model": "{{ params.pretrain_model }}",
            "train_tokens": "{{ params.train_tokens }}",
            "train_steps": "{{ params.train_steps }}",
            "seeds": "{{ params.seeds }}",
            "max_epochs": "{{ params.max_epochs }}",
            "equalize_corpora": "{{ params.equalize_corpora }}",
            "eval_every": "{{ params.eval_every }}",
            "suite": "{{ params.eval_suite }}",
            "tokenizer": "{{ params.tokenizer }}",
        },
        lm_pages_per_second=REPORT["lm_pages_per_second"],
        outlets=[ABLATION_REPORT_ASSET],
        retries=0,
    )
    record_simplify >> extract
    select >> extraction_quality  # needs only the selection's folder: runs beside the corpus builds
