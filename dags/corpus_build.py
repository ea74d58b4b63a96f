"""corpus_build: Common Crawl WARC files → simplified pages → extracted Markdown → refined corpus → tokens.

Started from the UI's trigger form (crawl, how many WARC files, extractor, storage, Dask, refinement), or by
``cc_snapshot_refresh``'s crawl-manifest asset (the new crawl replaces the form's crawl id). Tasks:

    select_warcs → simplify (mapped over batches of WARC files) → record_simplify → extract → refine
    → tokenize → publish_corpus (emits the corpus asset)

Where the extractor needs no GPU (``extract_one_pass``: auto, always, never), the simplify tasks and
record_simplify are skipped and extract reads the selection's WARC files in one pass, with no
``simplified/`` folder.

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
    EXTRACT,
    REFINE,
    SIMPLIFY,
    STORAGE,
    TOKENIZE,
    selection_xcom,
    simplified_selection,
    xcom,
)
from _params import corpus_build_params
from airflow.sdk import DAG

from dripper.airflow.stages import ExtractOperator, PublishCorpusOperator, RefineOperator, TokenizeOperator
from dripper.config.extract import ExtractStageConfig

with DAG(
    dag_id="corpus_build",
    description="Build a pretraining corpus from Common Crawl WARC files with a chosen labeler",
    schedule=[CRAWL_MANIFEST_ASSET],
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=2,
    default_args=DEFAULT_ARGS,
    params=corpus_build_params(),
    render_template_as_native_obj=True,
    tags=["dripper", "corpus"],
    doc_md=__doc__,
) as dag:
    _, record_simplify, selection_root = simplified_selection(
        extract_config=ExtractStageConfig.form_templates()
    )
    extract = ExtractOperator(
        task_id="extract",
        input_root=selection_root,
        config=ExtractStageConfig.form_templates(),
        simplify_config=SIMPLIFY["config"],
        trigger_rule="none_failed",  # record_simplify is skipped where the extractor reads the WARC files
        **EXTRACT,
    )
    run_root = xcom("extract", "output_root")
    refine = RefineOperator(task_id="refine", root=run_root, **REFINE)
    tokenize = TokenizeOperator(task_id="tokenize", root=run_root, **TOKENIZE)
    publish = PublishCorpusOperator(
        task_id="publish_corpus",
        root=run_root,
        selection_root=selection_root,
        crawl_id=selection_xcom("crawl_id"),
        outlets=[CORPUS_ASSET],
        trigger_rule="none_failed",
        **STORAGE,
    )
    record_simplify >> extract >> refine >> tokenize >> publish
