"""Decontamination: remove from a corpus what shares an n-gram with the evaluation suite's own items.

The index is built from the very task documents lm-eval scores (``dripper.eval.lm_suite``: the suite's
tasks, their evaluation split, each item rendered as lm-eval renders it: the question, then each gold answer
after the task's target delimiter). The n-grams are datatrove's: :class:`SuiteDecontIndexer` runs datatrove's
``NGramsDecontIndexer.compute_hashes`` on those items as documents (text = the gold answer, metadata
``query`` and ``task``), writing datatrove's index format (``{task}.index.hashes``, one per benchmark of
the suite). datatrove's own ``run`` always loads lighteval's task registry as well, and lighteval is not
what scores these models: lm-eval is. Matching is datatrove's ``NGramsDecontFilter`` (same word
tokenizer, text normalisation and hash), in two modes:

- ``documents``: a document holding any indexed n-gram is dropped (datatrove's filter as is; the exclusion
  record names the n-gram and the benchmark);
- ``spans``: only the lines holding (part of) a matching n-gram are dropped (:class:`DecontSpanFilter`); a
  document left without text is dropped.

Counts per benchmark are in the step's datatrove stats (``contaminated_<benchmark>`` documents dropped,
``spans_<benchmark>`` documents whose lines were cut) and in the refine summary's ``decontamination``.
An item shorter than ``n`` words cannot be matched (as in GPT-3's and datatrove's decontamination).
"""

from __future__ import annotations

import contextlib
import json
import logging
import posixpath
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Any

from datatrove.data import Document
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.decont.n_grams import NGramsDecontConfig, NGramsDecontFilter, NGramsDecontIndexer
from datatrove.utils.text import ngrams, simplify_text

from dripper.refine.steps import DecontaminateConfig

__all__ = [
    "INDEX_MANIFEST",
    "DecontSpanFilter",
    "SuiteDecontIndexer",
    "build_decont_filter",
    "build_decont_index",
    "datatrove_config",
    "suite_items",
]

log = logging.getLogger(__name__)

#: What the index holds: the suite, n, and per benchmark its items and n-gram hashes (or why it is missing).
INDEX_MANIFEST = "index.json"


def datatrove_config(config: DecontaminateConfig) -> NGramsDecontConfig:
    """datatrove's n-gram settings for ours: n, and the question's own n-grams where ``query_ngrams``."""
    from datatrove.utils.hashing import HashConfig

    return NGramsDecontConfig(
        n_grams=config.n,
        find_query_ngrams=config.query_ngrams,
        find_overlap_ngrams=True,
        # sha1, not datatrove's default xxhash: xxhash 4 refuses the str n-grams datatrove 0.10 hashes.
        hash_config=HashConfig(precision=64, hash_fc="sha1"),
    )


class SuiteDecontIndexer(PipelineStep):
    """datatrove's n-gram indexer (``NGramsDecontIndexer``: its ``compute_hashes``, tokenizer, normalisation
    and hash) over the documents it is given only. Not its subclass: datatrove's class requires lighteval,
    whose task registry its ``run`` always loads."""

    type = "🦠 - DECONT"
    name = "💥 N-grams index (lm-eval items)"

    def __init__(self, output_folder: Any, config: NGramsDecontConfig, language: str = "en") -> None:
        from datatrove.io import get_datafolder
        from datatrove.utils.hashing import create_hash_func
        from datatrove.utils.word_tokenizers import load_word_tokenizer

        super().__init__()
        self.output_folder = get_datafolder(output_folder)
        self.config = config
        self.tokenizer = load_word_tokenizer(language)
        self.hash_func = create_hash_func(config.hash_config)
        self.counts: dict[str, int] = {}

    compute_hashes = NGramsDecontIndexer.compute_hashes

    def run(self, data: Any = None, rank: int = 0, world_size: int = 1) -> Any:
        hashes: dict[str, set[int]] = {}
        for doc in data or []:
            task = doc.metadata["task"]
            hashes.setdefault(task, set()).update(self.compute_hashes(doc.text, doc.metadata.get("query")))
        import numpy as np

        for task, task_hashes in hashes.items():
            array = np.array(sorted(task_hashes), dtype=self.config.hash_config.np_descr)
            with self.output_folder.open(f"{task}.index.hashes", mode="wb") as f:
                f.write(array.tobytes())
        self.counts = {task: len(task_hashes) for task, task_hashes in hashes.items()}
        return iter(())


