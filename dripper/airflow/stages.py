"""One thin operator per stage: templated paths and options in, a stage function call, a small dict out.
The DAGs import them from here; they live in :mod:`dripper.airflow.snapshots` (crawls and the WARC selection),
:mod:`dripper.airflow.corpus` (simplify → extract → refine → tokenize → publish) and :mod:`dripper.airflow.jobs` (long
jobs in processes of their own), on :mod:`dripper.airflow.base`.

What is not Airflow's (arguments, checks, folders, result dicts) is :mod:`dripper.runs.corpus`,
:mod:`dripper.stages.selection` and :mod:`dripper.runs.jobs`, which ``dripper run`` shares.
Data moves between tasks as files under the storage root (layout: :mod:`dripper.airflow.hooks`); XCom carries
paths, counts and summaries only. Every operator is idempotent: the stage functions skip finished shards
(and datatrove tasks), and the small JSON files written here are rewritten with the same content on a
rerun. Heavy libraries (pyarrow, Dask, datatrove, labelers) are imported when a task runs, never when a
DAG file is parsed.

============================  ==============================================================================
operator                      calls
============================  ==============================================================================
FindNewCrawlsOperator         ``list_crawls`` + ``dripper.stages.selection.new_crawls``
WriteCrawlManifestOperator    ``read_warc_paths``; writes the crawl's manifest, emits the manifest asset
RecordKnownCrawlsOperator     ``record_known_crawls`` into the known-crawls state file
SelectWarcsOperator           ``dripper.stages.selection.plan_selection``; writes ``_selection.json``
SimplifyBatchOperator         ``dripper.runs.corpus.simplify_batch`` (``simplify_shards`` on Dask)
RecordSimplifyOperator        ``record_simplify_batches`` once every batch is done
ExtractOperator               ``ExtractStageConfig`` + ``run_extractor``
RefineOperator                ``run_refine`` with ``refine_config`` (no tokenize), ``refine_result``
SlurmRefineOperator           the same through datatrove's ``SlurmPipelineExecutor``, awaited in the triggerer
TokenizeOperator              ``tokenize_extractor`` (``tokenize_corpus``: the refine step's writer)
PublishCorpusOperator         ``build_summary`` into ``_build_summary.json``, emits the corpus asset
ModuleJobOperator             ``python -m MODULE …`` in a process of its own (long jobs: training, evaluation)
PretrainOperator              ``python -m dripper.pretrain train`` (``torchrun`` on GPUs, or an ``sbatch`` job with
                              ``executor="slurm"``: :mod:`dripper.airflow.slurm`) and ``… export``
ExtractionBenchmarkOperator   ``python -m dripper.eval.extraction``; stores the table under the storage root
EvaluateOperator              ``python -m dripper.eval.lm_suite`` on each exported checkpoint of a model
CheckSuiteOperator            ``python -m dripper.eval.lm_suite --check``: the suite's benchmark data is at hand
AblationReportOperator        ``python -m dripper.eval.report`` over the runs of an ablation
============================  ==============================================================================
"""

from __future__ import annotations

from dripper.airflow.base import (
    BUILD_SUMMARY_FILE,
    SELECTION_FILE,
    SELECTION_XCOM_KEY,
    spawn_without_airflow_main,
    stage_report_dict,
)
from dripper.airflow.corpus import (
    ExtractOperator,
    PublishCorpusOperator,
    RecordSimplifyOperator,
    RefineOperator,
    SimplifyBatchOperator,
    SlurmRefineOperator,
    TokenizeOperator,
)
from dripper.airflow.jobs import (
    AblationReportOperator,
    CheckSuiteOperator,
    EvaluateOperator,
    ExtractionBenchmarkOperator,
    ModuleJobOperator,
    PretrainOperator,
)
from dripper.airflow.slurm import SlurmJobTrigger
from dripper.airflow.snapshots import (
    FindNewCrawlsOperator,
    RecordKnownCrawlsOperator,
    SelectWarcsOperator,
    WriteCrawlManifestOperator,
)

__all__ = [
    "BUILD_SUMMARY_FILE",
    "SELECTION_FILE",
    "SELECTION_XCOM_KEY",
    "AblationReportOperator",
    "CheckSuiteOperator",
    "EvaluateOperator",
    "ExtractOperator",
    "ExtractionBenchmarkOperator",
    "FindNewCrawlsOperator",
    "ModuleJobOperator",
    "PretrainOperator",
    "PublishCorpusOperator",
    "RecordKnownCrawlsOperator",
    "RecordSimplifyOperator",
    "RefineOperator",
    "SelectWarcsOperator",
    "SimplifyBatchOperator",
    "SlurmJobTrigger",
    "SlurmRefineOperator",
    "TokenizeOperator",
    "WriteCrawlManifestOperator",
    "spawn_without_airflow_main",
    "stage_report_dict",
]
