"""The refine stage's config: which datatrove steps, in how many tasks, on how many processes."""

from __future__ import annotations

from typing import Any, Literal, get_args

from dripper.config.settings import StageConfig, setting

#: A refinement step, in pipeline order (``dripper.refine.steps.STEP_ORDER`` is these and ``tokenize``,
#: its own stage here).
RefineStep = Literal[
    "url_dedup",
    "language",
    "gopher_repetition",
    "gopher_quality",
    "c4_quality",
    "fineweb_quality",
    "minhash",
    "pii",
]
REFINE_STEPS: tuple[str, ...] = get_args(RefineStep)
DEFAULT_REFINE_STEPS = REFINE_STEPS[1:]  # all but url_dedup


class RefineStageConfig(StageConfig):
    """``extracted/`` → ``corpus/`` with datatrove filters and dedup.

    Attributes:
        steps: Steps to run (always in pipeline order).
        tasks: datatrove tasks per pass (the extracted shards are split among them).
        workers: Tasks run at once (``-1``: one per CPU; ``1``: in the calling process).
        options: More ``RefineConfig`` fields (``{"language": {"languages": ["en"]}}``).
    """

    stage = "refine"
    form_prefix = "refine_"
    form_section = "Refinement"

    steps: list[RefineStep] = setting(
        list(DEFAULT_REFINE_STEPS),
        "Filters and dedup to run (always in pipeline order): " + ", ".join(REFINE_STEPS),
        title="Refinement steps",
    )
    tasks: int = setting(4, "datatrove tasks per pass (the extracted shards are split among them)", ge=1)
    workers: int = setting(
        -1,
        "datatrove tasks run at once (-1: one per CPU, 1: in the task's process)",
        title="Refinement processes",
        ge=-1,
    )
    options: dict[str, Any] = setting(
        {},
        'More RefineConfig fields, e.g. {"language": {"languages": ["en"]}}',
        title="Refinement config",
    )
