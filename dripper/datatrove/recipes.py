"""The FineWeb-shaped first stage with this project's reader and extractor, and its accounting.

FineWeb's first stage (datatrove's ``examples/fineweb.py``) reads WARC files, filters URLs, extracts with
``Trafilatura(favour_precision=True)``, keeps English and applies the Gopher, C4 and FineWeb quality
filters before writing. :func:`fineweb_pipeline` is that list of steps with :class:`DripperWarcReader` and
:class:`DripperExtractor` in place of datatrove's reader and extractor, the filters configured as the
``refine`` stage configures them (:class:`dripper.refine.steps.RefineConfig`: offline language id, the
word tokenizer that reads Markdown words), ready for any datatrove executor::

    from datatrove.executor import SlurmPipelineExecutor
    from dripper.datatrove import fineweb_pipeline

    SlurmPipelineExecutor(
        pipeline=fineweb_pipeline("s3://my-bucket/warcs/", "s3://my-bucket/fineweb-dripper/", extractor="cpu"),
        tasks=1000, time="10:00:00", partition="cpu", logging_dir="s3://my-bucket/logs/fineweb-dripper",
    ).run()

:func:`pipeline_accounting` reads the executor's merged stats back: every WARC record read is a document
written or a drop counted under one step and one reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from datatrove.io import DataFolderLike
from datatrove.pipeline.base import PipelineStep

from dripper.datatrove.extractor import DripperExtractor
from dripper.datatrove.reader import DripperWarcReader, reader_accounting
from dripper.refine.language import QualityWordTokenizer  # exported by dripper.datatrove

__all__ = ["FINEWEB_FILTERS", "QualityWordTokenizer", "fineweb_pipeline", "pipeline_accounting"]

#: FineWeb's filters after extraction, in its order (the ``refine`` stage's step names).
FINEWEB_FILTERS = ("language", "gopher_repetition", "gopher_quality", "c4_quality", "fineweb_quality")


def fineweb_pipeline(
    warcs: DataFolderLike,
    output: DataFolderLike,
    extractor: Any = "cpu",
    *,
    paths_file: str | None = None,
    glob_pattern: str | None = "**/*.warc*",
    keep_truncated: bool = True,
    url_filter: bool = True,
    filters: Sequence[str] = FINEWEB_FILTERS,
    refine: Any = None,
    extractor_options: Mapping[str, Any] | None = None,
    exclusions: DataFolderLike | None = None,
) -> list[PipelineStep]:
    """The steps of a FineWeb-shaped first stage: read → URL filter → extract → filters → JSONL writer.

    Args:
        warcs: The folder holding the WARC files (local or ``s3://…``).
        output: Where the kept documents are written (``${rank}.jsonl.gz``).
        extractor: The extractor spec of :class:`DripperExtractor` (``cpu``, a cascade, ``trafilatura``).
        paths_file: As :class:`DripperWarcReader` takes it.
        glob_pattern: As :class:`DripperWarcReader` takes it.
        keep_truncated: As :class:`DripperWarcReader` takes it.
        url_filter: Run datatrove's ``URLFilter`` (its bundled block lists) first, as FineWeb does.
        filters: The filters after extraction, by the ``refine`` stage's step names, in order.
        refine: A :class:`~dripper.refine.steps.RefineConfig` (or its dict) for the filters' settings.
        extractor_options: Keyword options of :class:`DripperExtractor` (``output``, ``batch_size``,
            ``timeout``, ``sandbox``).
        exclusions: A folder where each filter writes the documents it drops (``{step}/${rank}.jsonl.gz``).
    """
    from datatrove.pipeline.writers.jsonl import JsonlWriter

    from dripper.refine.steps import RefineConfig, build_step, step_spec

    config = refine if isinstance(refine, RefineConfig) else RefineConfig.from_dict(refine)
    if config.text_format == "auto":  # the filters count words as the extractor writes them
        config = config.replace(text_format=dict(extractor_options or {}).get("output", "text"))
    for name in filters:
        if step_spec(name).kind not in ("filter", "formatter"):
            raise ValueError(f"{name!r} is not a per-document filter (dedup and tokenize run as own passes)")

    def excluded(step: str) -> Any:
        if exclusions is None:
            return None
        return JsonlWriter(exclusions, output_filename=f"{step}/${{rank}}.jsonl.gz")

    steps: list[PipelineStep] = [
        DripperWarcReader(warcs, paths_file, glob_pattern=glob_pattern, keep_truncated=keep_truncated)
    ]
    if url_filter:
        steps.append(OfflineURLFilter(exclusion_writer=excluded("url")))
    steps.append(DripperExtractor(extractor, **dict(extractor_options or {})))
    steps.extend(build_step(name, config, excluded(name)) for name in filters)
    steps.append(JsonlWriter(output))
    return steps


def OfflineURLFilter(**options: Any) -> PipelineStep:  # noqa: N802 - a step factory, named as the step
    """datatrove's ``URLFilter`` reading domains with tldextract's bundled public-suffix snapshot: the
    default ``TLDExtract()`` fetches the list from the network on first use in every task."""
    from datatrove.pipeline.filters import URLFilter
    from tldextract import TLDExtract

    step = URLFilter(**options)
    step.tldextractor = TLDExtract(suffix_list_urls=())
    return step


def pipeline_accounting(stats: Sequence[Mapping[str, Any]] | str) -> dict[str, Any]:
    """Where every WARC record of a run went, from datatrove's merged stats (``{logging_dir}/stats.json``,
    or its parsed list of per-step entries).

    Returns ``{"records", "written", "dropped": {step: {reason: n}}, "balanced"}``: ``records`` counts
    records and unreadable regions read, ``written`` the documents the writer wrote, and ``balanced`` says
    whether ``records == written + Σ dropped``.
    """
    if isinstance(stats, str):
        with open(stats, encoding="utf-8") as f:
            stats = json.load(f)
    records = written = 0
    dropped: dict[str, dict[str, int]] = {}
    for entry in stats:
        name = str(entry.get("name", ""))
        values = entry.get("stats", {})
        if "Dripper WARC" in name:
            counts = reader_accounting(values)
            records += counts["records"] + counts["regions"]
            dropped[name] = _reasons(values, "dropped:")
        elif "Dripper" in name:
            dropped[name] = _reasons(values, "dropped:")
        elif "WRITER" in name.upper() or "Jsonl" in name:
            written += _total(values.get("total", 0))
        elif _total(values.get("dropped", 0)):
            reasons = _reasons(values, "dropped_")
            unreasoned = _total(values["dropped"]) - sum(reasons.values())
            if unreasoned:
                reasons["(no reason)"] = unreasoned
            dropped[name] = reasons
    total_dropped = sum(sum(reasons.values()) for reasons in dropped.values())
    return {
        "records": records,
        "written": written,
        "dropped": {step: reasons for step, reasons in dropped.items() if reasons},
        "balanced": records == written + total_dropped,
    }


def _total(value: Any) -> int:
    return int(value.get("total", 0) if isinstance(value, Mapping) else value)


def _reasons(values: Mapping[str, Any], prefix: str) -> dict[str, int]:
    return {key.removeprefix(prefix): _total(v) for key, v in values.items() if key.startswith(prefix)}
