"""Refinement steps by name, and the typed configuration of a refinement run.

The names in :data:`STEP_ORDER` are what the CLI, Airflow params and :class:`RefineConfig.steps` use. Steps
always run in this order, whatever order ``steps`` lists them in:

==================  =============================================================================  ============
name                what it does                                                                   drops?
==================  =============================================================================  ============
url_dedup           exact dedup on the normalised URL (tracking parameters such as ``utm_*``       yes
                    removed), datatrove's 3-stage exact dedup; keeps the canonical URL
language            language identification with py3langid (model inside the wheel); keeps         yes
                    ``languages`` above ``threshold``, labels every document
gopher_repetition   Gopher repetition rules (duplicate lines, paragraphs, n-grams)                 yes
gopher_quality      Gopher quality rules (word counts, symbol ratios, stop words)                  yes
c4_quality          C4 line and document rules (as FineWeb runs them: terminal punctuation off);   yes
                    rewrites the text without the dropped lines
fineweb_quality     FineWeb's line-punctuation, short-line, duplicate-character, list-ratio rules  yes
decontaminate       removes documents (or their lines) sharing an n-gram (13) with an item of the  yes
                    evaluation suite (:mod:`dripper.refine.decontaminate`)
minhash             near-duplicate removal, datatrove's 4-stage MinHash                            yes
pii                 replaces e-mail addresses and public IP addresses                              no
tokenize            Megatron ``.bin/.idx`` with a tokenizer from a local path                      no
==================  =============================================================================  ============

The word-level filters (Gopher, C4, FineWeb) and MinHash split words with datatrove's word tokenizer for
``quality_language``; for English that is spaCy's blank tokenizer, which needs no download (datatrove's
NLTK tokenizers would fetch data at run time), read through the Markdown syntax (``markdown_words``). They
are tuned for that one language, as in FineWeb: keep ``language.languages`` to it.

A user's own datatrove steps join by ``module:factory`` (:attr:`RefineConfig.custom_steps`, see
:class:`dripper.config.refine.CustomStep`): built and checked when the config is made, placed after the step
they name, counted in the funnel like the built-in ones.

Configs come from Python or from a JSON-like dict (Airflow params, CLI ``--config``) through
:meth:`RefineConfig.from_dict`, which rejects unknown names with a "did you mean".
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from dripper.config.refine import DEFAULT_REFINE_STEPS, REFINE_STEPS, RefineStageConfig
from dripper.hints import did_you_mean

__all__ = [
    "DEFAULT_STEPS",
    "STEP_ORDER",
    "STEP_REGISTRY",
    "C4QualityConfig",
    "DecontaminateConfig",
    "FineWebQualityConfig",
    "GopherQualityConfig",
    "GopherRepetitionConfig",
    "LanguageConfig",
    "MinhashConfig",
    "PiiConfig",
    "RefineConfig",
    "StepSpec",
    "TokenizeConfig",
    "UrlDedupConfig",
    "build_custom_step",
    "build_step",
    "normalize_url",
    "quality_words",
    "step_spec",
]


# -- per-step configs --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LanguageConfig:
    """``language``: py3langid over the first ``max_chars`` characters.

    Attributes:
        languages: ISO 639-1 codes to keep (``("en",)``, or ``"en,de"``); empty keeps every language above
            ``threshold``.
        threshold: Minimum probability of a kept language (py3langid's normalised probability).
        label_only: Only record ``language`` / ``language_score``; drop nothing.
        max_chars: Characters of the text the model reads (the score saturates long before 20k).
    """

    languages: tuple[str, ...] = ("en",)
    threshold: float = 0.65
    label_only: bool = False
    max_chars: int = 20_000

    def __post_init__(self) -> None:
        if isinstance(self.languages, str):  # "en" or "en,de" from a CLI or an Airflow param
            object.__setattr__(self, "languages", _names(self.languages))
        _check(0.0 <= self.threshold <= 1.0, f"language.threshold must be in [0, 1], got {self.threshold}")
        _check(self.max_chars > 0, f"language.max_chars must be positive, got {self.max_chars}")


@dataclass(frozen=True)
class GopherRepetitionConfig:
    """``gopher_repetition``: datatrove's ``GopherRepetitionFilter`` thresholds (its defaults)."""

    dup_line_frac: float | None = 0.3
    dup_para_frac: float | None = 0.3
    dup_line_char_frac: float | None = 0.2
    dup_para_char_frac: float | None = 0.2
    top_n_grams: tuple[tuple[int, float], ...] = ((2, 0.2), (3, 0.18), (4, 0.16))
    dup_n_grams: tuple[tuple[int, float], ...] = (
        (5, 0.15),
        (6, 0.14),
        (7, 0.13),
        (8, 0.12),
        (9, 0.11),
        (10, 0.10),
    )


@dataclass(frozen=True)
class GopherQualityConfig:
    """``gopher_quality``: datatrove's ``GopherQualityFilter`` thresholds (its defaults)."""

    min_doc_words: int | None = 50
    max_doc_words: int | None = 100_000
    min_avg_word_length: int | None = 3
    max_avg_word_length: int | None = 10
    max_symbol_word_ratio: float | None = 0.1
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    max_non_alpha_words_ratio: float | None = 0.8
    min_stop_words: int | None = 2


@dataclass(frozen=True)
class C4QualityConfig:
    """``c4_quality``: datatrove's ``C4QualityFilter`` as FineWeb runs it (``filter_no_terminal_punct`` off)."""

    filter_no_terminal_punct: bool = False
    min_num_sentences: int = 5
    min_words_per_line: int = 3
    max_word_length: int = 1000
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True
    remove_citations: bool = True


@dataclass(frozen=True)
class FineWebQualityConfig:
    """``fineweb_quality``: datatrove's ``FineWebQualityFilter`` thresholds (its defaults)."""

    line_punct_thr: float = 0.12
    line_punct_exclude_zero: bool = False
    short_line_thr: float = 0.67
    short_line_length: int = 30
    char_duplicates_ratio: float = 0.01
    new_line_ratio: float = 0.3


#: Query parameters that only track the visit: two URLs differing in these are the same page.
TRACKING_PARAMS = (
    "utm_*",
    "fbclid",
    "gclid",
    "dclid",
    "msclkid",
    "yclid",
    "mc_cid",
    "mc_eid",
    "_ga",
    "igshid",
)


@dataclass(frozen=True)
class UrlDedupConfig:
    """``url_dedup``: one document per normalised URL (see :func:`normalize_url`).

    Attributes:
        drop_params: Query parameter names (``fnmatch`` patterns) removed before comparing.
        ignore_scheme: ``http://`` and ``https://`` of the same address are the same page.
    """

    drop_params: tuple[str, ...] = TRACKING_PARAMS
    ignore_scheme: bool = True


@dataclass(frozen=True)
class MinhashConfig:
    """``minhash``: datatrove's MinHash (5-grams, 14 buckets × 8 hashes: ~0.72 Jaccard)."""

    n_grams: int = 5
    num_buckets: int = 14
    hashes_per_bucket: int = 8
    seed: int = 1
    precision: int = 64

    def __post_init__(self) -> None:
        _check(self.n_grams > 0 and self.num_buckets > 0 and self.hashes_per_bucket > 0, f"minhash: {self}")
        _check(self.precision in (32, 64), f"minhash.precision must be 32 or 64, got {self.precision}")


@dataclass(frozen=True)
class PiiConfig:
    """``pii``: datatrove's ``PIIFormatter``; replacements cycle through the given values."""

    remove_emails: bool = True
    remove_ips: bool = True
    only_remove_public_ips: bool = True
    email_replacement: tuple[str, ...] = ("email@example.com", "firstname.lastname@example.org")
    ip_replacement: tuple[str, ...] = (
        "22.214.171.124",
        "126.96.36.199",
        "188.8.131.52",
        "184.108.40.206",
        "220.127.116.11",
        "18.104.22.168",
    )


DECONT_MODES = ("documents", "spans")


@dataclass(frozen=True)
class DecontaminateConfig:
    """``decontaminate``: drop what shares an n-gram with the evaluation suite's own items.

    Attributes:
        suite: The suite whose items lm-eval scores (``local``, ``paper13``, a suite file).
        n: N-gram length in words (13: GPT-3's choice).
        mode: ``documents`` drops a document holding a matching n-gram; ``spans`` drops its lines that
            hold one (a document left empty is dropped).
        query_ngrams: Also match n-grams of the question alone (GPT-3 matched the whole item), not only those
            reaching into the answer (datatrove's default).
        fixtures: A fixture manifest serving the suite's data offline (``dripper.eval.lm_suite``).
        skip_unavailable: Index the benchmarks whose data is at hand and record the others as not
            decontaminated, instead of failing.
    """

    suite: str = "local"
    n: int = 13
    mode: str = "documents"
    query_ngrams: bool = True
    fixtures: str | None = None
    skip_unavailable: bool = False

    def __post_init__(self) -> None:
        _check(self.n >= 5, f"decontaminate.n must be >= 5 words, got {self.n}")
        _check(
            self.mode in DECONT_MODES, f"decontaminate.mode must be one of {DECONT_MODES}, got {self.mode!r}"
        )
        _check(bool(self.suite), "decontaminate.suite must name a suite (local, paper13 or a suite file)")


@dataclass(frozen=True)
class TokenizeConfig:
    """``tokenize``: Megatron indexed datasets, one ``part-NNNNN.bin/.idx`` per task.

    Attributes:
        tokenizer: A ``tokenizer.json`` (Hugging Face ``tokenizers`` format) or a folder holding one; never
            fetched from the Hub. Also counts the tokens of the audit trail.
        eos_token: Appended to every document (must be in the vocabulary); ``None`` for none.
        batch_size: Documents per ``encode_batch`` call.
    """

    tokenizer: str | None = None
    eos_token: str | None = "<|endoftext|>"
    batch_size: int = 1000

    def __post_init__(self) -> None:
        _check(self.batch_size > 0, f"tokenize.batch_size must be positive, got {self.batch_size}")


# -- the registry ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepSpec:
    """A refinement step: its name, config type, what kind of work it is, whether it can drop documents and
    whether it rewrites the text of those it keeps.

    ``kind`` is ``filter`` (one datatrove filter in the filtering pass), ``dedup`` (its own passes),
    ``formatter`` (rewrites text) or ``output``.
    """

    name: str
    config_type: type
    kind: str
    drops: bool
    description: str
    rewrites_text: bool = False


# The names are the refine stage config's (``dripper.config.refine``, which DAG files read at parse time).
STEP_ORDER: tuple[str, ...] = (*REFINE_STEPS, "tokenize")
DEFAULT_STEPS: tuple[str, ...] = DEFAULT_REFINE_STEPS

STEP_REGISTRY: dict[str, StepSpec] = {
    spec.name: spec
    for spec in (
        StepSpec("url_dedup", UrlDedupConfig, "dedup", True, "exact dedup on the normalised URL"),
        StepSpec("language", LanguageConfig, "filter", True, "language identification (py3langid)"),
        StepSpec("gopher_repetition", GopherRepetitionConfig, "filter", True, "Gopher repetition rules"),
        StepSpec("gopher_quality", GopherQualityConfig, "filter", True, "Gopher quality rules"),
        StepSpec(
            "c4_quality", C4QualityConfig, "filter", True, "C4 line and document rules", rewrites_text=True
        ),
        StepSpec("fineweb_quality", FineWebQualityConfig, "filter", True, "FineWeb quality rules"),
        StepSpec(
            "decontaminate",
            DecontaminateConfig,
            "filter",
            True,
            "benchmark n-gram decontamination",
            rewrites_text=True,
        ),
        StepSpec("minhash", MinhashConfig, "dedup", True, "MinHash near-duplicate removal"),
        StepSpec(
            "pii", PiiConfig, "formatter", False, "e-mail and IP address replacement", rewrites_text=True
        ),
        StepSpec("tokenize", TokenizeConfig, "output", False, "Megatron .bin/.idx tokens"),
    )
}


def step_spec(name: str) -> StepSpec:
    """The registered step ``name``; ``KeyError`` with close names otherwise."""
    if name not in STEP_REGISTRY:
        raise KeyError(f"unknown refinement step {name!r}{_did_you_mean(name, STEP_REGISTRY)}")
    return STEP_REGISTRY[name]


# -- the run's config --------------------------------------------------------------------------------------

EXECUTORS = ("local", "slurm", "ray")
OUTPUT_FORMATS = ("parquet", "jsonl")
#: The documents' text (``RefineConfig.text_format``): ``auto`` reads the extractor spec's ``output``.
TEXT_FORMATS = ("auto", "markdown", "text")


@dataclass(frozen=True)
class RefineConfig:
    """Everything a refinement run needs besides its input and output roots.

    Attributes:
        steps: Step names to run (:data:`STEP_ORDER` order whatever the order given); a comma-separated
            string is accepted.
        text_column: The extracted column refined as the document text (``markdown``).
        text_format: What the documents' text is: ``markdown`` (the column as it is), ``text`` (its
            Markdown as plain text, paragraphs kept; rows of a whole-page extractor, plain already, as they
            are) or ``auto``: the extractor spec's ``output`` recorded beside the shards (``markdown`` where
            none is).
        quality_language: Word-tokenizer language of the Gopher, C4, FineWeb and MinHash steps.
        markdown_words: Those steps count the words of the Markdown, not its syntax tokens (``#``, ``*``,
            ``|``, link targets), where the text is Markdown (``text_format``); see
            :class:`dripper.refine.language.QualityWordTokenizer`.
        output_format: ``parquet`` (``corpus/part-NNNNN.parquet``) or ``jsonl`` (``.jsonl.gz``).
        write_exclusions: Write every dropped document with its reason under ``refine/excluded/{step}/``.
        tasks: Tasks (shards of work) of each per-document pass; the extracted shards are split among them.
        workers: Local executor: tasks run at once (``-1``: ``min(tasks, CPUs)``; ``1``: in this process).
        executor: ``local`` (datatrove's ``LocalPipelineExecutor``), ``slurm`` or ``ray`` (see
            :func:`dripper.refine.pipeline.run_refine`).
        executor_options: Extra keyword arguments of the executor (Slurm: ``partition``, ``time``,
            ``cpus_per_task``, ``sbatch_args``…; Ray: ``cpus_per_task``, ``mem_per_cpu_gb``…).
        start_method: Local executor process start method (``spawn`` is safe with threaded libraries).
        skip_completed: Resume: tasks with a datatrove completion marker are not run again.
        crawl: Crawl id written to every document; by default parsed from the WARC path
            (``crawl-data/CC-MAIN-2025-13/…``).
        custom_steps: The user's datatrove steps (:class:`dripper.config.refine.CustomStep` entries:
            ``factory``, ``options``, ``after``, ``name``), each built once here to check it is a datatrove
            ``PipelineStep``.
    """

    steps: tuple[str, ...] = DEFAULT_STEPS
    text_column: str = "markdown"
    text_format: str = "auto"
    quality_language: str = "en"
    markdown_words: bool = True
    output_format: str = "parquet"
    write_exclusions: bool = True
    tasks: int = RefineStageConfig.default("tasks")
    workers: int = RefineStageConfig.default("workers")
    executor: str = "local"
    executor_options: Mapping[str, Any] = field(default_factory=dict)
    start_method: str = "spawn"
    skip_completed: bool = True
    crawl: str | None = None
    url_dedup: UrlDedupConfig = field(default_factory=UrlDedupConfig)
    language: LanguageConfig = field(default_factory=LanguageConfig)
    gopher_repetition: GopherRepetitionConfig = field(default_factory=GopherRepetitionConfig)
    gopher_quality: GopherQualityConfig = field(default_factory=GopherQualityConfig)
    c4_quality: C4QualityConfig = field(default_factory=C4QualityConfig)
    fineweb_quality: FineWebQualityConfig = field(default_factory=FineWebQualityConfig)
    decontaminate: DecontaminateConfig = field(default_factory=DecontaminateConfig)
    minhash: MinhashConfig = field(default_factory=MinhashConfig)
    pii: PiiConfig = field(default_factory=PiiConfig)
    tokenize: TokenizeConfig = field(default_factory=TokenizeConfig)
    custom_steps: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        steps = _names(self.steps) if isinstance(self.steps, str) else tuple(self.steps)
        for name in steps:
            step_spec(name)
        if len(set(steps)) != len(steps):
            raise ValueError(f"steps lists a step twice: {list(steps)}")
        object.__setattr__(self, "steps", tuple(name for name in STEP_ORDER if name in steps))
        object.__setattr__(self, "executor_options", dict(self.executor_options))
        _check(self.tasks >= 1, f"tasks must be >= 1, got {self.tasks}")
        _check(self.workers == -1 or self.workers >= 1, f"workers must be -1 or >= 1, got {self.workers}")
        _check(self.executor in EXECUTORS, f"executor must be one of {EXECUTORS}, got {self.executor!r}")
        _check(
            self.output_format in OUTPUT_FORMATS,
            f"output_format must be one of {OUTPUT_FORMATS}, got {self.output_format!r}",
        )
        _check(bool(self.text_column), "text_column must name a column of the extracted shards")
        _check(
            self.text_format in TEXT_FORMATS,
            f"text_format must be one of {TEXT_FORMATS}, got {self.text_format!r}",
        )
        custom = tuple(step.model_dump() for step in _checked_custom_steps(self.custom_steps))
        object.__setattr__(self, "custom_steps", custom)
        for step in custom:
            build_custom_step(step)  # imports the factory and builds the step once: a bad one fails here
        if "tokenize" in self.steps and not self.tokenize.tokenizer:
            raise ValueError(
                "step 'tokenize' needs tokenize.tokenizer: a tokenizer.json or a folder holding one "
                '(e.g. --config \'{"tokenize": {"tokenizer": "/models/qwen"}}\'), or leave \'tokenize\' out'
            )

    def enabled(self, name: str) -> bool:
        """Whether step ``name`` runs."""
        step_spec(name)
        return name in self.steps

    def custom_after(self, place: str) -> list[Mapping[str, Any]]:
        """The user's steps placed after ``place`` (``input`` or a step name), in the order given."""
        return [step for step in self.custom_steps if step["after"] == place]

    def pipeline_steps(self) -> list[str]:
        """Every step that runs, built-in and the user's, in pipeline order (``tokenize`` last)."""
        order = [step["name"] for step in self.custom_after("input")]
        for name in STEP_ORDER:
            if name in self.steps:
                order.append(name)
            order.extend(step["name"] for step in self.custom_after(name))
        return order

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples as lists) that :meth:`from_dict` reads back."""
        return _jsonable(asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RefineConfig:
        """Build from a JSON-like dict: ``{"steps": [...], "tasks": 8, "language": {"threshold": 0.5}}``.

        Unknown keys raise ``KeyError`` naming the close ones; nested step configs may be partial.
        """
        return _from_dict(cls, dict(data or {}), "config")

    def replace(self, **changes: Any) -> RefineConfig:
        return replace(self, **changes)


# -- URL normalisation (url_dedup) -------------------------------------------------------------------------

_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_url(
    url: str, drop_params: tuple[str, ...] = TRACKING_PARAMS, ignore_scheme: bool = True
) -> str:
    """The URL as a dedup key: lower-case host, no default port, no fragment, sorted query without the
    ``drop_params`` parameters, and no scheme when ``ignore_scheme``."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port is None or _DEFAULT_PORTS.get(scheme) == port else f"{host}:{port}"
    patterns = [p.lower() for p in drop_params]
    query = sorted(
        (key, value)
        for key, value in parse_qsl(parts.query, keep_blank_values=True)
        if not any(fnmatch.fnmatchcase(key.lower(), p) for p in patterns)
    )
    key = urlunsplit(("" if ignore_scheme else scheme, netloc, parts.path or "/", urlencode(query), ""))
    return key.removeprefix("//")