# -- the suite's items ---------------------------------------------------------------------------------------


def _leaf_tasks(value: Any) -> Iterator[Any]:
    """The scored tasks of ``get_task_dict``'s answer (groups are nested dicts)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaf_tasks(item)
    elif hasattr(value, "eval_docs"):
        yield value


def _rendered(task: Any, doc: Any) -> tuple[str, list[str]]:
    """One item as lm-eval renders it: the question and its gold answers."""
    query = task.doc_to_text(doc)
    target = task.doc_to_target(doc)
    choices = task.doc_to_choice(doc) if task.OUTPUT_TYPE == "multiple_choice" else None
    if isinstance(query, int) and choices:  # the choices are the contexts (Winogrande): the gold one is asked
        return str(choices[query]), [str(target)]
    targets = target if isinstance(target, list) else [target]
    golds = [str(choices[t]) if choices and isinstance(t, int) else str(t) for t in targets]
    return str(query), [gold for gold in golds if gold.strip()]


def suite_items(
    config: DecontaminateConfig,
) -> tuple[list[Document], dict[str, int], dict[str, str]]:
    """The suite's scored items as datatrove documents (text: a gold answer; metadata: ``query``, ``task``:
    the suite's benchmark name), the items per benchmark, and the benchmarks whose data could not be loaded
    (with why).
    """
    try:
        from lm_eval.tasks import get_task_dict
    except ImportError as error:
        raise ImportError(
            f"decontaminate reads the suite's items with lm-eval ({error}): pip install 'dripper-platform[lmeval]', "
            "or leave the decontaminate step out"
        ) from None

    from dripper.eval.lm_suite import (
        fixture_datasets,
        load_failure,
        load_fixture_manifest,
        load_suite,
        task_manager,
    )

    suite = load_suite(config.suite)
    manager = task_manager(suite)
    context = (
        fixture_datasets(load_fixture_manifest(config.fixtures))
        if config.fixtures
        else contextlib.nullcontext()
    )
    documents: list[Document] = []
    items: Counter = Counter()
    unavailable: dict[str, str] = {}
    with context:
        for benchmark in suite.tasks:
            try:
                # lm-eval 0.4.13 deprecates get_task_dict (lm_suite's check uses it too): quiet here.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    tasks = list(_leaf_tasks(get_task_dict([benchmark.task], manager)))
            except Exception as error:  # noqa: BLE001 - any failure to load is reported per benchmark
                unavailable[benchmark.name] = load_failure(error)
                continue
            for task in tasks:
                for index, doc in enumerate(task.eval_docs):
                    try:
                        query, golds = _rendered(task, doc)
                    except Exception as error:  # noqa: BLE001 - one malformed item: counted, not fatal
                        log.warning(
                            "decontaminate: %s item %d not rendered: %s", benchmark.name, index, error
                        )
                        continue
                    items[benchmark.name] += 1
                    for gold in golds:
                        documents.append(
                            Document(
                                text=gold,
                                id=f"{benchmark.name}/{index}",
                                metadata={"query": query, "task": benchmark.name},
                            )
                        )
    return documents, dict(items), unavailable


def build_decont_index(
    config: DecontaminateConfig, index_folder: Any, language: str = "en"
) -> dict[str, Any]:
    """Build the n-gram index of the suite's items in ``index_folder`` (a datatrove folder spec) and write
    its manifest there; returns the manifest. An index already built with the same settings is reused.

    Raises:
        FileNotFoundError: some benchmarks' data cannot be loaded here (named, with the fix), unless
            ``config.skip_unavailable``.
    """
    from datatrove.io import get_datafolder

    folder = get_datafolder(index_folder)
    settings = {
        "suite": config.suite,
        "n": config.n,
        "query_ngrams": config.query_ngrams,
        "language": language,
    }
    if folder.exists(INDEX_MANIFEST):
        with folder.open(INDEX_MANIFEST, "r") as f:
            manifest = json.load(f)
        if manifest.get("settings") == settings:
            return manifest
    documents, items, unavailable = suite_items(config)
    if unavailable and not config.skip_unavailable:
        lines = "\n".join(f"  {name}: {why}" for name, why in unavailable.items())
        raise FileNotFoundError(
            f"decontaminate: suite {config.suite!r}: {len(unavailable)} benchmarks cannot load their items here "
            f"({', '.join(unavailable)}):\n{lines}\nMake their data available as for evaluation (the Hugging Face "
            "cache with HF_DATASETS_OFFLINE=1, or decontaminate.fixtures / --fixtures with local files), or set "
            "decontaminate.skip_unavailable to decontaminate against the others only (the summary lists the "
            "benchmarks left out)."
        )
    if unavailable:
        log.warning("decontaminate: not decontaminated against %s (no data here)", ", ".join(unavailable))
    indexer = SuiteDecontIndexer(folder, config=datatrove_config(config), language=language)
    indexer.run(documents)
    manifest = {
        "settings": settings,
        "suite": config.suite,
        "n": config.n,
        "benchmarks": {
            name: {"items": items[name], "ngrams": indexer.counts.get(name, 0)} for name in sorted(items)
        },
        "unavailable": unavailable,
    }
    with folder.open(INDEX_MANIFEST, "w") as f:
        f.write(json.dumps(manifest, indent=1) + "\n")
    return manifest


# -- the filters ---------------------------------------------------------------------------------------------


class DecontFilter(NGramsDecontFilter):
    """datatrove's n-gram filter, its reason naming the benchmark (``contaminated_<benchmark>``) and reading
    only the index's hash files."""

    def load_index_hashes(self) -> None:
        import numpy as np

        self._index_hashes = {}
        for file in self.index_folder.list_files(glob_pattern="*.index.hashes"):
            with self.index_folder.open(file, mode="rb") as f:
                hashes = np.frombuffer(f.read(), dtype=np.dtype(self.config.hash_config.np_descr))
            task = posixpath.basename(file).removesuffix(".index.hashes")
            self._index_hashes.update(dict.fromkeys(hashes.tolist(), task))

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        kept = super().filter(doc)
        if kept is True:
            return True
        return False, f"contaminated_{doc.metadata['contaminated_task']}"


