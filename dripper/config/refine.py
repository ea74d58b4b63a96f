"""The refine stage's config: which datatrove steps, in how many tasks, on how many processes."""

from __future__ import annotations

import json
import re
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dripper.config.settings import StageConfig, setting
from dripper.hints import did_you_mean

#: A refinement step, in pipeline order (``dripper.refine.steps.STEP_ORDER`` is these and ``tokenize``,
#: its own stage here).
RefineStep = Literal[
    "url_dedup",
    "language",
    "gopher_repetition",
    "gopher_quality",
    "c4_quality",
    "fineweb_quality",
    "decontaminate",
    "minhash",
    "pii",
]
REFINE_STEPS: tuple[str, ...] = get_args(RefineStep)
#: All but url_dedup and decontaminate (which needs a benchmark suite: on by default in extractor_ablation).
DEFAULT_REFINE_STEPS = tuple(step for step in REFINE_STEPS if step not in ("url_dedup", "decontaminate"))
#: Where a user's step may go: after the reader (``input``) or after any step (run or not: its place).
CUSTOM_STEP_PLACES: tuple[str, ...] = ("input", *REFINE_STEPS)
_FACTORY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$")
_STEP_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")


class CustomStep(BaseModel):
    """A user's datatrove step in the refinement: any ``PipelineStep`` built by ``factory(**options)``.

    Attributes:
        factory: ``package.module:callable`` returning a datatrove ``PipelineStep`` (a class or a function).
        options: Its keyword arguments.
        after: The step it follows (``input``: right after the reader); where that step is not run, the
            place it would have had.
        name: Its name in the funnel and the exclusion folder (default: the callable's name, snake_case).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    factory: str = Field(description="package.module:callable returning a datatrove PipelineStep")
    options: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the factory")
    after: str = Field("fineweb_quality", description="The step it follows: " + ", ".join(CUSTOM_STEP_PLACES))
    name: str | None = Field(None, description="Its name in the funnel (default: from the factory)")

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("factory") and not data.get("name"):
            attribute = str(data["factory"]).rpartition(":")[2].rpartition(".")[2]
            data = {**data, "name": re.sub(r"(?<!^)(?=[A-Z])", "_", attribute).lower()[:48]}
        return data

    @model_validator(mode="after")
    def _check(self) -> CustomStep:
        if not _FACTORY.match(self.factory):
            raise ValueError(
                f"factory {self.factory!r}: give package.module:callable (e.g. my_pkg.steps:MyFilter)"
            )
        if self.after not in CUSTOM_STEP_PLACES:
            raise ValueError(
                f"after {self.after!r}: not a refinement step{did_you_mean(self.after, CUSTOM_STEP_PLACES)} "
                f"(choose one of {', '.join(CUSTOM_STEP_PLACES)})"
            )
        if not _STEP_NAME.match(self.name or "") or self.name in (*CUSTOM_STEP_PLACES, "tokenize"):
            raise ValueError(
                f"name {self.name!r}: a lower-case identifier that names no built-in step (e.g. my_filter)"
            )
        return self


def check_custom_steps(steps: Any) -> list[CustomStep]:
    """User steps from their JSON-like entries (a JSON string each from a command line), checked for shape
    and unique names; raises ``ValueError`` naming the entry."""
    parsed = []
    for index, entry in enumerate(steps or []):
        if isinstance(entry, str):
            try:
                entry = json.loads(entry)
            except json.JSONDecodeError as error:
                raise ValueError(f"entry {index}: not JSON ({error})") from None
        try:
            parsed.append(entry if isinstance(entry, CustomStep) else CustomStep.model_validate(entry))
        except ValidationError as error:
            problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in error.errors())
            raise ValueError(f"entry {index}: {problems}") from None
    names = [step.name for step in parsed]
    if len(set(names)) != len(names):
        raise ValueError(f"two steps share a name ({names}); give each its own name")
    return parsed


class RefineStageConfig(StageConfig):
    """``extracted/`` → ``corpus/`` with datatrove filters and dedup.

    Attributes:
        steps: Steps to run (always in pipeline order).
        tasks: datatrove tasks per pass (the extracted shards are split among them).
        workers: Tasks run at once (``-1``: one per CPU; ``1``: in the calling process).
        options: More ``RefineConfig`` fields (``{"language": {"languages": ["en"]}}``).
        decontaminate: Adds (true) or takes out (false) the ``decontaminate`` step (empty: on in
            ``extractor_ablation``, off elsewhere).
        decont_suite: The benchmark suite the ``decontaminate`` step removes (empty: the evaluation suite in
            ``extractor_ablation``, else ``local``).
        decont_ngram: Its n-gram length (13, GPT-3's).
        decont_mode: ``documents`` (drop a document sharing an n-gram) or ``spans`` (drop its lines that do).
        decont_fixtures: A fixture manifest serving the suite's data offline (empty: the evaluation's).
        custom_steps: Your own datatrove steps (``{"factory": "pkg.mod:callable", "options": {...},
            "after": "language"}``), checked when the config is made.
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
        env="DRIPPER_REFINE_WORKERS",
        ge=-1,
    )
    options: dict[str, Any] = setting(
        {},
        'More RefineConfig fields, e.g. {"language": {"languages": ["en"]}}',
        title="Refinement config",
    )
    decontaminate: bool | None = setting(
        None,
        "Remove benchmark items from the corpus: documents sharing an n-gram with the evaluation suite's own "
        "items (adds the decontaminate step; empty: on in extractor_ablation, off in corpus_build)",
        title="Decontaminate",
    )
    decont_suite: str | None = setting(
        None,
        "Benchmark suite whose items the decontaminate step removes from the corpus (local, paper13 or a suite "
        "file; empty: the evaluation suite in extractor_ablation, else local)",
        title="Decontaminate against",
    )
    decont_ngram: int = setting(
        13,
        "Decontamination n-gram length in words (13: GPT-3's choice)",
        title="Decontamination n-gram",
        ge=5,
    )
    decont_mode: Literal["documents", "spans"] = setting(
        "documents",
        "documents: drop every document sharing an n-gram with a benchmark item; spans: drop only its lines "
        "that do (a document left empty is dropped)",
        title="Decontamination removes",
    )
    decont_fixtures: str | None = setting(
        None,
        "Fixture manifest serving the suite's data offline (empty: the evaluation's, else the Hugging Face cache)",
        title="Decontamination fixtures",
    )
    custom_steps: list[dict[str, Any]] = setting(
        [],
        'Your own datatrove steps, each {"factory": "pkg.module:callable", "options": {...}, "after": '
        '"language"} (any PipelineStep: a classifier, a filter); placed after the named step, counted in the '
        "funnel",
        title="Your refinement steps",
    )

    @model_validator(mode="before")
    @classmethod
    def _decontaminate_step(cls, data: Any) -> Any:
        """``decontaminate`` true adds the step to ``steps``, false takes it out (empty: ``steps`` decides)."""
        if isinstance(data, dict) and data.get("decontaminate") not in (None, ""):
            value = data["decontaminate"]
            if isinstance(value, str):  # a command line's or a template's text
                value = value.strip().lower() in ("true", "1", "yes", "on")
            steps = [s for s in (data.get("steps") or DEFAULT_REFINE_STEPS) if s != "decontaminate"]
            if value:
                steps.append("decontaminate")
            data = {**data, "decontaminate": bool(value), "steps": steps}
        return data

    @field_validator("custom_steps", mode="before")
    @classmethod
    def _custom_steps(cls, value: Any) -> Any:
        return [step.model_dump() for step in check_custom_steps(value)]

    def refine_options(self) -> dict[str, Any]:
        """The ``RefineConfig`` fields of the decontamination and the user's steps, over ``options``."""
        options = dict(self.options)
        decont = dict(options.get("decontaminate") or {})
        decont.update(n=self.decont_ngram, mode=self.decont_mode)
        if self.decont_suite:
            decont["suite"] = self.decont_suite
        if self.decont_fixtures:
            decont["fixtures"] = self.decont_fixtures
        options["decontaminate"] = decont
        if self.custom_steps:
            options["custom_steps"] = [*(options.get("custom_steps") or []), *self.custom_steps]
        return options