class UrlKey:
    """``content_getter`` of datatrove's exact dedup: the normalised URL as UTF-8 (the id when there is no
    URL, so documents without one never collide)."""

    def __init__(self, config: UrlDedupConfig) -> None:
        self.config = config

    def __call__(self, doc: Any) -> bytes:
        url = doc.metadata.get("url")
        if not url:
            return f"id:{doc.id}".encode()
        return ("url:" + normalize_url(url, self.config.drop_params, self.config.ignore_scheme)).encode()


class UrlPriority:
    """``document_priority`` of the URL dedup: of a set of duplicates the URL without dropped parameters
    (the canonical one) is kept."""

    def __init__(self, config: UrlDedupConfig) -> None:
        self.config = config

    def __call__(self, doc: Any) -> int:
        url = doc.metadata.get("url")
        if not url:
            return 1
        canonical = normalize_url(url, (), self.config.ignore_scheme)
        return 2 if canonical == normalize_url(url, self.config.drop_params, self.config.ignore_scheme) else 1


# -- datatrove steps of the filter and formatter steps ----------------------------------------------------


def quality_words(config: RefineConfig) -> Any:
    """The word tokenizer of the word-level steps (:class:`~dripper.refine.language.QualityWordTokenizer`)."""
    from dripper.refine.language import QualityWordTokenizer

    return QualityWordTokenizer(
        config.quality_language, config.markdown_words and config.text_format != "text"
    )


