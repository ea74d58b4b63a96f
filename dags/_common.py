"""What the DAG files share: assets, deployment defaults and the pieces of their params forms.

Imported by the DAG processor on every parse: only the standard library and ``airflow.sdk`` here.

Deployment defaults come from the environment (the names ``docker/compose.yaml`` passes):

=========================  ==========================================================================
``DRIPPER_RUN_ROOT``       storage root of every run (``s3://bucket/runs`` or an absolute folder)
``DRIPPER_DASK_SCHEDULER`` Dask scheduler address (``tcp://host:8786``); unset: a LocalCluster per task
``DRIPPER_CRAWL_INDEX``    the crawl list (``collinfo.json``; Common Crawl's by default)
``DRIPPER_CRAWL_BASE``     where crawls' files are: ``s3`` (Common Crawl's bucket), ``https`` or a folder
``DRIPPER_CRAWL_ID``       the crawl the trigger form proposes
``DRIPPER_LABELER``        the labeler the trigger form proposes (``trafilatura`` unless set)
``DRIPPER_TOKENIZER``      a local ``tokenizer.json`` (or its folder) for the tokenize task
``DRIPPER_DASK_WORKERS``   LocalCluster worker processes when no scheduler is set (``2``)
``DRIPPER_BENCHMARK_DATA`` labelled pages for ``extraction_benchmark`` (the bundled sample by default)
=========================  ==========================================================================
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import Asset, Param

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

#: Refinement step names (``dripper_core.refine.steps``; a test keeps these in sync). ``tokenize`` is its
#: own task here, so it is not a refinement switch.
REFINE_STEPS = (
    "url_dedup",
    "language",
    "gopher_repetition",
    "gopher_quality",
    "c4_quality",
    "fineweb_quality",
    "minhash",
    "pii",
)
DEFAULT_REFINE_STEPS = (
    "language",
    "gopher_repetition",
    "gopher_quality",
    "c4_quality",
    "fineweb_quality",
    "minhash",
    "pii",
)
FALLBACKS = ("trafilatura", "empty", "none")
KNOWN_LABELERS = ("cpu", "trafilatura", "vllm", "openai", "torch", "oracle")

DEFAULT_ARGS = {"owner": "dripper", "retries": 1, "retry_delay": timedelta(minutes=1)}
_ABSOLUTE_OR_URL = r"^(/|[A-Za-z][A-Za-z0-9+.-]*://)"


def env(name: str, default: Any = None) -> Any:
    """``os.environ[name]`` unless unset or empty."""
    return os.environ.get(name) or default


def default_storage_root() -> str:
    return env("DRIPPER_RUN_ROOT", str(Path.home() / "dripper-runs"))


def storage_params() -> dict[str, Param]:
    """Where runs live and how to reach it."""
    return {
        "storage_root": Param(
            default_storage_root(),
            type="string",
            pattern=_ABSOLUTE_OR_URL,
            title="Storage root",
            description="Absolute folder or URL (s3://bucket/prefix) holding every run (DRIPPER_RUN_ROOT).",
            section="Storage and compute",
        ),
        "aws_conn_id": Param(
            "aws_default",
            type="string",
            minLength=1,
            title="S3 connection",
            description="Airflow connection with the S3 credentials of the storage root (s3:// roots only).",
            section="Storage and compute",
        ),
    }


def compute_params() -> dict[str, Param]:
    """The Dask cluster that runs the page-level stages."""
    return {
        "dask_scheduler": Param(
            env("DRIPPER_DASK_SCHEDULER"),
            type=["null", "string"],
            pattern=r"^(tcp|tls|ws|wss|inproc|ucx)://\S+$",
            title="Dask scheduler",
            description="tcp://host:8786 of a running cluster; empty: a LocalCluster inside each task.",
            section="Storage and compute",
        ),
        "dask_workers": Param(
            int(env("DRIPPER_DASK_WORKERS", 2)),
            type="integer",
            minimum=0,
            maximum=256,
            title="LocalCluster workers",
            description="Worker processes of the LocalCluster when no scheduler is given (0: in the task).",
            section="Storage and compute",
        ),
        "force": Param(
            False,
            type="boolean",
            title="Recompute",
            description="Recompute shards and outputs that are already done (normally they are skipped).",
            section="Storage and compute",
        ),
    }


def selection_params() -> dict[str, Param]:
    """Which crawl and which of its WARC files."""
    return {
        "crawl_id": Param(
            env("DRIPPER_CRAWL_ID", "CC-MAIN-2025-13"),
            type="string",
            pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
            title="Crawl id",
            description="A Common Crawl crawl (CC-MAIN-YYYY-WW). A run started by cc_snapshot_refresh "
            "takes the new crawl from the asset event instead.",
            section="WARC selection",
        ),
        "crawl_base": Param(
            env("DRIPPER_CRAWL_BASE", "s3"),
            type="string",
            minLength=1,
            title="Crawl location",
            description="s3 (Common Crawl's bucket, anonymous), https (its HTTPS mirror), or a folder/URL "
            "laid out like Common Crawl (crawl-data/{crawl}/warc.paths.gz).",
            section="WARC selection",
        ),
        "warc_count": Param(
            2,
            type=["null", "integer"],
            minimum=1,
            title="Number of WARC files",
            description="How many WARC files to take (about 1 GB and 30-50k pages each). Empty: use the "
            "fraction.",
            section="WARC selection",
        ),
        "warc_fraction": Param(
            None,
            type=["null", "number"],
            exclusiveMinimum=0,
            maximum=1,
            title="Fraction of WARC files",
            description="Or which share of the crawl's files to take (leave the number empty). Both empty: "
            "every file.",
            section="WARC selection",
        ),
        "seed": Param(
            0,
            type="integer",
            minimum=0,
            title="Seed",
            description="Selection seed: the same seed picks the same files; a larger count keeps the "
            "smaller selection as its prefix.",
            section="WARC selection",
        ),
        "warcs_per_task": Param(
            2,
            type="integer",
            minimum=1,
            title="WARC files per simplify task",
            description="The simplify task is mapped over batches of this many files (one shard each).",
            section="WARC selection",
        ),
    }


def extraction_params() -> dict[str, Param]:
    """The labeler, its model and options, and its fallback."""
    return {
        "labeler": Param(
            env("DRIPPER_LABELER", "trafilatura"),
            type="string",
            pattern=r"^[A-Za-z0-9_.]+(:[A-Za-z0-9_.]+)?$",
            examples=list(KNOWN_LABELERS),
            title="Labeler",
            description="Registered labeler (cpu, trafilatura, vllm, openai, torch) or module:factory.",
            section="Extraction",
        ),
        "labeler_model": Param(
            None,
            type=["null", "string"],
            title="Model",
            description="The LM labelers' model: a local folder, or the served model name (openai).",
            section="Extraction",
        ),
        "labeler_options": Param(
            {},
            type="object",
            title="Labeler options",
            description='More keyword options of the labeler, e.g. {"max_model_len": 32768}.',
            section="Extraction",
        ),
        **fallback_params(),
    }


def fallback_params() -> dict[str, Param]:
    """What happens to pages the labeler cannot label, and the labeler's batch size."""
    return {
        "fallback": Param(
            "trafilatura",
            type="string",
            enum=list(FALLBACKS),
            title="Fallback",
            description="Extractor for pages the labeler cannot label (none: leave them empty).",
            section="Extraction",
        ),
        "fallback_on_empty": Param(
            False,
            type="boolean",
            title="Fall back on empty output",
            description="Also use the fallback when no block is labelled main content.",
            section="Extraction",
        ),
        "extract_batch_size": Param(
            64,
            type="integer",
            minimum=1,
            title="Pages per labeler call",
            section="Extraction",
        ),
    }


