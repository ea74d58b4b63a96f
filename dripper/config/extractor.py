"""Extractor specs: a named labeler with its options and fallback, the unit an ablation compares.

One spec format is read by ``dripper extract --extractor``, ``dripper run extract --extractor``, the
``corpus_build`` and ``extractor_ablation`` forms and ``python -m dripper.eval.extraction --extractor-spec``
(``--labeler``/``--labeler-option`` build one from its fields, :func:`labeler_spec`)::

    cpu                                               # shorthand: the name is the labeler
    qwen=vllm,model=/models/MinerU-HTML,answer_format=json
    {"name": "v11", "labeler": "vllm", "options": {"model": "/models/v1.1"}, "fallback": "trafilatura"}

or a YAML/JSON file holding a list of such entries (``extractors: [...]`` or a bare list). A *cascade*
sends the pages its labeler is least sure of to a second labeler (:class:`RouteSpec`)::

    {"name": "casc", "labeler": "cpu", "route": {"labeler": "vllm", "options": {"model": "/m"}, "share": 0.3}}

The name is unique within a run: it names the extractor's folder (``extractors/{name}/``) and its rows in
the report. Structure is checked here (no heavy import; DAG files may import this module); what a labeler
takes is checked by :func:`check_labeler_options` against the labeler's class, which declares it (its
signature, ``required_options``, ``check_options``; ``is_lm`` and ``needs_gpu`` say what it runs on), importing
that labeler's module only (in a task or a CLI, not at DAG parse time). Every error names the extractor and
the field.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dripper.config.settings import parse_value
from dripper.hints import did_you_mean

__all__ = [
    "DEFAULT_FALLBACK",
    "FALLBACKS",
    "OUTPUTS",
    "default_fallback",
    "default_output",
    "labeler_is_lm",
    "labeler_spec",
    "ExtractorSpec",
    "ExtractorSpecError",
    "RouteSpec",
    "check_labeler_options",
    "load_extractor_file",
    "parse_extractor",
    "parse_extractors",
]

#: The extractor for pages the labeler cannot label.
DEFAULT_FALLBACK = "trafilatura"
#: The fallbacks a spec may name (``dripper.fallback`` registers one implementation each).
FALLBACKS = ("trafilatura", "trafilatura_fast", "empty")
#: What a corpus document's text is: the main content as Markdown (headings, lists, tables), or the same
#: content as plain text (the markup stripped, paragraphs kept), what datatrove's and Resiliparse's
#: extractors write and stock quality filters expect.
OUTPUTS = ("markdown", "text")
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
LABELER_PATTERN = r"^[A-Za-z0-9_.]+(:[A-Za-z0-9_.]+)?$"


class ExtractorSpecError(ValueError):
    """An extractor spec that cannot run; the message names the extractor and the field."""


def _labeler_needs_gpu(labeler: str, options: Mapping[str, Any], gpu: bool | None) -> bool:
    """``gpu`` where given, else what the labeler's class says for these options (``False`` for a labeler
    that cannot be imported here: an import path that exists on the workers only)."""
    if gpu is not None:
        return gpu
    factory = _labeler_class(labeler)
    needs_gpu = getattr(factory, "needs_gpu", None)
    return bool(needs_gpu(options)) if callable(needs_gpu) else False


def labeler_is_lm(labeler: str) -> bool:
    """Whether the labeler is a language model: its class says so (``is_lm``; imports that labeler's module)."""
    return bool(getattr(_labeler_class(labeler), "is_lm", False))


def _labeler_class(labeler: str) -> Any:
    """The labeler's class (or factory), imported by the registry (that labeler's module only), or ``None``."""
    from dripper.config.labelers import labeler_factory

    try:
        return labeler_factory(labeler)
    except KeyError:
        return None


class RouteSpec(BaseModel):
    """The second labeler of a cascade and which pages it gets.

    The extractor's own labeler labels every page; the pages it is least sure of (lowest routing score:
    ``Labels.route_score``, else ``Labels.page_confidence``; pages it declines first) go to this labeler.
    Exactly one of ``share`` and ``below`` says which:

    - ``share``: a budget, the least sure ``share`` of the pages the first labeler labelled, counted over
      one shard in the extract stage and over the stream of one :class:`~dripper.pipeline.Extractor`
      (``dripper extract``: each batch routes what keeps the routed count at ``round(share × pages so
      far)``);
    - ``below``: a threshold, every page whose score is below it (and every declined page).

    A page this labeler fails on keeps the first labeler's result (its labels, or the fallback's output
    for a declined page): nothing is labelled twice by the LM and nothing is lost.

    Attributes:
        labeler: A registered labeler or ``module:factory`` (``vllm``, ``openai``, ``torch``; ``oracle`` or
            ``trafilatura`` to measure).
        options: Its keyword options.
        share: Budget: the share of pages routed, in (0, 1].
        below: Threshold: pages scored below it are routed, in [0, 1].
        gpu: Whether the routed step needs a GPU worker (``None``: by the labeler).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    labeler: str = Field(pattern=LABELER_PATTERN, description="Registered labeler or module:factory")
    options: dict[str, Any] = Field(default_factory=dict, description="The labeler's keyword options")
    share: float | None = Field(None, gt=0, le=1, description="Route the least sure share of the pages")
    below: float | None = Field(None, ge=0, le=1, description="Route the pages scored below this")
    gpu: bool | None = Field(None, description="The routed step needs a GPU worker (empty: by the labeler)")

    @model_validator(mode="after")
    def _one_rule(self) -> RouteSpec:
        if (self.share is None) == (self.below is None):
            raise ValueError(
                "give exactly one of share (the least sure share of the pages, e.g. 0.3) and below "
                f"(a routing score threshold, e.g. 0.9); got {'both' if self.share is not None else 'neither'}"
            )
        return self

    @property
    def needs_gpu(self) -> bool:
        return _labeler_needs_gpu(self.labeler, self.options, self.gpu)

    def describe(self) -> str:
        rule = f"share {self.share:g}" if self.share is not None else f"below {self.below:g}"
        options = ", ".join(
            f"{key}={Path(str(value)).name if key == 'model' else value}"
            for key, value in self.options.items()
        )
        return f"route {rule} to {self.labeler}" + (f" ({options})" if options else "")


class ExtractorSpec(BaseModel):
    """One extractor of a run.

    Attributes:
        name: Unique in a run; names the extractor's folder and its report rows.
        labeler: A registered labeler (``cpu``, ``trafilatura``, ``vllm``, ``openai``, ``torch``, ``oracle``),
            a whole-page extractor (``fineweb``, ``dclm``: the baselines as FineWeb and DCLM ran them, see
            :mod:`dripper.labelers.whole_page`) or ``module:factory``.
        options: The labeler's keyword options (LM labelers: ``model``, ``revision``, ``answer_format``,
            ``max_model_len``, engine options).
        fallback: Extractor for pages the labeler cannot label (``None``: leave them empty); left out, the
            default of the labeler (:func:`default_fallback`).
        fallback_on_empty: Also fall back when no block is labelled main content.
        output: The corpus documents' text: ``markdown`` or ``text`` (plain text, paragraphs kept);
            left out, the default of the labeler (:func:`default_output`: ``text`` for the whole-page
            extractors, which make nothing else). The extracted shards hold Markdown either way; the
            refine stage reads them as this says.
        gpu: Whether its extract tasks need a GPU worker (``None``: by the labeler, see :attr:`needs_gpu`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, description="Unique name: the folder and the report rows")
    labeler: str = Field(pattern=LABELER_PATTERN, description="Registered labeler or module:factory")
    options: dict[str, Any] = Field(default_factory=dict, description="The labeler's keyword options")
    fallback: Literal[FALLBACKS] | None = Field(
        DEFAULT_FALLBACK, description="Extractor for pages the labeler cannot label (none: leave them empty)"
    )
    fallback_on_empty: bool = Field(False, description="Also fall back when no block is labelled main")
    output: Literal[OUTPUTS] = Field(
        "markdown", description="The corpus documents' text: markdown, or text (plain, paragraphs kept)"
    )
    gpu: bool | None = Field(
        None, description="Its extract tasks need a GPU worker (empty: vllm, and torch unless on cpu)"
    )
    route: RouteSpec | None = Field(
        None, description="Cascade: send the pages the labeler is least sure of to a second labeler"
    )

    @field_validator("fallback", mode="before")
    @classmethod
    def _none_spelled_out(cls, value: Any) -> Any:
        return None if value in ("none", "") else value

    @model_validator(mode="after")
    def _output_it_makes(self) -> ExtractorSpec:
        if self.output != default_output(self.labeler) and default_output(self.labeler) == "text":
            raise ValueError(f"output: {self.labeler} makes plain text only (output=text)")
        return self

    @property
    def is_lm(self) -> bool:
        """Whether its labeler is a language model (:func:`labeler_is_lm`)."""
        return labeler_is_lm(self.labeler)

    @property
    def needs_gpu(self) -> bool:
        """Whether its extract tasks belong on a GPU worker (an LM engine in the worker: vllm, torch on CUDA;
        ``gpu`` says so for any labeler, a ``module:factory`` one included)."""
        return _labeler_needs_gpu(self.labeler, self.options, self.gpu)

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        if data["route"] is None:
            del data["route"]  # a plain extractor's recorded spec reads as it did before cascades
        return data

    def describe(self) -> str:
        """One line for logs and the report: ``qwen = vllm (model=MinerU-HTML, answer_format=json)``."""
        shown = {
            key: (Path(str(value)).name if key == "model" else value) for key, value in self.options.items()
        }
        options = ", ".join(f"{key}={value}" for key, value in shown.items())
        text = self.labeler + (f" ({options})" if options else "")
        if self.fallback != default_fallback(self.labeler):
            text += f", fallback {self.fallback or 'none'}"
        if self.fallback_on_empty:
            text += ", fallback on empty"
        if self.output != default_output(self.labeler):
            text += f", {self.output} output"
        if self.route is not None:
            text += f", {self.route.describe()}"
        return text if self.name == self.labeler and not options else f"{self.name} = {text}"