def build_step(step: str, config: RefineConfig, exclusion_writer: Any = None) -> Any:
    """The datatrove step of a ``filter`` or ``formatter`` step (``dedup`` and ``output`` steps take passes
    of their own: :func:`dripper.refine.pipeline.build_passes`)."""
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    language = quality_words(config)
    if step == "language":
        from dripper.refine.language import LanguageIdFilter

        c = config.language
        return LanguageIdFilter(c.languages, c.threshold, c.label_only, c.max_chars, exclusion_writer)
    if step == "gopher_repetition":
        c = config.gopher_repetition
        return GopherRepetitionFilter(
            dup_line_frac=c.dup_line_frac,
            dup_para_frac=c.dup_para_frac,
            dup_line_char_frac=c.dup_line_char_frac,
            dup_para_char_frac=c.dup_para_char_frac,
            top_n_grams=c.top_n_grams,
            dup_n_grams=c.dup_n_grams,
            exclusion_writer=exclusion_writer,
            language=language,
        )
    if step == "gopher_quality":
        return GopherQualityFilter(
            **vars(config.gopher_quality), exclusion_writer=exclusion_writer, language=language
        )
    if step == "c4_quality":
        return C4QualityFilter(
            exclusion_writer=exclusion_writer, language=language, **vars(config.c4_quality)
        )
    if step == "fineweb_quality":
        return FineWebQualityFilter(
            exclusion_writer=exclusion_writer, language=language, **vars(config.fineweb_quality)
        )
    if step == "pii":
        return _pii_formatter(config.pii)
    raise KeyError(f"{step!r} is a {step_spec(step).kind} step: build_passes assembles it")


