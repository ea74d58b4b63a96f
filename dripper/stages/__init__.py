"""Stage functions: each reads shards (or WARC files) under a run root and writes its own shards.

Every stage follows the contract of :mod:`dripper.stages.shards`. Submodules import their heavy
dependencies (pyarrow, Dask, labelers) only when used; the names below load their module on first access.

- :func:`simplify_stage`: WARC files → ``{root}/simplified/`` (Dask ``LocalCluster`` or a scheduler);
- :func:`extract_stage`: ``{root}/simplified/`` → ``{root}/extracted/`` with the extractor spec of an
  :class:`~dripper.config.extract.ExtractStageConfig`; :func:`run_extractor` places it in the run layout
  (``{root}/extractors/{name}/``) and runs cascades;
- :func:`one_pass_shards`: WARC files → ``{extractor folder}/extracted/`` in one pass, no ``simplified/``
  (:func:`run_extractor_one_pass` places it in the run layout);
- :func:`run_shard_tasks`, :func:`run_streaming_shard`: how shards are run and published;
- :mod:`.selection`: crawl state and WARC selection plans, imported from its module.

What ``dripper run`` and the Airflow operators share above the stages is :mod:`dripper.runs`.
"""

from __future__ import annotations

from dripper.lazy import lazy_exports

_EXPORTS = {
    "ShardAccountingError": "shards",
    "ShardResult": "shards",
    "ShardStats": "shards",
    "ShardWriter": "shards",
    "done_shard_paths": "shards",
    "list_done_shards": "shards",
    "run_shard": "shards",
    "summarize_stage": "shards",
    "write_run_summary": "shards",
    "STAGE_ORDER": "runner",
    "ShardInputsChanged": "shards",
    "ShardTask": "runner",
    "StageError": "runner",
    "StageReport": "runner",
    "record_stage_run": "runner",
    "run_shard_tasks": "runner",
    "run_streaming_shard": "runner",
    "SIMPLIFIED_STAGE": "simplify",
    "ShardFormat": "simplify",
    "plan_simplify_shards": "simplify",
    "resolve_warc_inputs": "simplify",
    "simplified_schema": "simplify",
    "simplify_shard": "simplify",
    "simplify_shards": "simplify",
    "simplify_stage": "simplify",
    "EXTRACTED_STAGE": "extract",
    "build_stage_labeler": "extract",
    "extract_shard": "extract",
    "extract_shards": "extract",
    "extract_stage": "extract",
    "extracted_schema": "extract",
    "read_simplified_items": "extract",
    "EXTRACTOR_FILE": "extractor",
    "run_extractor": "extractor",
    "run_extractor_one_pass": "extractor",
    "chooses_one_pass": "one_pass",
    "one_pass_shard": "one_pass",
    "one_pass_shards": "one_pass",
    "record_extractor": "extractor",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
