"""The DAGs' trigger forms, put together from the groups each DAG needs (``corpus_build_params()``,
``extractor_ablation_params()``, …).

A stage's fields come from its config (``dripper.config.{simplify,extract,refine,tokenize,pretrain,
evaluate,report}``: name, type, default, description, constraints), so the form, ``dripper run STAGE`` and
the Python API cannot drift apart; only the fields no stage has (the crawl, the ablation's extractors, the
storage root, the Dask scheduler) are written here. Imported by the DAG processor on every parse: the
standard library, pydantic and ``airflow.sdk`` only.
"""

from __future__ import annotations

from typing import Any

from _common import COLLINFO_URL, default_storage_root, env
from airflow.sdk import Param

from dripper.config.evaluate import EvaluateStageConfig
from dripper.config.extract import ExtractStageConfig
from dripper.config.labelers import DEFAULT_LABELER, labeler_names
from dripper.config.pretrain import PretrainStageConfig
from dripper.config.refine import RefineStageConfig
from dripper.config.report import ReportStageConfig
from dripper.config.settings import StageConfig
from dripper.config.simplify import SimplifyStageConfig
from dripper.config.tokenize import TokenizeStageConfig

SELECTION = "WARC selection"
EXTRACTION = "Extraction"
REFINEMENT = "Refinement"
STORAGE = "Storage and compute"
TRAINING = "Pretraining and evaluation"
SLURM = "Cluster jobs (Slurm)"


def default_labeler() -> str:
    """The labeler the forms propose: ``DRIPPER_LABELER``, else the platform's default (read per form)."""
    return env("DRIPPER_LABELER", DEFAULT_LABELER)


_ABSOLUTE_OR_URL = r"^(/|[A-Za-z][A-Za-z0-9+.-]*://)"
_RESULT_NAME = r"^[A-Za-z0-9._-]+$"


# -- the DAGs' forms -----------------------------------------------------------------------------------------


def corpus_build_params() -> dict[str, Param]:
    return {
        **selection_params(),
        **extractor_params(),
        **stage_params(ExtractStageConfig, "batch_size", "workers", "one_pass"),
        **refinement_params(),
        **storage_params(),
        **compute_params(),
        **slurm_params("refine"),
    }


def extractor_ablation_params() -> dict[str, Param]:
    return {
        **selection_params(),
        **extractors_params(),
        **stage_params(ExtractStageConfig, "batch_size", "workers"),
        **refinement_params(tokenizer_required=True),
        **training_params(),
        **stage_params(ReportStageConfig),
        **storage_params(),
        **compute_params(),
        **slurm_params("refine", "pretrain", "eval"),
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
    """The Dask cluster that runs the page-level stages, and the simplify stage's own limits."""
    return {
        "dask_scheduler": Param(
            env("DRIPPER_DASK_SCHEDULER"),
            type=["null", "string"],
            pattern=r"^(tcp|tls|ws|wss|inproc|ucx)://\S+$",
            title="Dask scheduler",
            description="tcp://host:8786 of a running cluster; empty: a LocalCluster inside each task.",
            section=STORAGE,
        ),
        **stage_params(
            SimplifyStageConfig,
            "workers",
            "max_payload_bytes",
            "max_page_bytes",
            "keep_truncated",
            section=STORAGE,
        ),
        "force": Param(
            False,
            type="boolean",
            title="Recompute",
            description="Recompute shards and outputs that are already done (normally they are skipped).",
            section=STORAGE,
        ),
    }


#: What each Slurm-capable task is, for the form (``{job}_run_on``, ``{job}_slurm``).
_SLURM_JOBS = {
    "refine": (
        "Refinement",
        "datatrove's SlurmPipelineExecutor options: partition and time required; qos, cpus_per_task, "
        'mem_per_cpu_gb, sbatch_args, venv_path, poll_seconds…, e.g. {"partition": "cpu", "time": "04:00:00"}',
    ),
    "pretrain": (
        "Pretraining",
        "sbatch options (dripper.pretrain.slurm.SlurmJobConfig): nodes, gpus_per_node, partition, account, time, "
        'sbatch_lines, env, setup, python, poll_seconds…, e.g. {"nodes": 4, "gpus_per_node": 8, '
        '"partition": "h100", "time": "2-00:00:00"}',
    ),
    "eval": (
        "Evaluation",
        'sbatch options of the one-process scoring job, e.g. {"gpus_per_node": 1, "partition": "h100", '
        '"time": "02:00:00"}',
    ),
}


def slurm_params(*jobs: str) -> dict[str, Param]:
    """Where each long task runs: here (``local``) or as Slurm jobs, with their options.

    Defaults from ``DRIPPER_{JOB}_RUN_ON`` and ``DRIPPER_{JOB}_SLURM`` (a JSON object), e.g.
    ``DRIPPER_PRETRAIN_RUN_ON=slurm``.
    """
    params = {}
    for job in jobs:
        title, options = _SLURM_JOBS[job]
        params[f"{job}_run_on"] = Param(
            env(f"DRIPPER_{job.upper()}_RUN_ON", "local"),
            type="string",
            enum=["local", "slurm"],
            title=f"{title} runs on",
            description="local: inside the Airflow task; slurm: submitted with sbatch, awaited in the "
            "triggerer (no worker slot held), cancelled when the task is cleared or killed.",
            section=SLURM,
        )
        params[f"{job}_slurm"] = Param(
            _json_env(f"DRIPPER_{job.upper()}_SLURM"),
            type="object",
            title=f"{title} Slurm options",
            description=f"{options} (used when it runs on slurm).",
            section=SLURM,
        )
    return params


def _json_env(name: str) -> dict[str, Any]:
    import json

    value = env(name)
    if not value:
        return {}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"{name} must be a JSON object: {error}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"{name} must be a JSON object, got {value!r}")
    return parsed


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
    """Which crawl, and which of its WARC files (the simplify stage's selection fields)."""
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
        **stage_params(SimplifyStageConfig, "warc_count", "warc_fraction", "seed", "warcs_per_shard"),
        "warcs_per_task": Param(
            2,
            type="integer",
            minimum=1,
            title="WARC files per simplify task",
            description="The simplify task is mapped over batches of this many files.",
            section=SELECTION,
        ),
    }


