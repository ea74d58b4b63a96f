"""The DAGs' trigger forms: every field is defined once here, and each DAG's form is put together from the
groups it needs (``corpus_build_params()``, ``extractor_ablation_params()``, …).

Fields are grouped into the form's sections. Defaults come from the environment (``_common``'s table).
Imported by the DAG processor on every parse: only the standard library and ``airflow.sdk`` here.
"""

from __future__ import annotations

from typing import Any

from _common import COLLINFO_URL, REPO_ROOT, default_storage_root, env
from airflow.sdk import Param

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
DEFAULT_REFINE_STEPS = REFINE_STEPS[1:]  # all but url_dedup
FALLBACKS = ("trafilatura", "empty", "none")
#: ``dripper_core.labelers.base.DEFAULT_LABELER`` (a test keeps these in sync).
DEFAULT_LABELER = "cpu"
KNOWN_LABELERS = ("cpu", "trafilatura", "vllm", "openai", "torch", "oracle")
#: A registered labeler name or ``module:factory``.
LABELER_PATTERN = r"^[A-Za-z0-9_.]+(:[A-Za-z0-9_.]+)?$"

SELECTION = "WARC selection"
EXTRACTION = "Extraction"
REFINEMENT = "Refinement"
STORAGE = "Storage and compute"
TRAINING = "Pretraining and evaluation"


def default_labeler() -> str:
    """The labeler the forms propose: ``DRIPPER_LABELER``, else the platform's default (read per form)."""
    return env("DRIPPER_LABELER", DEFAULT_LABELER)


_ABSOLUTE_OR_URL = r"^(/|[A-Za-z][A-Za-z0-9+.-]*://)"
_RESULT_NAME = r"^[A-Za-z0-9._-]+$"


# -- the DAGs' forms -----------------------------------------------------------------------------------------


def corpus_build_params() -> dict[str, Param]:
    return {
        **selection_params(),
        **labeler_params(),
        **extract_task_params(),
        **refinement_params(),
        **storage_params(),
        **compute_params(),
    }


def extractor_ablation_params() -> dict[str, Param]:
    return {
        **selection_params(),
        **extractors_params(),
        **extract_task_params(),
        **refinement_params(tokenizer_required=True),
        **training_params(),
        "benchmark_data": benchmark_data_param(
            title="Labelled pages",
            description="Pages with ground truth for the extraction-quality section of the report.",
            section=TRAINING,
        ),
        "benchmark_limit": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            title="Labelled pages per file",
            description="Score at most this many labelled pages per file (empty: all).",
            section=TRAINING,
        ),
        "ablation_name": _name_param(
            "Ablation name", "Folder of this ablation's report under the selection", TRAINING
        ),
        **storage_params(),
        **compute_params(),
    }


def cc_snapshot_refresh_params() -> dict[str, Param]:
    return {
        "crawl_index": Param(
            env("DRIPPER_CRAWL_INDEX", COLLINFO_URL),
            type="string",
            minLength=1,
            title="Crawl index",
            description="collinfo.json URL or path listing the crawls (DRIPPER_CRAWL_INDEX).",
        ),
        "crawl_base": crawl_base_param(),
        "max_new_crawls": Param(
            1,
            type="integer",
            minimum=0,
            title="Builds per run",
            description="Publish at most this many new crawls per run (newest first); 0: only record them.",
        ),
        **storage_params(),
    }