def _pii_formatter(config: PiiConfig) -> Any:
    from datatrove.pipeline.formatters import PIIFormatter

    class CountingPIIFormatter(PIIFormatter):
        """datatrove's PII formatter, counting what it replaced (``emails``, ``ips``, ``docs_changed``)."""

        def format(self, text: str) -> str:
            replaced = super().format(text)
            if replaced != text:
                self.stat_update("docs_changed")
                if self.remove_emails:
                    emails = len(self.emails_replacer.regex.findall(text))
                    self.stat_update("emails", value=emails)
                if self.remove_ips:
                    validator = self.ip_replacer.validator
                    ips = [m.group(0) for m in self.ip_replacer.regex.finditer(text)]
                    self.stat_update("ips", value=sum(1 for ip in ips if validator is None or validator(ip)))
            return replaced

    CountingPIIFormatter.__qualname__ = CountingPIIFormatter.__name__ = "CountingPIIFormatter"
    return CountingPIIFormatter(
        remove_emails=config.remove_emails,
        remove_ips=config.remove_ips,
        only_remove_public_ips=config.only_remove_public_ips,
        email_replacement=tuple(config.email_replacement),
        ip_replacement=tuple(config.ip_replacement),
    )


def _checked_custom_steps(steps: Any) -> list[Any]:
    from dripper.config.refine import check_custom_steps

    return check_custom_steps([dict(step) if isinstance(step, Mapping) else step for step in steps or ()])


