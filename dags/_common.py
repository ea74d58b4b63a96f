"""What the DAG files share: assets, deployment defaults, operator arguments rendered from params, and the
head of every corpus build (select → simplify → record). The params forms are ``_params``'s.

Imported by the DAG processor on every parse: only the standard library, ``airflow.sdk``, the stage
configs (``dripper.config``: pydantic) and the thin ``operators`` package here.

Deployment defaults come from the environment (the names ``docker/compose.yaml`` passes):

=========================== ==============================================================================
``DRIPPER_RUN_ROOT``        storage root of every run (``s3://bucket/runs`` or an absolute folder)
``DRIPPER_DASK_SCHEDULER``  Dask scheduler address (``tcp://host:8786``); unset: a LocalCluster per task
``DRIPPER_CRAWL_INDEX``     the crawl list (``collinfo.json``; Common Crawl's by default)
``DRIPPER_CRAWL_BASE``      where crawls' files are: ``s3`` (Common Crawl's bucket), ``https`` or a folder
``DRIPPER_CRAWL_ID``        the crawl the trigger form proposes
``DRIPPER_LABELER``         the labeler the trigger form proposes (``cpu`` unless set)
``DRIPPER_TOKENIZER``       a local ``tokenizer.json`` (or its folder) for the tokenize task
``DRIPPER_DASK_WORKERS``    simplify's LocalCluster worker processes when no scheduler is set (one per core)
``DRIPPER_WARC_COUNT``      WARC files a build takes when the form (or a new-crawl event) names none
``DRIPPER_EXTRACT_WORKERS`` extract's LocalCluster worker processes, one labeler each (``1``)
``DRIPPER_REFINE_WORKERS``  refine's datatrove processes (``-1``: one per core; ``1``: in the task's process)
``DRIPPER_BENCHMARK_DATA``  labelled pages for ``extraction_benchmark`` (the bundled sample by default)
``DRIPPER_EVAL_SUITE``      the benchmark suite the ablation form proposes (``local``, offline, unless set)
``DRIPPER_{JOB}_RUN_ON``    ``slurm`` sends refine/pretrain/eval (``JOB``: REFINE, PRETRAIN, EVAL) to Slurm
``DRIPPER_{JOB}_SLURM``     that job's Slurm options, a JSON object (partition, time, nodes, GPUs…)
=========================== ==============================================================================
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import Asset

from dripper.config.refine import RefineStageConfig
from dripper.config.simplify import SimplifyStageConfig
from dripper.config.tokenize import TokenizeStageConfig

REPO_ROOT = Path(__file__).resolve().parents[1]
COLLINFO_URL = "https://index.commoncrawl.org/collinfo.json"

#: Emitted by cc_snapshot_refresh for each new crawl (event extra: crawl_id, crawl_base, manifest);
#: schedules corpus_build.
CRAWL_MANIFEST_ASSET = Asset(name="cc_crawl_manifest", uri="dripper://cc_snapshot_refresh/crawl_manifest")
#: Emitted by corpus_build when a corpus (and its tokens) is ready (event extra: where, counts).
CORPUS_ASSET = Asset(name="dripper_corpus", uri="dripper://corpus_build/corpus")
#: Emitted by extractor_ablation with the rendered report.
ABLATION_REPORT_ASSET = Asset(name="extractor_ablation_report", uri="dripper://extractor_ablation/report")
#: Emitted by extraction_benchmark with the stored table.
EXTRACTION_BENCHMARK_ASSET = Asset(
    name="extraction_benchmark_table", uri="dripper://extraction_benchmark/table"
)

DEFAULT_ARGS = {"owner": "dripper", "retries": 1, "retry_delay": timedelta(minutes=1)}


def env(name: str, default: Any = None) -> Any:
    """``os.environ[name]`` unless unset or empty."""
    return os.environ.get(name) or default


def default_storage_root() -> str:
    return env("DRIPPER_RUN_ROOT", str(Path.home() / "dripper-runs"))


def xcom(task_id: str, field: str, key: str = "return_value") -> str:
    """A template for one field of a dict a task pushed (rendered as a native object)."""
    return "{{ ti.xcom_pull(task_ids='" + task_id + "', key='" + key + "')['" + field + "'] }}"


def selection_xcom(field: str) -> str:
    """A field of the select_warcs task's summary (XCom key ``selection``)."""
    return xcom("select_warcs", field, key="selection")


def templated(*names: str, **renamed: str) -> dict[str, str]:
    """Operator arguments rendered from params: ``templated("crawl_id", run_on="refine_run_on")`` is
    ``{"crawl_id": "{{ params.crawl_id }}", "run_on": "{{ params.refine_run_on }}"}``. A stage's settings
    are not passed this way but as its ``config`` (``StageConfig.form_templates``)."""
    pairs = {name: name for name in names} | renamed
    return {argument: "{{ params." + param + " }}" for argument, param in pairs.items()}


#: Where a task's storage root is and which connection reaches it.
STORAGE = templated("storage_root", "aws_conn_id")
#: The Dask arguments of the Dask stages (their workers are in their configs).
DASK = templated("dask_scheduler", "force")
#: The simplify config of the selection and simplify tasks, from the form.
SIMPLIFY = {"config": SimplifyStageConfig.form_templates()}


def simplified_selection(
    from_asset_event: bool = True, extract_config: dict[str, str] | None = None
) -> tuple[Any, Any, str]:
    """The head of a corpus build: ``select_warcs`` → ``simplify`` (mapped over batches of WARC files) →
    ``record_simplify``. Returns the first and last task and the template of the selection's folder.
    ``extract_config``: the one extractor's extract config, where the simplify tasks skip themselves when
    it reads the WARC files in one pass (``record_simplify`` is then skipped too)."""
    from dripper.airflow.stages import RecordSimplifyOperator, SelectWarcsOperator, SimplifyBatchOperator

    select = SelectWarcsOperator(
        task_id="select_warcs",
        **templated("crawl_id", "crawl_base", "warcs_per_task"),
        **SIMPLIFY,
        from_asset_event=from_asset_event,
        **STORAGE,
    )
    simplify = SimplifyBatchOperator.partial(
        task_id="simplify", **SIMPLIFY, extract_config=extract_config, **STORAGE, **DASK
    ).expand(batch=select.output)
    selection_root = selection_xcom("selection_root")
    record = RecordSimplifyOperator(
        task_id="record_simplify", selection_root=selection_root, batch_results=simplify.output, **STORAGE
    )
    select >> simplify >> record
    return select, record, selection_root


#: The extract task's arguments every corpus build shares (its config is the DAG's: one extractor or each).
EXTRACT = DASK | STORAGE
#: The refine task's arguments from the refinement params (and where it runs: here or on Slurm).
REFINE = (
    templated("force", run_on="refine_run_on", slurm="refine_slurm")
    | {"config": RefineStageConfig.form_templates()}
    | STORAGE
)
#: The tokenize task's arguments.
TOKENIZE = templated("force") | {"config": TokenizeStageConfig.form_templates()} | STORAGE
