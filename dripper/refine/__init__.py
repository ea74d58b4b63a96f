"""Corpus refinement on datatrove: extracted shards → filtered, deduplicated corpus → Megatron tokens.

The same filtering runs whatever extractor made the shards, so corpora of different extractors compare
fairly. Entry point: :func:`run_refine` (``dripper.refine.pipeline``), configured by
:class:`RefineConfig`, whose step names come from :data:`STEP_ORDER` (``dripper.refine.steps``).

Importing this package imports neither datatrove nor the tokenizers: the names below load their module on
first access.
"""

from __future__ import annotations

from dripper.lazy import lazy_exports

_EXPORTS = {
    "DEFAULT_STEPS": "steps",
    "STEP_ORDER": "steps",
    "STEP_REGISTRY": "steps",
    "RefineConfig": "steps",
    "StepSpec": "steps",
    "C4QualityConfig": "steps",
    "DecontaminateConfig": "steps",
    "FineWebQualityConfig": "steps",
    "GopherQualityConfig": "steps",
    "GopherRepetitionConfig": "steps",
    "LanguageConfig": "steps",
    "MinhashConfig": "steps",
    "PiiConfig": "steps",
    "TokenizeConfig": "steps",
    "UrlDedupConfig": "steps",
    "normalize_url": "steps",
    "step_spec": "steps",
    "RefineError": "pipeline",
    "run_refine": "pipeline",
    "summarize_refine": "summary",
    "read_token_documents": "tokenize",
    "write_tokens_summary": "tokenize",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
