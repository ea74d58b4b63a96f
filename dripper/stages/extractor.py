"""One extractor spec in the run layout: ``{root}/extractors/{name}/`` made by the spec recorded there.

:func:`run_extractor` is what ``dripper run extract`` and the Airflow extract task run: it checks the
config's spec, records it (:func:`record_extractor`) and runs the extract stage's shard tasks
(:func:`dripper.stages.extract.extract_shards`) or, for a spec with a ``route``, the cascade's two steps
(:func:`dripper.stages.cascade.extract_cascade`). :func:`run_extractor_one_pass` is the same from WARC files
in one pass (:mod:`dripper.stages.one_pass`), with no ``simplified/`` folder.
"""

from __future__ import annotations

import json
from typing import Any

from dripper.config.extract import ExtractStageConfig
from dripper.io.storage import filesystem_for, join_path
from dripper.stages.cascade import extract_cascade
from dripper.stages.extract import extract_shards
from dripper.stages.runner import StageReport

__all__ = ["EXTRACTOR_FILE", "record_extractor", "run_extractor", "run_extractor_one_pass"]

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
        # The same shards (a spec written before a field was added, or another placement). The corpus
        # documents' text format is read from here by the refine stage: a new one replaces the old.
        if parse_extractor(existing).output == spec.output:
            return existing
        existing = None
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
    """Whether two recorded specs make the same shards: their fields with defaults filled in, less where the
    tasks run (``gpu``) and how the refine stage reads the shards (``output``)."""
    from dripper.config.extractor import ExtractorSpecError, parse_extractor

    try:
        existing = parse_extractor(existing).to_dict()
    except ExtractorSpecError:
        return False
    placement = {"gpu", "output"}
    return {k: v for k, v in existing.items() if k not in placement} == {
        k: v for k, v in wanted.items() if k not in placement
    }


def run_extractor(
    input_root: str,
    config: ExtractStageConfig | None = None,
    output_root: str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    **run: Any,
) -> StageReport:
    """The extract stage for ``config.extractor`` in the run layout: ``{input_root}/extractors/{name}/``
    unless ``output_root`` is given, with the spec recorded there (:func:`record_extractor` refuses a folder
    holding another spec unless ``force``). What ``dripper run extract`` and the Airflow extract task run.
    A cascade spec (with ``route``) runs in two steps, :func:`dripper.stages.cascade.extract_cascade`.

    The spec was parsed where the config was made; here its labelers are checked, once (they exist and
    take their options; nothing is built), and the typed spec goes down to the shard tasks.

    Args:
        input_root: The run root holding ``simplified/``.
        config: The extract stage's config (the extractor spec, ``batch_size``, ``workers``).
        output_root: The extractor's folder (default: from the run layout).
        storage_options: fsspec options of both roots.
        force: Recompute finished shards (and replace a recorded spec).
        **run: More :func:`~dripper.stages.extract.extract_shards` keywords (``scheduler``, ``progress``,
            ``raise_on_failure``).
    """
    from dripper.config.extractor import check_labeler_options
    from dripper.layout import RunLayout

    config = config or ExtractStageConfig()
    spec = config.extractor
    check_labeler_options([spec])
    output_root = output_root or RunLayout(str(input_root)).extractor(spec.name).root
    record_extractor(output_root, spec, storage_options, force=force)
    if spec.route is not None:
        return extract_cascade(
            input_root, output_root, config, storage_options=storage_options, force=force, **run
        )
    return extract_shards(
        input_root, output_root, config, storage_options=storage_options, force=force, **run
    )


def run_extractor_one_pass(
    root: str,
    shards: Any,
    config: ExtractStageConfig | None = None,
    simplify_config: Any = None,
    output_root: str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    **run: Any,
) -> StageReport:
    """The extract stage for ``config.extractor`` straight from WARC files, in one pass, in the run layout:
    ``{root}/extractors/{name}/`` unless ``output_root`` is given, the spec recorded there as
    :func:`run_extractor` records it. What ``dripper run extract --input WARCS`` and the Airflow extract task
    run where :meth:`~dripper.config.extract.ExtractStageConfig.runs_one_pass` says so.

    Args:
        root: The run root.
        shards: The planned shards, ``(shard index, WARC files)`` (the simplify stage's plan of a selection).
        config: The extract stage's config.
        simplify_config: How the WARC files are read (page limits, ``keep_truncated``).
        output_root: The extractor's folder (default: from the run layout).
        storage_options: fsspec options of the run root.
        force: Recompute finished shards (and replace a recorded spec).
        **run: More :func:`~dripper.stages.one_pass.one_pass_shards` keywords (``scheduler``,
            ``input_storage_options``, ``progress``, ``raise_on_failure``).
    """
    from dripper.config.extractor import check_labeler_options
    from dripper.layout import RunLayout
    from dripper.stages.one_pass import one_pass_shards

    config = config or ExtractStageConfig()
    spec = config.extractor
    check_labeler_options([spec])
    output_root = output_root or RunLayout(str(root)).extractor(spec.name).root
    record_extractor(output_root, spec, storage_options, force=force)
    return one_pass_shards(
        output_root,
        list(shards),
        config,
        simplify_config,
        storage_options=storage_options,
        force=force,
        **run,
    )
