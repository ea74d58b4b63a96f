"""extraction_benchmark: score main-content extractors on labelled pages and store the table.

Runs ``python -m eval.extraction`` (ROUGE-5 F1 raw and normalised, snippet precision/recall/F1, pages/s)
in a process of its own over the labelled pages (the bundled sample's 60 pages by default; the dev sets or
WebMainBench files in production), and stores ``summary.json``, ``report.txt`` and ``pages.jsonl`` under
``{storage_root}/extraction_benchmark/{name}/``. Extractors: ``trafilatura``, ``resiliparse``,
``readability``, ``html2text``, and ``dripper:<labeler>`` for the Dripper pipeline with any labeler.
"""

from __future__ import annotations

from datetime import datetime

from _common import (
    DEFAULT_ARGS,
    EXTRACTION_BENCHMARK_ASSET,
    default_benchmark_data,
    env,
    storage_params,
)
from airflow.sdk import DAG, Param

from operators.stages import ExtractionBenchmarkOperator

with DAG(
    dag_id="extraction_benchmark",
    description="Score extractors (ROUGE-5, snippets) on a labelled page set and store the table",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=2,
    default_args={**DEFAULT_ARGS, "retries": 0},
    params={
        "data": Param(
            [default_benchmark_data()],
            type="array",
            items={"type": "string", "minLength": 1},
            minItems=1,
            title="Labelled pages",
            description="JSONL(.gz) files in the dev format or WebMainBench's schema (local paths).",
        ),
        "extractors": Param(
            ["trafilatura", f"dripper:{env('DRIPPER_LABELER', 'trafilatura')}"],
            type="array",
            items={"type": "string", "pattern": r"^[A-Za-z0-9_.]+(:[A-Za-z0-9_./:-]+)?$"},
            minItems=1,
            uniqueItems=True,
            title="Extractors",
            description="trafilatura, resiliparse, readability, html2text, dripper:<labeler>[/md|/html2text].",
        ),
        "limit": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            title="Pages per file",
            description="Read at most this many pages of each file (empty: all).",
        ),
        "group_by": Param(
            ["source", "page_type"],
            type="array",
            items={"type": "string"},
            title="Group by",
            description="Per-group tables: source, page_type, language, or WebMainBench meta keys.",
        ),
        "workers": Param(1, type="integer", minimum=1, maximum=64, title="Processes"),
        "name": Param(
            None,
            type=["null", "string"],
            pattern=r"^[A-Za-z0-9._-]+$",
            title="Result name",
            description="Folder name of this run's results (default: the run id).",
        ),
        **storage_params(),
    },
    render_template_as_native_obj=True,
    tags=["dripper", "evaluation"],
    doc_md=__doc__,
) as dag:
    ExtractionBenchmarkOperator(
        task_id="score_extractors",
        data="{{ params.data }}",
        extractors="{{ params.extractors }}",
        limit="{{ params.limit }}",
        group_by="{{ params.group_by }}",
        workers="{{ params.workers }}",
        output_dir="{{ params.storage_root }}/extraction_benchmark/{{ params.name or run_id | replace(':', '-') | replace('+', '-') }}",
        aws_conn_id="{{ params.aws_conn_id }}",
        outlets=[EXTRACTION_BENCHMARK_ASSET],
    )