def extraction_benchmark_params() -> dict[str, Param]:
    return {
        "data": benchmark_data_param(
            minItems=1,
            title="Labelled pages",
            description="JSONL(.gz) files in the dev format or WebMainBench's schema (local paths).",
        ),
        "extractors": Param(
            ["trafilatura", f"dripper:{default_labeler()}"],
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
        "name": _name_param("Result name", "Folder name of this run's results"),
        **storage_params(),
    }


# -- the groups of fields ------------------------------------------------------------------------------------


def storage_params() -> dict[str, Param]:
    """Where runs live and how to reach it."""
    return {
        "storage_root": Param(
            default_storage_root(),
            type="string",
            pattern=_ABSOLUTE_OR_URL,
            title="Storage root",
            description="Absolute folder or URL (s3://bucket/prefix) holding every run (DRIPPER_RUN_ROOT).",
            section=STORAGE,
        ),
        "aws_conn_id": Param(
            "aws_default",
            type="string",
            minLength=1,
            title="S3 connection",
            description="Airflow connection with the S3 credentials of the storage root (s3:// roots only).",
            section=STORAGE,
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
            section=STORAGE,
        ),
        "dask_workers": _workers_param(
            env("DRIPPER_DASK_WORKERS", 2),
            "LocalCluster workers",
            "Worker processes of the simplify tasks' LocalCluster when no scheduler is given",
            STORAGE,
        ),
        "force": Param(
            False,
            type="boolean",
            title="Recompute",
            description="Recompute shards and outputs that are already done (normally they are skipped).",
            section=STORAGE,
        ),
    }


def crawl_base_param(section: str | None = None) -> Param:
    return Param(
        env("DRIPPER_CRAWL_BASE", "s3"),
        type="string",
        minLength=1,
        title="Crawl location",
        description="s3 (Common Crawl's bucket, anonymous), https (its HTTPS mirror), or a folder/URL "
        "laid out like Common Crawl (crawl-data/{crawl}/warc.paths.gz).",
        **_in(section),
    )


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
            section=SELECTION,
        ),
        "crawl_base": crawl_base_param(SELECTION),
        "warc_count": Param(
            2,
            type=["null", "integer"],
            minimum=1,
            title="Number of WARC files",
            description="How many WARC files to take (about 1 GB and 30-50k pages each). Empty: use the "
            "fraction.",
            section=SELECTION,
        ),
        "warc_fraction": Param(
            None,
            type=["null", "number"],
            exclusiveMinimum=0,
            maximum=1,
            title="Fraction of WARC files",
            description="Or which share of the crawl's files to take (leave the number empty). Both empty: "
            "every file.",
            section=SELECTION,
        ),
        "seed": Param(
            0,
            type="integer",
            minimum=0,
            title="Seed",
            description="Selection seed: the same seed picks the same files; a larger count keeps the "
            "smaller selection as its prefix.",
            section=SELECTION,
        ),
        "warcs_per_task": Param(
            2,
            type="integer",
            minimum=1,
            title="WARC files per simplify task",
            description="The simplify task is mapped over batches of this many files (one shard each).",
            section=SELECTION,
        ),
    }


def labeler_params() -> dict[str, Param]:
    """One labeler, its model and options (corpus_build)."""
    return {
        "labeler": Param(
            default_labeler(),
            type="string",
            pattern=LABELER_PATTERN,
            examples=list(KNOWN_LABELERS),
            title="Labeler",
            description="Registered labeler (cpu, trafilatura, vllm, openai, torch) or module:factory.",
            section=EXTRACTION,
        ),
        "labeler_model": Param(
            None,
            type=["null", "string"],
            title="Model",
            description="The LM labelers' model: a local folder, or the served model name (openai).",
            section=EXTRACTION,
        ),
        "labeler_options": Param(
            {},
            type="object",
            title="Labeler options",
            description='More keyword options of the labeler, e.g. {"max_model_len": 32768}.',
            section=EXTRACTION,
        ),
    }


def extractors_params() -> dict[str, Param]:
    """The extractors to compare, as extractor specs (extractor_ablation; ``dripper_core.config.extractor``)."""
    return {
        "extractors": Param(
            list(dict.fromkeys([default_labeler(), "trafilatura"])),
            type="array",
            items={"type": "string", "minLength": 1},
            minItems=1,
            uniqueItems=True,
            title="Extractors",
            description="One per line: a labeler name (cpu, trafilatura), or NAME=LABELER,key=value,… for a "
            "named spec with options, e.g. v11=vllm,model=/models/MinerU-HTML-v1.1 or "
            "v10=vllm,model=/models/MinerU-HTML,answer_format=json (also fallback=empty|none). The name "
            "names the corpus folder and the report rows; checked before any WARC is read.",
            section=EXTRACTION,
        ),
    }


def extract_task_params() -> dict[str, Param]:
    """How the extract task runs the labeler: its fallback, batch size and processes."""
    return {
        "fallback": Param(
            "trafilatura",
            type="string",
            enum=list(FALLBACKS),
            title="Fallback",
            description="Extractor for pages the labeler cannot label (none: leave them empty).",
            section=EXTRACTION,
        ),
        "fallback_on_empty": Param(
            False,
            type="boolean",
            title="Fall back on empty output",
            description="Also use the fallback when no block is labelled main content.",
            section=EXTRACTION,
        ),
        "extract_batch_size": Param(
            64,
            type="integer",
            minimum=1,
            title="Pages per labeler call",
            section=EXTRACTION,
        ),
        # Its own count: each extract worker builds a labeler (an LM labeler holds a model, one per GPU),
        # so it is usually smaller than the simplify workers.
        "extract_workers": _workers_param(
            env("DRIPPER_EXTRACT_WORKERS", 1),
            "Extract workers",
            "LocalCluster processes of the extract task, each with its own labeler (one per GPU for an LM "
            "labeler), when no scheduler is given",
            EXTRACTION,
        ),
    }