def default_fallback(labeler: str) -> str | None:
    """The fallback of a spec that names none: :data:`DEFAULT_FALLBACK`, except for a whole-page extractor
    (``fineweb``, ``dclm``): none, as the corpora they stand for dropped the pages their extractor missed."""
    from dripper.config.labelers import PAGE_EXTRACTORS

    return None if labeler in PAGE_EXTRACTORS else DEFAULT_FALLBACK


def default_output(labeler: str) -> str:
    """The output of a spec that names none: ``markdown``, except for a whole-page extractor (``fineweb``,
    ``dclm``), whose text is plain as the corpora they stand for had it."""
    from dripper.config.labelers import PAGE_EXTRACTORS

    return "text" if labeler in PAGE_EXTRACTORS else "markdown"


def _default_name(labeler: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", labeler).strip("-.")[:64] or "extractor"


def _from_text(text: str) -> dict[str, Any]:
    """``cpu`` or ``NAME=LABELER,key=value,…`` (values JSON where they parse as JSON)."""
    text = text.strip()
    if text.startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise ExtractorSpecError(f"extractor {text!r}: not valid JSON ({error})") from None
    head, *pairs = [part.strip() for part in text.split(",")]
    name, sep, labeler = head.partition("=")
    if not sep:
        name, labeler = _default_name(head), head
    entry: dict[str, Any] = {"name": name.strip(), "labeler": labeler.strip(), "options": {}}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ExtractorSpecError(
                f"extractor {entry['name']!r}: {pair!r} is not KEY=VALUE "
                "(form: NAME=LABELER,key=value,…, e.g. qwen=vllm,model=/models/MinerU-HTML)"
            )
        key = key.strip()
        if key in ("fallback", "fallback_on_empty", "gpu", "output"):
            entry[key] = parse_value(value.strip())
        else:
            entry["options"][key] = parse_value(value.strip())
    return entry


def _error_message(entry: Mapping[str, Any], error: ValidationError) -> str:
    name = entry.get("name") or entry.get("labeler") or "?"
    parts = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if field and message.startswith("options."):  # a nested spec's option check: route.options.model
            parts.append(f"{field}.{message}")
        else:
            parts.append(f"{field}: {message}" if field and not message.startswith(field) else message)
    return f"extractor {name!r}: " + "; ".join(parts)


def parse_extractor(value: str | Mapping[str, Any] | ExtractorSpec) -> ExtractorSpec:
    """One spec from its shorthand, its ``NAME=LABELER,key=value`` form, a mapping or a spec.

    Raises:
        ExtractorSpecError: naming the extractor and the field.
    """
    if isinstance(value, ExtractorSpec):
        return value
    entry = _from_text(value) if isinstance(value, str) else dict(value)
    if "labeler" in entry and not entry.get("name"):
        entry["name"] = _default_name(str(entry["labeler"]))
    if "fallback" not in entry and default_fallback(str(entry.get("labeler", ""))) != DEFAULT_FALLBACK:
        entry["fallback"] = default_fallback(str(entry["labeler"]))
    if "output" not in entry and default_output(str(entry.get("labeler", ""))) != "markdown":
        entry["output"] = default_output(str(entry["labeler"]))
    try:
        return ExtractorSpec.model_validate(entry)
    except ValidationError as error:
        raise ExtractorSpecError(_error_message(entry, error)) from None


def parse_extractors(values: Iterable[str | Mapping[str, Any] | ExtractorSpec]) -> list[ExtractorSpec]:
    """Specs from a list of entries; names must be unique (they name folders and report rows)."""
    specs = [parse_extractor(value) for value in values]
    seen: dict[str, ExtractorSpec] = {}
    for spec in specs:
        if spec.name in seen:
            raise ExtractorSpecError(
                f"extractor {spec.name!r}: name used twice ({seen[spec.name].describe()} and "
                f"{spec.describe()}); give each extractor its own name, e.g. {spec.name}-2={spec.labeler},…"
            )
        seen[spec.name] = spec
    if not specs:
        raise ExtractorSpecError("no extractor given")
    return specs


def load_extractor_file(path: str | Path) -> list[ExtractorSpec]:
    """Specs from a YAML or JSON file: a list of entries, or ``{"extractors": [...]}``."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
    else:
        import yaml

        data = yaml.safe_load(text)
    if isinstance(data, Mapping):
        data = data.get("extractors")
    if not isinstance(data, list):
        raise ExtractorSpecError(f"{path}: expected a list of extractors (or extractors: [...])")
    try:
        return parse_extractors(data)
    except ExtractorSpecError as error:
        raise ExtractorSpecError(f"{path}: {error}") from None


def check_labeler_options(specs: Sequence[ExtractorSpec]) -> None:
    """Check each spec's labeler (and its route's) exists, takes its option names and accepts their values
    (the labeler's ``check_options``; imports the labeler registry only: no model is loaded, no engine
    started)."""
    for spec in specs:
        _check_labeler(spec.name, "", spec.labeler, spec.options)
        if spec.route is not None:
            _check_labeler(spec.name, "route.", spec.route.labeler, spec.route.options)


def _check_labeler(name: str, field: str, labeler: str, options: Mapping[str, Any]) -> None:
    import inspect

    from dripper.config.labelers import labeler_factory

    if ":" in labeler:
        return  # an import path (it may exist on the workers only): checked when it is built
    try:
        factory = labeler_factory(labeler)  # imports that labeler's module only
    except KeyError as error:
        raise ExtractorSpecError(f"extractor {name!r}: {field}labeler: {error.args[0]}") from None
    for option, what in (getattr(factory, "required_options", None) or {}).items():
        value = options.get(option)
        if not isinstance(value, str) or not value.strip():
            raise ExtractorSpecError(
                f"extractor {name!r}: {field}options.{option}: the {labeler} labeler needs {option} ({what})"
            )
    parameters = inspect.signature(factory).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        for option in options:
            if option not in parameters:
                hint = did_you_mean(option, parameters, n=1)
                raise ExtractorSpecError(
                    f"extractor {name!r}: {field}options.{option}: the {labeler} labeler takes no "
                    f"option {option!r} (it takes {', '.join(parameters)}){hint}"
                )
    check_values = getattr(factory, "check_options", None)
    if check_values is not None:
        try:
            check_values(dict(options))
        except (TypeError, ValueError) as error:
            raise ExtractorSpecError(f"extractor {name!r}: {field}options: {error}") from None


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(text: str, limit: int = 48) -> str:
    """A path-safe name: runs of other characters become ``-``."""
    return _UNSAFE.sub("-", str(text)).strip("-.")[:limit] or "x"


def labeler_spec(
    labeler: str,
    options: Mapping[str, Any] | None = None,
    fallback: str | None = DEFAULT_FALLBACK,
    fallback_on_empty: bool = False,
) -> ExtractorSpec:
    """The spec of a labeler given by its fields (``corpus_build``'s form, ``dripper run extract --labeler``),
    named so that the CLI and the DAG put the same configuration in the same folder and two configurations
    never share one: ``trafilatura``; ``vllm-MinerU-HTML-1a2b3c`` (the model's last path part and a short
    hash of the options); ``-nofallback`` / ``-fb-empty`` when the fallback is not the default; ``-onempty``
    with ``fallback_on_empty``.
    """
    fallback = None if fallback in (None, "", "none") else str(fallback)
    rest = dict(options or {})
    parts = [slug(labeler.replace(":", "-"))]
    model = rest.pop("model", None)
    if model:
        parts.append(slug(posixpath.basename(str(model).rstrip("/")) or str(model)))
    if fallback is None:
        parts.append("nofallback")
    elif fallback != DEFAULT_FALLBACK:
        parts.append(f"fb-{slug(fallback)}")
    if fallback_on_empty:
        parts.append("onempty")
    if rest or model:
        digest = json.dumps({"model": model, **rest}, sort_keys=True, default=str)
        parts.append(hashlib.sha256(digest.encode()).hexdigest()[:6])
    return parse_extractor(
        {
            "name": "-".join(parts)[:64],
            "labeler": labeler,
            "options": dict(options or {}),
            "fallback": fallback,
            "fallback_on_empty": bool(fallback_on_empty),
        }
    )