def refinement_params(tokenizer_required: bool = False) -> dict[str, Param]:
    """The datatrove refinement switches and the tokenizer."""
    tokenizer_default = env("DRIPPER_TOKENIZER")
    if tokenizer_required:
        # No default when none is configured: the trigger form then asks for it.
        tokenizer = Param(
            **({"default": tokenizer_default} if tokenizer_default else {}),
            type="string",
            minLength=1,
            title="Tokenizer",
            description="Local tokenizer.json (or its folder) for the Megatron tokens the models train on.",
            section="Refinement",
        )
    else:
        tokenizer = Param(
            tokenizer_default,
            type=["null", "string"],
            title="Tokenizer",
            description="Local tokenizer.json (or its folder) for the Megatron tokens; empty: no tokens.",
            section="Refinement",
        )
    return {
        "refine_steps": Param(
            list(DEFAULT_REFINE_STEPS),
            type="array",
            items={"type": "string", "enum": list(REFINE_STEPS)},
            uniqueItems=True,
            examples=list(REFINE_STEPS),
            title="Refinement steps",
            description="Filters and dedup to run (always in pipeline order): " + ", ".join(REFINE_STEPS),
            section="Refinement",
        ),
        "refine_tasks": Param(
            4,
            type="integer",
            minimum=1,
            title="Refinement tasks",
            description="datatrove tasks per pass (the extracted shards are split among them).",
            section="Refinement",
        ),
        "refine_workers": Param(
            -1,
            type="integer",
            minimum=-1,
            title="Refinement processes",
            description="Tasks run at once (-1: one per CPU, 1: inside the Airflow task).",
            section="Refinement",
        ),
        "refine_options": Param(
            {},
            type="object",
            title="Refinement config",
            description='More RefineConfig fields, e.g. {"language": {"languages": ["en"]}}.',
            section="Refinement",
        ),
        "tokenizer": tokenizer,
    }


def default_benchmark_data() -> str:
    return env("DRIPPER_BENCHMARK_DATA", str(REPO_ROOT / "data" / "sample" / "pages.jsonl.gz"))


def xcom(task_id: str, field: str, key: str = "return_value") -> str:
    """A template for one field of a dict a task pushed (rendered as a native object)."""
    return "{{ ti.xcom_pull(task_ids='" + task_id + "', key='" + key + "')['" + field + "'] }}"


def selection_xcom(field: str) -> str:
    """A field of the select_warcs task's summary (XCom key ``selection``)."""
    return xcom("select_warcs", field, key="selection")
