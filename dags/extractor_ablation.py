"""extractor_ablation: does the extractor matter? One corpus per extractor from the same WARC files, a model
pretrained on each, the models scored on the benchmark suite, and the ablation report.

    select_warcs → simplify (mapped over WARC batches) → record_simplify
    → extract → refine → tokenize → pretrain → evaluate      (each mapped over the extractors)
    → extraction_quality (the labelers on a labelled page set) → ablation_report

The WARC selection and its simplified pages are shared (``{storage_root}/runs/{crawl}/{selection}/``, the
same folders ``corpus_build`` uses, so a corpus already built is reused); each extractor gets
``…/extractors/{extractor}/`` with its corpus, tokens, ``pretrain/`` and ``eval/``; the report goes to
``{selection}/ablations/{name}/report/``. Pretraining (``python -m pretrain``), evaluation
(``python -m eval.lm_suite``) and the report (``python -m eval.report``) run in processes of their own; a
worker without their modules (torch, Megatron-core, lm-eval, matplotlib) fails those tasks at once with a
message naming the missing module, and the corpora before them are kept: clearing the tasks later resumes.
Pretraining and evaluation read local files: the storage root must be a filesystem the workers mount.
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

from operators.stages import (
    AblationReportOperator,
    EvaluateOperator,
    ExtractionBenchmarkOperator,
    ExtractOperator,
    PretrainOperator,
    RefineOperator,
    TokenizeOperator,
)


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

    @task
    def extractor_configs(params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """One extract task per extractor: its labeler and options."""
        options = params["extractor_options"] or {}
        unknown = sorted(set(options) - set(params["extractors"]))
        if unknown:
            raise ValueError(
                f"extractor_options names {unknown}, which are not in extractors {params['extractors']}"
            )
        return [
            {"labeler": name, "labeler_options": options.get(name) or {}} for name in params["extractors"]
        ]

    select, record_simplify, selection_root = simplified_selection(from_asset_event=False)
    extract = ExtractOperator.partial(task_id="extract", input_root=selection_root, **EXTRACT).expand_kwargs(
        extractor_configs()
    )
    refine = RefineOperator.partial(task_id="refine", **REFINE).expand(root=extract.output.map(_root))
    tokenize = TokenizeOperator.partial(task_id="tokenize", **TOKENIZE).expand(root=refine.output.map(_root))
    pretrain = PretrainOperator.partial(
        task_id="pretrain",
        **templated(
            "tokenizer",
            "train_steps",
            model="pretrain_model",
            device="pretrain_device",
            nproc="pretrain_nproc",
            extra_arguments="pretrain_arguments",
        ),
        retries=0,
    ).expand(tokens=tokenize.output)
    evaluate = EvaluateOperator.partial(
        task_id="evaluate",
        **templated(
            suite="eval_suite", device="eval_device", limit="eval_limit", extra_arguments="eval_arguments"
        ),
        retries=0,
    ).expand(model=pretrain.output)
    ablation_dir = (
        selection_root
        + "/ablations/{{ params.ablation_name or (run_id | replace(':', '-') | replace('+', '-')) }}"
    )
    extraction_quality = ExtractionBenchmarkOperator(
        task_id="extraction_quality",
        **templated("aws_conn_id", data="benchmark_data", dripper_labelers="extractors"),
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
        outlets=[ABLATION_REPORT_ASSET],
        retries=0,
    )
    record_simplify >> extract
    select >> extraction_quality  # needs only the selection's folder: runs beside the corpus builds