class DecontSpanFilter(DecontFilter):
    """Drop only the lines of a document that hold (part of) an indexed n-gram; a document left empty is
    dropped. ``spans_<benchmark>`` counts the documents cut, ``lines_removed`` their lines."""

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        if self._index_hashes is None:
            self.load_index_hashes()
        lines = doc.text.split("\n")
        tokens: list[str] = []
        owner: list[int] = []
        for number, line in enumerate(lines):
            words = self.tokenizer.word_tokenize(simplify_text(line, self.config.norm_config))
            tokens.extend(words)
            owner.extend([number] * len(words))
        n = self.config.n_grams
        hit: set[int] = set()
        tasks: Counter = Counter()
        for start, gram in enumerate(ngrams(tokens, n)):
            task = self._index_hashes.get(self.hash_func(" ".join(gram)))
            if task is not None:
                hit.update(owner[start : start + n])
                tasks[task] += 1
        if not hit:
            return True
        first = tasks.most_common(1)[0][0]
        doc.metadata["contaminated_task"] = first
        doc.metadata["contaminated_lines"] = len(hit)
        text = "\n".join(line for number, line in enumerate(lines) if number not in hit)
        if not text.strip():
            self.stat_update(f"contaminated_{first}")
            return False, f"contaminated_{first}"
        for task in tasks:
            self.stat_update(f"spans_{task}")
        self.stat_update("lines_removed", value=len(hit))
        doc.text = text
        return True


def build_decont_filter(
    config: DecontaminateConfig, index_folder: Any, exclusion_writer: Any = None, language: str = "en"
) -> DecontFilter:
    """The datatrove step of ``decontaminate``: documents or spans mode over the index in ``index_folder``."""
    step = DecontSpanFilter if config.mode == "spans" else DecontFilter
    return step(
        index_folder, config=datatrove_config(config), exclusion_writer=exclusion_writer, language=language
    )
