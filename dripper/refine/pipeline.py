"""The refinement stage: extracted shards → corpus (and Megatron tokens), on datatrove.

``run_refine(input_root, output_root, config)`` reads the finished shards of ``{input_root}/extracted/``
and writes, under ``output_root``::

    corpus/part-NNNNN.parquet        the refined documents: text, id, url, crawl, extractor, language and its
                                     score, token count, quality statistics (or .jsonl.gz)
    tokens/part-NNNNN.bin / .idx     Megatron indexed datasets, row-aligned with the corpus ("tokenize")
    tokens/_summary.json             prefixes, documents and tokens, tokenizer, dtype
    refine/_summary.json             the audit roll-up (dripper.refine.summary)
    refine/excluded/{step}/…         every dropped document with its reason
    refine/stats/{pass}.json         datatrove's merged per-step statistics
    refine/logs/{pass}/              datatrove's logging folders: completions/ (resume markers), stats/, logs/
    refine/work/…                    intermediate files (filtered documents, dedup signatures)
    refine/plan.json                 the passes, the frozen list of input shards, the config

The work runs as datatrove passes, each an executor over ``tasks`` tasks (the per-document passes) or the
tasks the algorithm needs (MinHash buckets, clustering):

1. ``url_signatures``, ``url_duplicates`` (with ``url_dedup``): datatrove's exact dedup on the URL key;
2. ``filter``: read → URL dedup filter → language → Gopher repetition → Gopher quality → C4 → FineWeb →
   decontamination (its n-gram index of the evaluation suite's items is built first, in
   ``refine/work/decont_index/``) → the filtered documents (or, without MinHash, straight on to PII, corpus
   and tokens); the user's own steps (``custom_steps``) sit after the step each names;
3. ``minhash_signatures``, ``minhash_buckets``, ``minhash_clusters`` (with ``minhash``);
4. ``finalize``: read the filtered documents → MinHash filter → PII → corpus writer → Megatron tokens.

**Resuming.** Every task leaves a datatrove completion marker (``refine/logs/{pass}/completions/NNNNN``);
a rerun with the same config skips finished tasks and passes. The input shard list is frozen in the plan at
the first run (extracted shards finished later are not picked up: refine into a new output root, or
``force=True`` to start over), and a changed config is refused rather than mixed with old results.

**At scale.** ``executor="slurm"`` builds the same passes as ``SlurmPipelineExecutor`` jobs chained with
``depends`` (``executor_options`` must give ``partition`` and ``time``; ``sbatch_args``, ``cpus_per_task``,
``qos``, ``venv_path``… pass through; ``job_name`` prefixes each pass's name, ``refine_{pass}`` by default;
without ``venv_path``/``env_command``/``condaenv`` the jobs find datatrove's ``launch_pickled_pipeline``
beside this interpreter) and submits them; the call returns once they are queued with their job ids, and
:func:`complete_refine` checks every task finished and writes the summary after the last job
(:class:`dripper.airflow.corpus.SlurmRefineOperator` waits for the jobs in Airflow's triggerer, then calls it). ``executor="ray"``
runs the passes with ``RayPipelineExecutor`` on the Ray cluster ``ray.init()`` connects to (options such as
``cpus_per_task``, ``mem_per_cpu_gb`` pass through). Both need ``output_root`` on storage every node sees
(S3, a shared filesystem).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import posixpath
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from datatrove.pipeline.readers.parquet import ParquetReader
from datatrove.pipeline.writers.jsonl import JsonlWriter

from dripper.config.labelers import PAGE_EXTRACTORS
from dripper.io.storage import filesystem_for, is_local, join_path
from dripper.markdown_text import markdown_plain_text
from dripper.refine import steps as step_configs
from dripper.refine.steps import RefineConfig
from dripper.refine.summary import PLAN_NAME, AuditPoint, ExclusionWriter, summarize_refine

__all__ = ["REFINE_DIR", "Pass", "RefineError", "build_passes", "complete_refine", "run_refine", "main"]

log = logging.getLogger(__name__)

REFINE_DIR = "refine"
CORPUS_STAGE = "corpus"
TOKENS_STAGE = "tokens"
EXTRACTED_STAGE = "extracted"
_CRAWL = re.compile(r"crawl-data/([^/]+)/")
_TERMINAL = (".", "!", "?", '"', "'", "”", "。", "！", "？")
#: Extracted columns the stage reads (``main_html`` and ``labels`` are large and not needed).
_CARRIED = ("url", "warc_file", "warc_offset", "fetch_date", "extractor", "fallback_reason")


class RefineError(RuntimeError):
    """A pass did not finish all its tasks; rerun to resume (finished tasks are skipped)."""


# -- datatrove steps of this stage -------------------------------------------------------------------------


class ExtractedShardReader(ParquetReader):
    """Read extracted shards (``files``, relative to ``data_folder``; task ``r`` reads ``files[r::tasks]``).

    Each row becomes a document: ``text_column`` as text (its Markdown as plain text where ``text_format``
    is ``text``), ``doc_id`` as id, the carried columns (URL, WARC
    file, fetch date, extractor, fallback reason), the extraction ``stats`` (``extract_stats``), the crawl
    and the source shard as metadata. Rows with empty text (pages the extractor gave nothing for) are
    counted (``dropped_empty_text``) and written to ``exclusion_writer``; every row counts in
    ``rows/<extractor>``.
    """

    name = "📒 Extracted shards"

    def __init__(
        self,
        data_folder: Any,
        files: Sequence[str],
        text_column: str = "markdown",
        crawl: str | None = None,
        exclusion_writer: Any = None,
        text_format: str = "markdown",
    ) -> None:
        super().__init__(data_folder, text_key=text_column, id_key="doc_id", batch_size=256)
        self.plain_text = text_format == "text"
        self.files = list(files)
        self.crawl = crawl
        self.exclusion_writer = exclusion_writer
        self._writer: Any = None
        self._rank = 0

    def read_file(self, filepath: str) -> Any:
        import pyarrow.parquet as pq

        with self.data_folder.open(filepath, "rb") as f, pq.ParquetFile(f) as parquet:
            wanted = [self.text_key, self.id_key, *_CARRIED, "stats"]
            columns = [c for c in wanted if c in parquet.schema_arrow.names]
            if self.text_key not in columns:
                raise KeyError(
                    f"{filepath}: no column {self.text_key!r} (text_column); it has {parquet.schema_arrow.names}"
                )
            row_index = 0
            for batch in parquet.iter_batches(batch_size=self.batch_size, columns=columns):
                with self.track_time("batch"):
                    documents = []
                    for row in batch.to_pylist():
                        document = self._document(row, filepath, row_index)
                        row_index += 1
                        if document is not None:
                            documents.append(document)
                yield from documents

    def _document(self, row: dict[str, Any], filepath: str, row_index: int) -> Any:
        from datatrove.data import Document

        extractor = row.get("extractor") or "unknown"
        self.stat_update(f"rows/{extractor}")
        text = row.get(self.text_key) or ""
        if self.plain_text and text and extractor not in PAGE_EXTRACTORS:  # theirs is plain already
            text = markdown_plain_text(text)
        metadata = {name: row.get(name) for name in _CARRIED}
        metadata["extract_stats"] = row.get("stats")
        metadata["crawl"] = self.crawl or _crawl_of(row.get("warc_file"))
        metadata["source_file"] = f"{filepath}#{row_index}"
        document = Document(
            text=text, id=row.get(self.id_key) or f"{filepath}#{row_index}", metadata=metadata
        )
        if not text.strip():
            self.stat_update("dropped", "dropped_empty_text")
            if self._writer is not None:
                document.metadata["filter_reason"] = "empty_text"
                self._writer.write(document, self._rank)
            return None
        return document

    def run(self, data: Any = None, rank: int = 0, world_size: int = 1) -> Any:
        files = self.files[rank::world_size]
        self._rank = rank
        if self.exclusion_writer is None:
            self._writer = None
            yield from self.read_files_shard(files)
            return
        with self.exclusion_writer as writer:
            self._writer = writer
            yield from self.read_files_shard(files)


def _crawl_of(warc_file: str | None) -> str | None:
    match = _CRAWL.search(warc_file or "")
    return match.group(1) if match else None


def _quality(text: str) -> dict[str, Any]:
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    words = text.split()
    return {
        "n_chars": len(text),
        "n_words": len(words),
        "n_lines": len(lines),
        "mean_word_length": round(sum(map(len, words)) / len(words), 3) if words else 0.0,
        "line_punct_ratio": round(sum(line.endswith(_TERMINAL) for line in lines) / len(lines), 4)
        if lines
        else 0.0,
    }


def corpus_schema() -> Any:
    """The parquet schema of ``corpus/part-NNNNN.parquet``."""
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.string()),
            ("text", pa.string()),
            ("url", pa.string()),
            ("crawl", pa.string()),
            ("warc_file", pa.string()),
            ("warc_offset", pa.int64()),
            ("fetch_date", pa.string()),
            ("extractor", pa.string()),
            ("fallback_reason", pa.string()),
            ("language", pa.string()),
            ("language_score", pa.float64()),
            ("token_count", pa.int64()),
            ("n_chars", pa.int64()),
            ("n_words", pa.int64()),
            ("n_lines", pa.int64()),
            ("mean_word_length", pa.float64()),
            ("line_punct_ratio", pa.float64()),
            ("minhash_cluster_size", pa.int64()),
            ("extract_stats", pa.string()),
            ("source_file", pa.string()),
        ]
    )


def _corpus_record(writer: Any, document: Any) -> dict[str, Any]:
    metadata = document.metadata
    record = {name: metadata.get(name) for name in corpus_schema().names}
    record.update(id=document.id, text=document.text, **_quality(document.text))
    return record


# -- the passes --------------------------------------------------------------------------------------------


@dataclass
class Pass:
    """One datatrove pass: its pipeline, what each position is (``read:input``, ``audit:language``,
    ``step:minhash``, ``write:corpus``…) and its task count."""

    name: str
    pipeline: list[Any]
    roles: list[str]
    tasks: int
    single_process: bool = False


@dataclass(frozen=True)
class Layout:
    """Where a run's files go (paths or URLs)."""

    input_root: str
    output_root: str

    @property
    def extracted(self) -> str:
        return join_path(self.input_root, EXTRACTED_STAGE)

    @property
    def refine(self) -> str:
        return join_path(self.output_root, REFINE_DIR)

    def work(self, *parts: str) -> str:
        return join_path(self.refine, "work", *parts)

    def logs(self, name: str) -> str:
        return join_path(self.refine, "logs", name)

    def excluded(self, step: str) -> str:
        return join_path(self.refine, "excluded", step)