def build_custom_step(step: Mapping[str, Any]) -> Any:
    """A user's datatrove step: ``factory(**options)``, which must be a datatrove ``PipelineStep``.

    Raises:
        ValueError: the factory does not import, does not take the options, or builds something else.
    """
    import importlib
    import inspect

    from datatrove.pipeline.base import PipelineStep

    name, target = step["name"], step["factory"]
    module_name, _, attribute = target.partition(":")
    try:
        factory: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            factory = getattr(factory, part)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"custom step {name!r}: cannot import {target!r} ({error})") from None
    options = dict(step.get("options") or {})
    try:
        inspect.signature(factory).bind(**options)
    except TypeError as error:
        raise ValueError(f"custom step {name!r}: {target} does not take these options ({error})") from None
    except ValueError:  # no signature (a builtin): let the call say
        pass
    built = factory(**options)
    if not isinstance(built, PipelineStep):
        raise ValueError(
            f"custom step {name!r}: {target} built a {type(built).__name__}, not a datatrove PipelineStep "
            "(subclass datatrove.pipeline.base.PipelineStep, or a filter of BaseFilter)"
        )
    return built


# -- helpers -----------------------------------------------------------------------------------------------


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _did_you_mean(name: str, choices: Any) -> str:
    """The hint, or the known names when none is close (these messages list no names otherwise)."""
    return did_you_mean(name, choices) or f"; known: {', '.join(sorted(choices))}"


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _tuples(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_tuples(v) for v in value)
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


_NESTED: dict[str, type] = {spec.name: spec.config_type for spec in STEP_REGISTRY.values()}


def _from_dict(cls: type, data: dict[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    unknown = [key for key in data if key not in known]
    if unknown:
        raise KeyError(f"{where}: unknown field {unknown[0]!r}{_did_you_mean(unknown[0], known)}")
    values: dict[str, Any] = {}
    for name, value in data.items():
        if cls is RefineConfig and name in _NESTED and isinstance(value, Mapping):
            value = _from_dict(_NESTED[name], dict(value), f"{where}.{name}")
        elif name == "executor_options":
            value = dict(value or {})
        elif name == "custom_steps":
            value = tuple(value or ())
        else:
            value = _tuples(value)  # JSON lists are the configs' tuples
        values[name] = value
    return cls(**values)


_WORD = re.compile(r"\S+")


def whitespace_token_count(text: str) -> int:
    """Whitespace-separated words: the audit's token unit when no tokenizer is configured."""
    return sum(1 for _ in _WORD.finditer(text))