def extractor_params() -> dict[str, Param]:
    """One extractor spec (corpus_build): the extract config's field, proposing the registered labelers."""
    fields = ExtractStageConfig.form_fields(["extractor"])
    field = fields["extractor"]
    field["examples"] = labeler_names()  # built in and installed plugins' (no labeler imported)
    field["description"] = (
        f"Labelers: {', '.join(labeler_names())}, or module:factory. " + field["description"]
    )
    return _params(fields)


def extractors_params() -> dict[str, Param]:
    """The extractors to compare, as extractor specs (extractor_ablation; ``dripper.config.extractor``)."""
    return {
        "extractors": Param(
            list(dict.fromkeys([default_labeler(), "fineweb"])),
            type="array",
            items={"type": "string", "minLength": 1},
            minItems=1,
            uniqueItems=True,
            title="Extractors",
            description="One per line: a labeler name (cpu, trafilatura), a baseline as its corpus was made "
            "(fineweb: datatrove's Trafilatura(favour_precision=True) text; dclm: Resiliparse main-content text), "
            "or NAME=LABELER,key=value,… for a "
            "named spec with options, e.g. v11=vllm,model=/models/MinerU-HTML-v1.1 or "
            "v10=vllm,model=/models/MinerU-HTML,answer_format=json (also fallback=empty|none; output=text for "
            "plain-text documents like the baselines' instead of Markdown, e.g. plain=cpu,output=text), or JSON, a "
            'cascade included: {"name": "casc", "labeler": "cpu", "route": {"labeler": "vllm", "options": '
            '{"model": "/models/x"}, "share": 0.3}}. The name names the corpus folder and the report rows; '
            "checked before any WARC is read.",
            section=EXTRACTION,
        ),
    }


def refinement_params(tokenizer_required: bool = False) -> dict[str, Param]:
    """The datatrove refinement switches and the tokenizer (required where models train on the tokens)."""
    tokenize = TokenizeStageConfig.form_fields()
    if tokenizer_required:
        # No default when none is configured: the trigger form then asks for it.
        tokenizer = tokenize["tokenizer"]
        if tokenizer["default"] is None:
            del tokenizer["default"]
        tokenizer |= {"type": "string", "minLength": 1}
        tokenizer["description"] = tokenizer["description"].split(";")[0] + " (the models train on them)"
    return {**stage_params(RefineStageConfig), **_params(tokenize)}


def training_params() -> dict[str, Param]:
    """Pretraining a model on each corpus and scoring it (extractor_ablation)."""
    return {**stage_params(PretrainStageConfig), **stage_params(EvaluateStageConfig)}


def benchmark_data_param(**schema: Any) -> Param:
    """Labelled page files (the bundled sample's by default, ``DRIPPER_BENCHMARK_DATA``)."""
    default = ReportStageConfig.form_fields(["labelled_pages"])["report_labelled_pages"]["default"]
    return Param(default, type="array", items={"type": "string", "minLength": 1}, **schema)


def stage_params(config: type[StageConfig], *names: str, section: str | None = None) -> dict[str, Param]:
    """A stage config's form fields (all, or ``names``) as Params, in its section (or ``section``)."""
    fields = config.form_fields(names or None)
    if section:
        for field in fields.values():
            field["section"] = section
    return _params(fields)


def _params(fields: dict[str, dict[str, Any]]) -> dict[str, Param]:
    params = {}
    for name, field in fields.items():
        field = dict(field)
        params[name] = Param(field.pop("default"), **field) if "default" in field else Param(**field)
    return params


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
