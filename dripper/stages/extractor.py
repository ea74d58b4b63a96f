"""One extractor spec in the run layout: ``{root}/extractors/{name}/`` made by the spec recorded there.

:func:`extract_with_spec` is what ``dripper run extract`` and the Airflow extract task run: it records
the spec (:func:`record_extractor`) and runs the plain extract stage
(:func:`dripper.stages.extract.extract_stage`) or, for a spec with a ``route``, the cascade's two steps
(:func:`dripper.stages.cascade.extract_cascade`).
"""

from __future__ import annotations

import json
from typing import Any

from dripper.config.extract import ExtractStageConfig
from dripper.io.storage import filesystem_for, join_path
from dripper.stages.cascade import extract_cascade
from dripper.stages.extract import ExtractStageOptions, extract_stage
from dripper.stages.runner import StageReport

__all__ = ["EXTRACTOR_FILE", "extract_with_spec", "record_extractor"]

#: The spec an extractor folder's shards are made with, written in that folder.
EXTRACTOR_FILE = "_extractor.json"


def record_extractor(
    root: str, spec: Any, storage_options: dict[str, Any] | None = None, force: bool = False
) -> dict[str, Any]:
    """Write ``{root}/_extractor.json`` (the spec this root's shards are made with), or check it.

    A root already holding another spec is refused unless ``force``: finished shards are skipped on a
    rerun, so two specs under one name would silently mix their pages.

    Raises:
        ValueError: the root holds shards of another spec (the message names both and the way out).
    """
    from dripper.config.extractor import parse_extractor

    spec = parse_extractor(spec)
    wanted = spec.to_dict()
    fs, base = filesystem_for(str(root), storage_options)
    path = f"{base.rstrip('/')}/{EXTRACTOR_FILE}"
    try:
        with fs.open(path, "rb") as f:
            existing = json.loads(f.read())
    except FileNotFoundError:
        existing = None
    if existing is not None and _made_alike(existing, wanted):
        return existing  # the same output (a spec written before a field was added, or another placement)
    if existing is not None and existing != wanted and not force:
        raise ValueError(
            f"{join_path(str(root), EXTRACTOR_FILE)}: this folder holds extractor {existing.get('name')!r} made "
            f"with {json.dumps(existing, sort_keys=True)}, not {json.dumps(wanted, sort_keys=True)}; give the "
            "new spec another name (its folder is extractors/{name}), or recompute with force"
        )
    if existing != wanted:
        fs.makedirs(base, exist_ok=True)
        with fs.open(path, "wb") as f:
            f.write((json.dumps(wanted, indent=1, sort_keys=True) + "\n").encode())
    return wanted


def _made_alike(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether two recorded specs make the same pages: their fields with defaults filled in, less where the
    tasks run (``gpu``)."""
    from dripper.config.extractor import ExtractorSpecError, parse_extractor

    try:
        existing = parse_extractor(existing).to_dict()
    except ExtractorSpecError:
        return False
    placement = {"gpu"}
    return {k: v for k, v in existing.items() if k not in placement} == {
        k: v for k, v in wanted.items() if k not in placement
    }


def extract_with_spec(
    input_root: str,
    spec: Any,
    output_root: str | None = None,
    *,
    batch_size: int = ExtractStageConfig.default("batch_size"),
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    **stage_options: Any,
) -> StageReport:
    """The extract stage for one extractor spec, in the run layout: ``{input_root}/extractors/{name}/``
    unless ``output_root`` is given, with the spec recorded there (:func:`record_extractor` refuses a folder
    holding another spec unless ``force``). What ``dripper run extract`` and the Airflow extract task run.
    A cascade spec (with ``route``) runs in two steps, :func:`dripper.stages.cascade.extract_cascade`.

    Args:
        input_root: The run root holding ``simplified/``.
        spec: An extractor spec: an :class:`~dripper.config.extractor.ExtractorSpec` as the front end
            parsed and checked it, or a dict or shorthand (parsed and checked here).
        output_root: The extractor's folder (default: from the run layout).
        batch_size: Pages per labeler call.
        storage_options: fsspec options of both roots.
        force: Recompute finished shards (and replace a recorded spec).
        **stage_options: More :func:`extract_stage` keywords (``workers``, ``scheduler``, ``progress``,
            ``raise_on_failure``).
    """
    from dripper.config.extractor import ExtractorSpec, check_labeler_options, parse_extractor
    from dripper.layout import RunLayout

    if not isinstance(spec, ExtractorSpec):  # a typed spec was parsed and checked where the run started
        spec = parse_extractor(spec)
        check_labeler_options([spec])
    output_root = output_root or RunLayout(str(input_root)).extractor(spec.name).root
    record_extractor(output_root, spec, storage_options, force=force)
    if spec.route is not None:
        return extract_cascade(
            input_root,
            output_root,
            spec,
            batch_size=batch_size,
            storage_options=storage_options,
            force=force,
            **stage_options,
        )
    return extract_stage(
        input_root,
        output_root,
        labeler=spec.labeler,
        labeler_options=spec.options or None,
        options=ExtractStageOptions(
            batch_size=batch_size, fallback=spec.fallback, fallback_on_empty=spec.fallback_on_empty
        ),
        storage_options=storage_options,
        force=force,
        task_resources={"GPU": 1} if spec.needs_gpu else None,
        **stage_options,
    )
