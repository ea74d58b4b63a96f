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
    compute_params,
    default_benchmark_data,
    env,
    fallback_params,
    refinement_params,
    selection_params,
    selection_xcom,
    storage_params,
)
from airflow.sdk import DAG, Param, task

from operators.stages import (
    AblationReportOperator,
    EvaluateOperator,
    ExtractionBenchmarkOperator,
    ExtractOperator,
    PretrainOperator,
    RecordSimplifyOperator,
    RefineOperator,
    SelectWarcsOperator,
    SimplifyBatchOperator,
    TokenizeOperator,
)

COMMON = {"storage_root": "{{ params.storage_root }}", "aws_conn_id": "{{ params.aws_conn_id }}"}
DASK = {
    "dask_scheduler": "{{ params.dask_scheduler }}",
    "dask_workers": "{{ params.dask_workers }}",
    "force": "{{ params.force }}",
}


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
    params={
        **selection_params(),
        "extractors": Param(
            list(dict.fromkeys([env("DRIPPER_LABELER", "trafilatura"), "trafilatura"])),
            type="array",
            items={"type": "string", "pattern": r"^[A-Za-z0-9_.]+(:[A-Za-z0-9_.]+)?$"},
            minItems=1,
            uniqueItems=True,
            title="Extractors",
            description="Labelers to compare (cpu, trafilatura, vllm, openai, torch, module:factory).",
            section="Extraction",
        ),
        "extractor_options": Param(
            {},
            type="object",
            title="Labeler options",
            description='Per labeler, its options: {"vllm": {"model": "/models/MinerU-HTML"}}.',
            section="Extraction",
        ),
        **fallback_params(),
        **refinement_params(tokenizer_required=True),
        "pretrain_model": Param(
            "tiny",
            type="string",
            enum=["tiny", "llama-1b"],
            title="Model",
            description="Model preset (pretrain.config): tiny for a smoke run, llama-1b as in the paper.",
            section="Pretraining and evaluation",
        ),
        "train_steps": Param(
            20, type="integer", minimum=1, title="Training steps", section="Pretraining and evaluation"
        ),
        "pretrain_device": Param(
            "auto",
            type="string",
            enum=["auto", "cpu", "cuda"],
            title="Device",
            section="Pretraining and evaluation",
        ),
        "pretrain_nproc": Param(
            1,
            type="integer",
            minimum=1,
            title="Processes per node",
            description="torchrun processes (GPUs) per model; 1 runs a single process.",
            section="Pretraining and evaluation",
        ),
        "pretrain_arguments": Param(
            [],
            type="array",
            items={"type": "string"},
            title="More training options",
            description='Passed to `python -m pretrain train`, e.g. ["--global-batch-size", "512"].',
            section="Pretraining and evaluation",
        ),
        "eval_suite": Param(
            "paper13",
            type="string",
            minLength=1,
            title="Benchmark suite",
            description="Suite file or name in eval/suites (paper13: the 13 benchmarks; local: offline).",
            section="Pretraining and evaluation",
        ),
        "eval_device": Param(
            "cpu", type="string", minLength=1, title="Evaluation device", section="Pretraining and evaluation"
        ),
        "eval_limit": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            title="Documents per benchmark",
            description="Score at most this many documents per task (empty: all).",
            section="Pretraining and evaluation",
        ),
        "eval_arguments": Param(
            [],
            type="array",
            items={"type": "string"},
            title="More evaluation options",
            description='Passed to `python -m eval.lm_suite`, e.g. ["--fixtures", "path/manifest.yaml"].',
            section="Pretraining and evaluation",
        ),
        "benchmark_data": Param(
            [default_benchmark_data()],
            type="array",
            items={"type": "string", "minLength": 1},
            title="Labelled pages",
            description="Pages with ground truth for the extraction-quality section of the report.",
            section="Pretraining and evaluation",
        ),
        "ablation_name": Param(
            None,
            type=["null", "string"],
            pattern=r"^[A-Za-z0-9._-]+$",
            title="Ablation name",
            description="Folder of this ablation's report under the selection (default: the run id).",
            section="Pretraining and evaluation",
        ),
        **storage_params(),
        **compute_params(),
    },
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

    select = SelectWarcsOperator(
        task_id="select_warcs",
        crawl_id="{{ params.crawl_id }}",
        crawl_base="{{ params.crawl_base }}",
        count="{{ params.warc_count }}",
        fraction="{{ params.warc_fraction }}",
        seed="{{ params.seed }}",
        warcs_per_task="{{ params.warcs_per_task }}",
        from_asset_event=False,
        **COMMON,
    )
    selection_root = selection_xcom("selection_root")
    simplify = SimplifyBatchOperator.partial(task_id="simplify", **COMMON, **DASK).expand(batch=select.output)
    record_simplify = RecordSimplifyOperator(
        task_id="record_simplify", selection_root=selection_root, batch_results=simplify.output, **COMMON
    )
    extract = ExtractOperator.partial(
        task_id="extract",
        input_root=selection_root,
        fallback="{{ params.fallback }}",
        fallback_on_empty="{{ params.fallback_on_empty }}",
        batch_size="{{ params.extract_batch_size }}",
        **COMMON,
        **DASK,
    ).expand_kwargs(extractor_configs())
    refine = RefineOperator.partial(
        task_id="refine",
        steps="{{ params.refine_steps }}",
        tasks="{{ params.refine_tasks }}",
        workers="{{ params.refine_workers }}",
        options="{{ params.refine_options }}",
        force="{{ params.force }}",
        **COMMON,
    ).expand(root=extract.output.map(_root))
    tokenize = TokenizeOperator.partial(
        task_id="tokenize", tokenizer="{{ params.tokenizer }}", force="{{ params.force }}", **COMMON
    ).expand(root=refine.output.map(_root))
    pretrain = PretrainOperator.partial(
        task_id="pretrain",
        tokenizer="{{ params.tokenizer }}",
        model="{{ params.pretrain_model }}",
        train_steps="{{ params.train_steps }}",
        device="{{ params.pretrain_device }}",
        nproc="{{ params.pretrain_nproc }}",
        extra_arguments="{{ params.pretrain_arguments }}",
        retries=0,
    ).expand(tokens=tokenize.output)
    evaluate = EvaluateOperator.partial(
        task_id="evaluate",
        suite="{{ params.eval_suite }}",
        device="{{ params.eval_device }}",
        limit="{{ params.eval_limit }}",
        extra_arguments="{{ params.eval_arguments }}",
        retries=0,
    ).expand(model=pretrain.output)
    ablation_dir = (
        selection_root
        + "/ablations/{{ params.ablation_name or (run_id | replace(':', '-') | replace('+', '-')) }}"
    )
    extraction_quality = ExtractionBenchmarkOperator(
        task_id="extraction_quality",
        data="{{ params.benchmark_data }}",
        dripper_labelers="{{ params.extractors }}",
        output_dir=ablation_dir + "/extraction",
        aws_conn_id="{{ params.aws_conn_id }}",
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
    select >> simplify >> record_simplify >> extract
    select >> extraction_quality  # needs only the selection's folder: runs beside the corpus builds