def refinement_params(tokenizer_required: bool = False) -> dict[str, Param]:
    """The datatrove refinement switches and the tokenizer."""
    tokenizer_default = env("DRIPPER_TOKENIZER")
    tokenizer: dict[str, Any] = {"title": "Tokenizer", "section": REFINEMENT}
    if tokenizer_required:
        # No default when none is configured: the trigger form then asks for it.
        tokenizer |= {
            **({"default": tokenizer_default} if tokenizer_default else {}),
            "type": "string",
            "minLength": 1,
            "description": "Local tokenizer.json (or its folder) for the Megatron tokens the models train on.",
        }
    else:
        tokenizer |= {
            "default": tokenizer_default,
            "type": ["null", "string"],
            "description": "Local tokenizer.json (or its folder) for the Megatron tokens; empty: no tokens.",
        }
    return {
        "refine_steps": Param(
            list(DEFAULT_REFINE_STEPS),
            type="array",
            items={"type": "string", "enum": list(REFINE_STEPS)},
            uniqueItems=True,
            examples=list(REFINE_STEPS),
            title="Refinement steps",
            description="Filters and dedup to run (always in pipeline order): " + ", ".join(REFINE_STEPS),
            section=REFINEMENT,
        ),
        "refine_tasks": Param(
            4,
            type="integer",
            minimum=1,
            title="Refinement tasks",
            description="datatrove tasks per pass (the extracted shards are split among them).",
            section=REFINEMENT,
        ),
        "refine_workers": Param(
            -1,
            type="integer",
            minimum=-1,
            title="Refinement processes",
            description="Tasks run at once (-1: one per CPU, 1: inside the Airflow task).",
            section=REFINEMENT,
        ),
        "refine_options": Param(
            {},
            type="object",
            title="Refinement config",
            description='More RefineConfig fields, e.g. {"language": {"languages": ["en"]}}.',
            section=REFINEMENT,
        ),
        "tokenizer": Param(**tokenizer),
    }


def training_params() -> dict[str, Param]:
    """Pretraining a model on each corpus and scoring it (extractor_ablation)."""
    return {
        "pretrain_model": Param(
            "tiny",
            type="string",
            enum=["tiny", "llama-1b"],
            title="Model",
            description="Model preset (pretrain.config): tiny for a smoke run, llama-1b as in the paper.",
            section=TRAINING,
        ),
        "train_steps": Param(20, type="integer", minimum=1, title="Training steps", section=TRAINING),
        "pretrain_device": Param(
            "auto", type="string", enum=["auto", "cpu", "cuda"], title="Device", section=TRAINING
        ),
        "pretrain_nproc": Param(
            1,
            type="integer",
            minimum=1,
            title="Processes per node",
            description="torchrun processes (GPUs) per model; 1 runs a single process.",
            section=TRAINING,
        ),
        "pretrain_arguments": _arguments_param(
            "More training options",
            'Passed to `python -m pretrain train`, e.g. ["--global-batch-size", "512"].',
        ),
        "eval_every": Param(
            10,
            type="integer",
            minimum=1,
            title="Evaluate every N steps",
            description="Checkpoint and score the model every so many steps (and at the last): the report's "
            "scores over training tokens.",
            section=TRAINING,
        ),
        "eval_suite": Param(
            env("DRIPPER_EVAL_SUITE", "local"),
            type="string",
            minLength=1,
            examples=["local", "paper13"],
            title="Benchmark suite",
            description="Suite name in eval/suites or a suite file: local (embedded, offline) or paper13 "
            "(the paper's 13 benchmarks; their data must be in the Hugging Face cache, checked before any "
            "WARC is read).",
            section=TRAINING,
        ),
        "eval_device": Param("cpu", type="string", minLength=1, title="Evaluation device", section=TRAINING),
        "eval_limit": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            title="Documents per benchmark",
            description="Score at most this many documents per task (empty: all).",
            section=TRAINING,
        ),
        "eval_arguments": _arguments_param(
            "More evaluation options",
            'Passed to `python -m eval.lm_suite`, e.g. ["--fixtures", "path/manifest.yaml"].',
        ),
    }


def benchmark_data_param(**schema: Any) -> Param:
    """Labelled page files (the bundled sample's by default, ``DRIPPER_BENCHMARK_DATA``)."""
    default = env("DRIPPER_BENCHMARK_DATA", str(REPO_ROOT / "data" / "sample" / "pages.jsonl.gz"))
    return Param([default], type="array", items={"type": "string", "minLength": 1}, **schema)


def _workers_param(default: Any, title: str, description: str, section: str) -> Param:
    return Param(
        int(default),
        type="integer",
        minimum=0,
        maximum=256,
        title=title,
        description=f"{description} (0: in the task's process).",
        section=section,
    )


def _arguments_param(title: str, description: str) -> Param:
    return Param(
        [], type="array", items={"type": "string"}, title=title, description=description, section=TRAINING
    )


def _name_param(title: str, description: str, section: str | None = None) -> Param:
    return Param(
        None,
        type=["null", "string"],
        pattern=_RESULT_NAME,
        title=title,
        description=f"{description} (default: the run id).",
        **_in(section),
    )


def _in(section: str | None) -> dict[str, str]:
    """The form section to show a field in (none: the DAG's form has no sections)."""
    return {"section": section} if section else {}
