"""extraction_benchmark: score main-content extractors on labelled pages and store the table.

Runs ``python -m dripper.eval.extraction`` (ROUGE-5 F1 raw and normalised, snippet precision/recall/F1, pages/s)
in a process of its own over the labelled pages (the bundled sample's 60 pages by default; the dev sets or
WebMainBench files in production), and stores ``summary.json``, ``report.txt`` and ``pages.jsonl`` under
``{storage_root}/extraction_benchmark/{name}/``. Extractors: ``trafilatura``, ``resiliparse``,
``readability``, ``html2text``, and ``dripper:<labeler>`` for the Dripper pipeline with any labeler.
"""

from __future__ import annotations

from datetime import datetime

from _common import DEFAULT_ARGS, EXTRACTION_BENCHMARK_ASSET, templated
from _params import extraction_benchmark_params
from airflow.sdk import DAG

from dripper.airflow.stages import ExtractionBenchmarkOperator

with DAG(
    dag_id="extraction_benchmark",
    description="Score extractors (ROUGE-5, snippets) on a labelled page set and store the table",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=2,
    default_args={**DEFAULT_ARGS, "retries": 0},
    params=extraction_benchmark_params(),
    render_template_as_native_obj=True,
    tags=["dripper", "evaluation"],
    doc_md=__doc__,
) as dag:
    ExtractionBenchmarkOperator(
        task_id="score_extractors",
        **templated("data", "extractors", "limit", "group_by", "workers", "aws_conn_id"),
        output_dir="{{ params.storage_root }}/extraction_benchmark/{{ params.name or run_id | replace(':', '-') | replace('+', '-') }}",
        outlets=[EXTRACTION_BENCHMARK_ASSET],
    )
