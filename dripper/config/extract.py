"""The extract stage's config: the extractor spec, pages per labeler call, labeler processes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import WithJsonSchema, field_validator

from dripper.config.extractor import ExtractorSpec, parse_extractor
from dripper.config.labelers import DEFAULT_LABELER
from dripper.config.settings import StageConfig, setting

__all__ = ["ExtractStageConfig"]


class ExtractStageConfig(StageConfig):
    """``{root}/simplified/`` (or WARC files, in one pass) → ``{root}/extractors/{name}/extracted/``.

    Attributes:
        extractor: The extractor spec (:mod:`dripper.config.extractor`): its labeler, options, fallback and
            route; given as a spec, a mapping, a labeler name (``cpu``) or ``NAME=LABELER,key=value,…``.
        batch_size: Pages per labeler call (and per parquet row group).
        workers: Processes, each with its own labeler (``0``: in the calling process).
        one_pass: Where the input is WARC files: extract them in one pass, without ``simplified/`` (``auto``:
            when the extractor needs no GPU; ``always``; ``never``: simplify first, then extract).
    """

    stage = "extract"
    form_prefix = "extract_"
    form_section = "Extraction"

    # The form and the CLI take the spec's text form; the config holds it parsed (validate_default).
    extractor: Annotated[ExtractorSpec, WithJsonSchema({"type": "string", "minLength": 1})] = setting(
        DEFAULT_LABELER,
        "The extractor: a labeler name (cpu, trafilatura), NAME=LABELER,key=value,… (e.g. "
        "v11=vllm,model=/models/MinerU-HTML-v1.1, also fallback=empty|none, fallback_on_empty=true, "
        "output=text for plain-text documents instead of Markdown) or JSON, "
        'a cascade included: {"name": "casc", "labeler": "cpu", "route": {"labeler": "vllm", "options": '
        '{"model": "/models/x"}, "share": 0.3}}; its name names the extractor\'s folder',
        title="Extractor",
        prefixed=False,
        env="DRIPPER_LABELER",
        validate_default=True,
    )
    batch_size: int = setting(64, "Pages per labeler call", title="Pages per labeler call", ge=1)
    workers: int = setting(
        1,
        "Dask LocalCluster processes of the extract task when no scheduler is given, each with its own "
        "labeler (one per GPU for an LM labeler; 0: in the task's process)",
        title="Extract workers",
        env="DRIPPER_EXTRACT_WORKERS",
        ge=0,
        le=256,
    )

    one_pass: Literal["auto", "always", "never"] = setting(
        "auto",
        "Where the input is WARC files: extract them in one pass, with no simplified/ intermediate (auto: when "
        "the extractor needs no GPU; always; never: simplify to simplified/ first, then extract, the split for "
        "labelers on GPU workers)",
        title="One pass from the WARC files",
    )

    def runs_one_pass(self) -> bool:
        """Whether WARC inputs are extracted in one pass (:attr:`one_pass`; ``auto``: unless the extractor, or
        its cascade's second labeler, needs a GPU: asking imports those labelers' modules)."""
        if self.one_pass != "auto":
            return self.one_pass == "always"
        route = self.extractor.route
        return not (self.extractor.needs_gpu or (route is not None and route.needs_gpu))

    @field_validator("extractor", mode="before")
    @classmethod
    def _parse_spec(cls, value: Any) -> Any:
        # Structure only (no labeler imported): the labeler's option names are checked where a run starts.
        return parse_extractor(value)