def build_passes(
    layout: Layout,
    files: Sequence[str],
    config: RefineConfig,
    storage_options: dict[str, Any] | None = None,
) -> list[Pass]:
    """The datatrove passes of a run, in order (see the module docstring)."""
    from datatrove.pipeline.dedup import (
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.dedup.exact_dedup import (
        ExactDedupConfig,
        ExactDedupFilter,
        ExactDedupSignature,
        ExactFindDedups,
    )
    from datatrove.pipeline.dedup.minhash import MinhashConfig as DatatroveMinhashConfig
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.utils.hashing import HashConfig

    def folder(path: str) -> Any:
        return _datafolder(path, storage_options)

    def exclusions(step: str) -> Any:
        if not config.write_exclusions:
            return None
        default = {"url_dedup": "duplicate_url", "minhash": "near_duplicate"}.get(step)
        return ExclusionWriter(folder(layout.excluded(step)), step, default)

    audit_tokenizer = config.tokenize.tokenizer if config.enabled("tokenize") else None

    def reader(exclusion: Any = None) -> ExtractedShardReader:
        return ExtractedShardReader(
            folder(layout.extracted), files, config.text_column, config.crawl, exclusion, config.text_format
        )

    passes: list[Pass] = []
    url_config = None
    if config.enabled("url_dedup"):
        url_config = ExactDedupConfig(
            content_getter=step_configs.UrlKey(config.url_dedup),
            document_priority=step_configs.UrlPriority(config.url_dedup),
        )
        signatures, duplicates = (
            layout.work("url_dedup", "signatures"),
            layout.work("url_dedup", "duplicates"),
        )
        passes.append(
            Pass(
                "url_signatures",
                [reader(), ExactDedupSignature(folder(signatures), url_config)],
                ["read:url", "step:url_dedup"],
                config.tasks,
            )
        )
        passes.append(
            Pass(
                "url_duplicates",
                [ExactFindDedups(folder(signatures), folder(duplicates), url_config)],
                ["step:url_dedup"],
                1,
                single_process=True,
            )
        )

    def audit(step: str) -> AuditPoint:
        # Counting in batches is faster (encode_batch), but a batch between two word-level steps would evict
        # the words the first tokenized from datatrove's 5-text cache before the second reads them: batch
        # only where texts are new (the input, after steps that rewrite them, after a user's step).
        builtin = step in step_configs.STEP_REGISTRY
        new_texts = step == "input" or not builtin or step_configs.step_spec(step).rewrites_text
        return AuditPoint(step, audit_tokenizer, batch_size=64 if new_texts else 1)

    pipeline: list[Any] = [reader(exclusions("input")), audit("input")]
    roles = ["read:input", "audit:input"]

    def add(step: str, block: Any) -> None:
        pipeline.extend([block, audit(step)])
        roles.extend([f"step:{step}", f"audit:{step}"])

    def add_custom(place: str) -> None:
        """The user's steps placed after ``place``; a filter without an exclusion writer gets one."""
        from datatrove.pipeline.filters.base_filter import BaseFilter

        for custom in config.custom_after(place):
            block = step_configs.build_custom_step(custom)
            if isinstance(block, BaseFilter) and getattr(block, "exclusion_writer", None) is None:
                block.exclusion_writer = exclusions(custom["name"])
            add(custom["name"], block)

    add_custom("input")
    if url_config is not None:
        add(
            "url_dedup",
            ExactDedupFilter(folder(duplicates), url_config, exclusion_writer=exclusions("url_dedup")),
        )
    add_custom("url_dedup")
    for step in ("language", "gopher_repetition", "gopher_quality", "c4_quality", "fineweb_quality"):
        if config.enabled(step):
            add(step, step_configs.build_step(step, config, exclusions(step)))
        add_custom(step)
    if config.enabled("decontaminate"):
        from dripper.refine.decontaminate import build_decont_filter

        index = folder(layout.work("decont_index"))
        decont = build_decont_filter(
            config.decontaminate, index, exclusions("decontaminate"), config.quality_language
        )
        add("decontaminate", decont)
    add_custom("decontaminate")

    def finish() -> None:
        add_custom("minhash")
        if config.enabled("pii"):
            add("pii", step_configs.build_step("pii", config))
        add_custom("pii")
        pipeline.append(_corpus_writer(folder(join_path(layout.output_root, CORPUS_STAGE)), config))
        roles.append("write:corpus")
        if config.enabled("tokenize"):
            from dripper.refine.tokenize import MegatronTokenWriter

            pipeline.append(
                MegatronTokenWriter(
                    folder(join_path(layout.output_root, TOKENS_STAGE)),
                    config.tokenize.tokenizer,
                    config.tokenize.eos_token,
                    config.tokenize.batch_size,
                )
            )
            roles.append("step:tokenize")

    if not config.enabled("minhash"):
        finish()
        passes.append(Pass("filter", pipeline, roles, config.tasks))
        return passes

    filtered = layout.work("filtered")
    pipeline.append(
        JsonlWriter(folder(filtered), output_filename="${rank}.jsonl.gz", adapter=_filtered_record)
    )
    roles.append("write:filtered")
    passes.append(Pass("filter", pipeline, roles, config.tasks))

    mh = config.minhash
    mh_config = DatatroveMinhashConfig(
        n_grams=mh.n_grams,
        num_buckets=mh.num_buckets,
        hashes_per_bucket=mh.hashes_per_bucket,
        seed=mh.seed,
        # sha1, not datatrove's default xxhash: xxhash 4 refuses the str shingles datatrove 0.10 hashes.
        hash_config=HashConfig(precision=mh.precision, hash_fc="sha1"),
    )
    sigs, buckets, clusters = (layout.work("minhash", name) for name in ("signatures", "buckets", "clusters"))

    def filtered_reader() -> Any:
        return JsonlReader(folder(filtered), glob_pattern="*.jsonl.gz")

    passes.append(
        Pass(
            "minhash_signatures",
            [
                filtered_reader(),
                MinhashDedupSignature(folder(sigs), mh_config, language=step_configs.quality_words(config)),
            ],
            ["read:filtered", "step:minhash"],
            config.tasks,
        )
    )
    passes.append(
        Pass(
            "minhash_buckets",
            [MinhashDedupBuckets(folder(sigs), folder(buckets), config=mh_config)],
            ["step:minhash"],
            mh.num_buckets,
        )
    )
    passes.append(
        Pass(
            "minhash_clusters",
            [
                MinhashDedupCluster(
                    folder(buckets), folder(clusters), config=mh_config, save_cluster_size=True
                )
            ],
            ["step:minhash"],
            1,
            single_process=True,
        )
    )
    pipeline = [filtered_reader()]
    roles = ["read:filtered"]
    add(
        "minhash",
        MinhashDedupFilter(folder(clusters), exclusion_writer=exclusions("minhash"), load_cluster_sizes=True),
    )
    finish()
    passes.append(Pass("finalize", pipeline, roles, config.tasks))
    return passes


def _datafolder(path: str, storage_options: dict[str, Any] | None) -> Any:
    """A datatrove folder spec: the path, or ``(path, fs)`` built with the project's fsspec options."""
    if not storage_options:
        return path
    fs, fs_path = filesystem_for(path, storage_options)
    return (fs_path, fs)


def _filtered_record(writer: Any, document: Any) -> dict[str, Any]:
    # Keep the token-count cache (_tokens_of) so the next pass does not recount unchanged texts.
    return {"id": document.id, "text": document.text, "metadata": document.metadata}


def _corpus_writer(output_folder: Any, config: RefineConfig) -> Any:
    if config.output_format == "jsonl":
        return JsonlWriter(output_folder, output_filename="part-${rank}.jsonl.gz", adapter=_corpus_record)
    from datatrove.pipeline.writers import ParquetWriter

    return ParquetWriter(
        output_folder,
        output_filename="part-${rank}.parquet",
        adapter=_corpus_record,
        schema=corpus_schema(),
        compression="zstd",
        max_file_size=-1,
    )


# -- running -----------------------------------------------------------------------------------------------

#: Config fields that change how a run executes, not what it computes (a resumed run may change them).
_EXECUTION_FIELDS = ("workers", "executor", "executor_options", "start_method", "skip_completed")


def _executor(p: Pass, layout: Layout, config: RefineConfig, depends: Any, storage_options: Any) -> Any:
    logging_dir = _datafolder(layout.logs(p.name), storage_options)
    common = {"tasks": p.tasks, "logging_dir": logging_dir, "skip_completed": config.skip_completed}
    options = dict(config.executor_options)
    if config.executor == "local":
        from datatrove.executor import LocalPipelineExecutor

        workers = config.workers if config.workers != -1 else min(p.tasks, os.cpu_count() or 1)
        workers = 1 if p.single_process else min(workers, p.tasks)
        return LocalPipelineExecutor(
            p.pipeline, workers=workers, start_method=config.start_method, **common, **options
        )
    if config.executor == "slurm":
        from datatrove.executor import SlurmPipelineExecutor

        missing = [name for name in ("partition", "time") if name not in options]
        if missing:
            raise ValueError(
                f'executor=\'slurm\' needs executor_options {missing} (e.g. {{"partition": "cpu", '
                '"time": "04:00:00"}})'
            )
        options["job_name"] = f"{options.get('job_name') or 'refine'}_{p.name}"
        if not is_local(layout.output_root) and not options.get("slurm_logs_folder"):
            # sbatch writes job logs to a filesystem the nodes mount, not to the object store (datatrove's
            # own default then is a folder relative to the submitting process's working directory).
            base = os.environ.get("DRIPPER_SLURM_LOGS") or os.path.expanduser("~/dripper-slurm-logs")
            run = re.sub(r"[^A-Za-z0-9._-]+", "-", layout.output_root).strip("-")
            options["slurm_logs_folder"] = os.path.join(base, run, p.name)
        if not any(options.get(name) for name in ("env_command", "condaenv", "venv_path")):
            # The job runs datatrove's launch_pickled_pipeline: the one installed beside this interpreter.
            bin_dir = os.path.dirname(sys.executable)
            options["env_command"] = f'export PATH="{bin_dir}:$PATH"'
        return SlurmPipelineExecutor(p.pipeline, depends=depends, **common, **options)
    from datatrove.executor import RayPipelineExecutor

    return RayPipelineExecutor(p.pipeline, depends=depends, **common, **options)


def build_executors(
    passes: Sequence[Pass],
    layout: Layout,
    config: RefineConfig,
    storage_options: dict[str, Any] | None = None,
) -> list[Any]:
    """One datatrove executor per pass; Slurm and Ray executors depend on the previous pass."""
    executors: list[Any] = []
    for p in passes:
        depends = executors[-1] if executors and config.executor != "local" else None
        executors.append(_executor(p, layout, config, depends, storage_options))
    return executors


def _read_json(fs: Any, path: str) -> dict[str, Any] | None:
    try:
        with fs.open(path, "r") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _write_json(fs: Any, path: str, data: dict[str, Any]) -> None:
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    with fs.open(path, "w") as f:
        f.write(json.dumps(data, indent=1) + "\n")


def recorded_output(root: str, storage_options: dict[str, Any] | None = None) -> str:
    """The ``output`` of the extractor spec recorded in ``root`` (``_extractor.json``), the documents' text
    format (``markdown`` where no spec is recorded: a root written before specs recorded one)."""
    from dripper.config.extractor import parse_extractor
    from dripper.stages.extractor import EXTRACTOR_FILE

    fs, base = filesystem_for(root, storage_options)
    data = _read_json(fs, posixpath.join(base.rstrip("/"), EXTRACTOR_FILE))
    return parse_extractor(data).output if data else "markdown"


def _computing_config(config: RefineConfig) -> dict[str, Any]:
    data = config.to_dict()
    for name in _EXECUTION_FIELDS:
        data.pop(name, None)
    return data


def _input_files(layout: Layout, storage_options: dict[str, Any] | None) -> list[str]:
    from dripper.stages.shards import done_shard_paths

    paths = done_shard_paths(layout.extracted, storage_options)
    if not paths:
        raise FileNotFoundError(
            f"{layout.extracted} has no finished shard (part-NNNNN.parquet with its .done.json marker): run the "
            "extract stage first, or check input_root"
        )
    return [posixpath.basename(p) for p in paths]


def _prepare(
    layout: Layout, config: RefineConfig, storage_options: Any, force: bool
) -> tuple[list[str], dict]:
    """Check the config and inputs, freeze the input list, write the plan's header; returns (files, plan)."""
    fs, out = filesystem_for(layout.output_root, storage_options)
    out = out.rstrip("/")
    if force:
        for name in (REFINE_DIR, CORPUS_STAGE, TOKENS_STAGE):
            if fs.exists(posixpath.join(out, name)):
                fs.rm(posixpath.join(out, name), recursive=True)
    if config.enabled("language") and config.language.languages:
        from dripper.refine.language import check_languages

        check_languages(config.language.languages)
    tokenizer_info = None
    if config.enabled("tokenize"):
        from dripper.refine.tokenize import check_tokenizer

        tokenizer_info = check_tokenizer(config.tokenize.tokenizer, config.tokenize.eos_token)
    decontamination = None
    if config.enabled("decontaminate"):
        from dripper.refine.decontaminate import build_decont_index

        index = _datafolder(layout.work("decont_index"), storage_options)
        decontamination = build_decont_index(config.decontaminate, index, config.quality_language)
        decontamination["mode"] = config.decontaminate.mode
    plan_path = posixpath.join(out, REFINE_DIR, PLAN_NAME)
    previous = _read_json(fs, plan_path)
    available = _input_files(layout, storage_options)
    if previous is not None:
        # A run started before text_format existed read its text as Markdown.
        started = {"text_format": "markdown", **(previous.get("computing_config") or {})}
        if started != _computing_config(config):
            raise ValueError(
                f"{layout.refine} was started with another config ({plan_path}); refine into a new output_root, "
                "or pass force=True (--force) to delete this run's corpus, tokens and refine/ and start over"
            )
        files = previous["inputs"]
        new = sorted(set(available) - set(files))
        if new:
            log.warning(
                "refine: %d extracted shard(s) finished after this run started are not included (%s…); "
                "refine them into a new output_root",
                len(new),
                new[0],
            )
        missing = sorted(set(files) - set(available))
        if missing:
            raise FileNotFoundError(f"{layout.extracted}: shards of this run are gone: {missing[:5]}")
    else:
        files = available
    plan = {
        "input_root": layout.input_root,
        "output_root": layout.output_root,
        "inputs": files,
        "steps": config.pipeline_steps(),
        "decontamination": decontamination,
        "config": config.to_dict(),
        "computing_config": _computing_config(config),
        "token_unit": f"tokenizer:{tokenizer_info['tokenizer']}" if tokenizer_info else "whitespace_words",
        "tokenizer_info": tokenizer_info,
        "output_format": config.output_format,
        "corpus_suffix": ".parquet" if config.output_format == "parquet" else ".jsonl.gz",
    }
    return files, plan


def run_refine(
    input_root: str,
    output_root: str | None = None,
    config: RefineConfig | dict[str, Any] | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Refine ``{input_root}/extracted/`` into ``{output_root}/corpus/`` (and ``tokens/``).

    Args:
        input_root: The run root holding the extracted shards.
        output_root: Where ``corpus/``, ``tokens/`` and ``refine/`` go (default: ``input_root``).
        config: A :class:`RefineConfig` or its dict form (Airflow params); default: the default steps.
        storage_options: fsspec options of both roots (S3 endpoint, credentials).
        force: Delete this output root's previous refinement (corpus, tokens, refine/) and start over.

    Returns:
        The summary written to ``refine/_summary.json`` (see :mod:`dripper.refine.summary`), plus
        ``wall_seconds`` per pass; for ``executor="slurm"``, ``{"submitted": [job ids…]}`` instead.

    Raises:
        RefineError: a pass left tasks unfinished (rerun to resume).
        ValueError: the config differs from the one that started ``output_root`` (use ``force``).
    """
    if not isinstance(config, RefineConfig):
        config = RefineConfig.from_dict(config)
    layout = Layout(_root(input_root), _root(output_root or input_root))
    if config.text_format == "auto":
        config = config.replace(text_format=recorded_output(layout.input_root, storage_options))
    started = time.perf_counter()
    files, plan = _prepare(layout, config, storage_options, force)
    passes = build_passes(layout, files, config, storage_options)
    plan["phases"] = [{"name": p.name, "tasks": p.tasks, "roles": p.roles} for p in passes]
    fs, out = filesystem_for(layout.output_root, storage_options)
    _write_json(fs, posixpath.join(out.rstrip("/"), REFINE_DIR, PLAN_NAME), plan)
    executors = build_executors(passes, layout, config, storage_options)
    log.info("refine: %d input shards, steps %s, %d passes", len(files), ",".join(config.steps), len(passes))
    if config.tasks > len(files):
        log.warning(
            "refine: tasks=%d but %d extracted shards: a task reads whole shards, so %d tasks will idle",
            config.tasks,
            len(files),
            config.tasks - len(files),
        )
    if config.executor == "slurm":
        executors[-1].run()  # submits the whole chain through `depends`
        submitted = [str(e.job_id) for e in executors if e.job_id not in (None, -1, "-1")]
        return {
            "submitted": submitted,
            "output_root": layout.output_root,
            "slurm_logs": [e.slurm_logs_folder for e in executors],
        }
    pass_seconds: dict[str, float] = {}
    for p, executor in zip(passes, executors, strict=True):
        pass_started = time.perf_counter()
        executor.run()
        pass_seconds[p.name] = round(time.perf_counter() - pass_started, 3)
        _check_complete([p], [executor], layout)
    return summarize_refine(
        layout.output_root,
        storage_options,
        extra={"wall_seconds": round(time.perf_counter() - started, 3), "pass_wall_seconds": pass_seconds},
    )


def _check_complete(passes: Sequence[Pass], executors: Sequence[Any], layout: Layout) -> None:
    for p, executor in zip(passes, executors, strict=True):
        incomplete = executor.get_incomplete_ranks(skip_completed=True)
        if incomplete:
            raise RefineError(
                f"refine pass {p.name!r}: tasks {incomplete[:10]} did not finish (see {layout.logs(p.name)}/logs); "
                "rerun to resume: finished tasks are skipped"
            )


def complete_refine(
    output_root: str, storage_options: dict[str, Any] | None = None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """After the Slurm (or Ray) jobs of :func:`run_refine` ended: check that every task of every pass left
    its completion marker, then write and return the summary (as :func:`run_refine` does locally).

    Raises:
        RefineError: a pass left tasks unfinished (run :func:`run_refine` again to resubmit only those).
        FileNotFoundError: ``output_root`` has no refinement plan (run :func:`run_refine` first).
    """
    from dataclasses import replace

    fs, out = filesystem_for(_root(output_root), storage_options)
    plan_path = posixpath.join(out.rstrip("/"), REFINE_DIR, PLAN_NAME)
    plan = _read_json(fs, plan_path)
    if plan is None:
        raise FileNotFoundError(f"{plan_path}: no refinement plan; run run_refine first")
    config = RefineConfig.from_dict(plan["config"])
    layout = Layout(plan["input_root"], plan["output_root"])
    passes = build_passes(layout, plan["inputs"], config, storage_options)
    # Local executors only read the completion markers here: nothing is submitted.
    local = replace(config, executor="local", executor_options={})
    _check_complete(passes, build_executors(passes, layout, local, storage_options), layout)
    return summarize_refine(layout.output_root, storage_options, extra=extra)


def _root(path: Any) -> str:
    text = os.fspath(path)
    return os.path.abspath(text) if "://" not in text else text.rstrip("/")


# -- command line ------------------------------------------------------------------------------------------


def _parse_config(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    if text.startswith("@"):
        with open(text[1:], encoding="utf-8") as f:
            return json.load(f)
    return json.loads(text)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dripper.refine.pipeline --input ROOT [--output ROOT] [--config JSON|@file] …``"""
    parser = argparse.ArgumentParser(
        description="Refine extracted shards into a corpus (and Megatron tokens)."
    )
    parser.add_argument("--input", required=True, help="run root holding extracted/")
    parser.add_argument("--output", help="where corpus/, tokens/ and refine/ go (default: --input)")
    parser.add_argument("--config", help="RefineConfig as JSON, or @path/to/config.json")
    parser.add_argument("--steps", help=f"comma-separated steps (known: {','.join(step_configs.STEP_ORDER)})")
    parser.add_argument("--tasks", type=int)
    parser.add_argument("--workers", type=int)
    parser.add_argument("--tokenizer", help="tokenizer.json or its folder (adds the tokenize step)")
    parser.add_argument("--force", action="store_true", help="start over: delete this run's refine outputs")
    args = parser.parse_args(argv)
    data = _parse_config(args.config)
    if args.steps:
        data["steps"] = [s.strip() for s in args.steps.split(",") if s.strip()]
    for name in ("tasks", "workers"):
        if getattr(args, name) is not None:
            data[name] = getattr(args, name)
    if args.tokenizer:
        data.setdefault("tokenize", {})["tokenizer"] = args.tokenizer
        steps = list(data.get("steps") or step_configs.DEFAULT_STEPS)
        data["steps"] = [*steps, "tokenize"] if "tokenize" not in steps else steps
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    summary = run_refine(args.input, args.output, RefineConfig.from_dict(data), force=args.force)
    json.dump({k: summary[k] for k in summary if k not in ("config", "by_extractor")}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":  # spawn-started workers re-import this module: keep the guard
    # Run the imported module's main, so that the steps pickled for worker processes are
    # dripper.refine.pipeline's classes, not copies living in __main__.
    from dripper.refine.pipeline import main as _main

    raise SystemExit(_main())
