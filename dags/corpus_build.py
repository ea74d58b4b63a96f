"""corpus_build: Common Crawl WARC files → simplified pages → extracted Markdown → refined corpus → tokens.

Started from the UI's trigger form (crawl, how many WARC files, labeler, storage, Dask, refinement), or by
``cc_snapshot_refresh``'s crawl-manifest asset (the new crawl replaces the form's crawl id). Tasks:

    select_warcs → simplify (mapped over batches of WARC files) → record_simplify → extract → refine
    → tokenize → publish_corpus (emits the corpus asset)

Every task resumes: finished shards, datatrove tasks and token files are kept, so clearing a failed task
(or triggering again with the same parameters) continues where the run stopped. Where things go:
``{storage_root}/runs/{crawl}/{selection}/`` (simplified) and ``…/extractors/{extractor}/`` (the rest).
"""

from __future__ import annotations

from datetime import datetime

from _common import (
    CORPUS_ASSET,
    CRAWL_MANIFEST_ASSET,
    DEFAULT_ARGS,
    compute_params,
    extraction_params,
    refinement_params,
    selection_params,
    selection_xcom,
    storage_params,
    xcom,
)
from airflow.sdk import DAG

from operators.stages import (
    ExtractOperator,
    PublishCorpusOperator,
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

with DAG(
    dag_id="corpus_build",
    description="Build a pretraining corpus from Common Crawl WARC files with a chosen labeler",
    schedule=[CRAWL_MANIFEST_ASSET],
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=2,
    default_args=DEFAULT_ARGS,
    params={
        **selection_params(),
        **extraction_params(),
        **refinement_params(),
        **storage_params(),
        **compute_params(),
    },
    render_template_as_native_obj=True,
    tags=["dripper", "corpus"],
    doc_md=__doc__,
) as dag:
    select = SelectWarcsOperator(
        task_id="select_warcs",
        crawl_id="{{ params.crawl_id }}",
        crawl_base="{{ params.crawl_base }}",
        count="{{ params.warc_count }}",
        fraction="{{ params.warc_fraction }}",
        seed="{{ params.seed }}",
        warcs_per_task="{{ params.warcs_per_task }}",
        **COMMON,
    )
    selection_root = selection_xcom("selection_root")
    simplify = SimplifyBatchOperator.partial(task_id="simplify", **COMMON, **DASK).expand(batch=select.output)
    record_simplify = RecordSimplifyOperator(
        task_id="record_simplify", selection_root=selection_root, batch_results=simplify.output, **COMMON
    )
    extract = ExtractOperator(
        task_id="extract",
        input_root=selection_root,
        labeler="{{ params.labeler }}",
        labeler_model="{{ params.labeler_model }}",
        labeler_options="{{ params.labeler_options }}",
        fallback="{{ params.fallback }}",
        fallback_on_empty="{{ params.fallback_on_empty }}",
        batch_size="{{ params.extract_batch_size }}",
        **COMMON,
        **DASK,
    )
    run_root = xcom("extract", "output_root")
    refine = RefineOperator(
        task_id="refine",
        root=run_root,
        steps="{{ params.refine_steps }}",
        tasks="{{ params.refine_tasks }}",
        workers="{{ params.refine_workers }}",
        options="{{ params.refine_options }}",
        force="{{ params.force }}",
        **COMMON,
    )
    tokenize = TokenizeOperator(
        task_id="tokenize",
        root=run_root,
        tokenizer="{{ params.tokenizer }}",
        force="{{ params.force }}",
        **COMMON,
    )
    publish = PublishCorpusOperator(
        task_id="publish_corpus",
        root=run_root,
        selection_root=selection_root,
        crawl_id=selection_xcom("crawl_id"),
        outlets=[CORPUS_ASSET],
        trigger_rule="none_failed",
        **COMMON,
    )
    select >> simplify >> record_simplify >> extract >> refine >> tokenize >> publish
