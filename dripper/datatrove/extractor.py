"""``DripperExtractor``: this project's extractor as a datatrove step, in place of datatrove's ``Trafilatura()``.

A FineWeb-shaped pipeline swaps one step::

    from datatrove.executor import LocalPipelineExecutor
    from dripper.datatrove import DripperExtractor, DripperWarcReader

    LocalPipelineExecutor(pipeline=[
        DripperWarcReader("s3://commoncrawl/crawl-data/CC-MAIN-2024-10/segments/", glob_pattern="*/warc/*.warc.gz"),
        DripperExtractor("cpu"),            # was: Trafilatura(favour_precision=True)
        ...                                 # language, Gopher, C4, FineWeb filters, MinHash, writer
    ], tasks=64).run()

It reads each :class:`~datatrove.data.Document`'s ``text`` as HTML (``str``, or ``bytes`` decoded with the
charset in ``metadata["http_charset"]`` or sniffed), its URL from ``metadata["url"]``, runs the extractor of
an extractor spec (any registered labeler, a cascade, a fallback alone; docs/extraction.md#extractor-specs)
through :class:`dripper.pipeline.Extractor`, and writes the main content to ``text`` as plain text,
paragraphs kept, as datatrove's ``Trafilatura()`` does, so that stock filters (Gopher, C4, FineWeb) count
its words as they count Trafilatura's (``output="markdown"``: the Markdown, headings, lists and tables; a
pipeline that keeps it gives those filters :class:`~dripper.refine.language.QualityWordTokenizer`,
exported here, which reads words through the Markdown syntax),
with ``extractor`` (what produced it: ``dripper:cpu``, ``trafilatura``), ``fallback_reason``,
``page_confidence``, ``labeler`` and ``extractor_spec`` in ``metadata``.

**Batches.** Documents go to the labeler ``batch_size`` at a time (an LM engine or a ``vllm serve`` endpoint
wants many prompts at once; the CPU labeler does not care).

**Time bounds.** As datatrove's extractors bound each document, so does this step, three ways
(``sandbox``):

- ``process``: a forked child process holding the extractor (:class:`dripper.sandbox.Sandbox`, what
  datatrove's ``ExtractorSandbox`` does for its extractors, with the child's start bounded apart by
  ``startup_timeout``). Without a language model in the spec each document is a call of its own under
  ``timeout`` (one pipe round trip per document): a document past it, or whose child dies (out of memory, a
  crash in a C library), is dropped (``dropped:timeout``, ``dropped:broken_process``), the child is
  started again for the next one, and no document is extracted twice. With a language model (a batch
  is what an engine wants) a batch over ``timeout × documents`` seconds is retried one by one, each with
  ``timeout``: the one that still fails is dropped, the others are kept;
- ``signal``: the same bounds in this process with ``SIGALRM`` (no child, no pipe; cannot stop a C call that
  never returns to Python, and only works in the main thread, else it runs unbounded and says so once);
- ``none``: no bound.

``auto`` (the default) takes ``process``, or ``signal`` for a spec whose labeler needs a GPU (an engine
must not be rebuilt in a fresh child after every timeout). ``bench/datatrove_extract.py`` measures what the
child costs.

**Stats** (datatrove's ``stat_update``, in the task's stats file): ``total``, ``forwarded``, ``dropped``;
``extractor:{name}`` per result path; ``fallback:{kind}`` per fallback reason kind (``declined`` for pages
the labeler was not sure enough of, ``simplify_failed``, ``no_blocks``, ``label_failed``…); ``routed`` for
pages a cascade sent to its second labeler; ``dropped:{reason}`` per document dropped (``empty_input``,
``not_html``, ``too_large``, ``invalid_input`` for input that is no page; ``empty`` for a page whose
extraction holds no text; ``timeout``, ``broken_process``, ``error``). A document is either forwarded or
counted under one ``dropped:`` reason: nothing ends the task.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.utils.typeshelper import StatHints

__all__ = ["DripperExtractor", "ExtractorBuildError", "PageOutcome", "SANDBOXES"]

log = logging.getLogger(__name__)

SANDBOXES = ("auto", "process", "signal", "none")
#: Whether a child process may need this long to start and build its extractor (the first call of a
#: ``process`` sandbox waits for it on top of the batch's own bound).
DEFAULT_STARTUP_TIMEOUT = 300.0


@dataclass(slots=True)
class PageOutcome:
    """What the extractor made of one document (small and picklable: it crosses the sandbox's pipe)."""

    text: str
    extractor: str
    fallback_reason: str | None
    page_confidence: float | None
    routed: bool | None


class _Timeout(BaseException):
    """A batch or a document went past its time bound (``signal`` sandbox). A ``BaseException``, so that the
    pipeline's ``except Exception`` (a page the simplifier cannot take goes to the fallback) lets it through."""


class ExtractorBuildError(RuntimeError):
    """The spec's extractor could not be built (a missing model, a labeler that cannot start): a
    configuration problem, which ends the task rather than dropping every document."""


class DripperExtractor(PipelineStep):
    """Extract the main content of HTML documents with an extractor spec.

    Args:
        extractor: An extractor spec: a registered labeler name (``cpu``, ``cpu_seq``, ``trafilatura``,
            ``vllm``…), its text form (``casc=cpu`` …), a dict or an
            :class:`~dripper.config.extractor.ExtractorSpec` (a cascade with ``route`` included). Checked
            here, when the pipeline is built, not in the task.
        output: ``text`` (plain text, paragraphs kept: what datatrove's extractors write and its stock
            filters expect) or ``markdown`` (headings, lists, tables). The step's own choice: a spec's
            ``output`` field is the run folders' (the refine stage's), not read here.
        batch_size: Documents per labeler call.
        timeout: Seconds per document (a spec with a language model: its batch gets ``timeout × documents``);
            ``None``: no bound.
        sandbox: ``auto``, ``process``, ``signal`` or ``none`` (see the module docstring).
        startup_timeout: Seconds a ``process`` sandbox's child may take to start and build the extractor.
        max_page_bytes: Larger pages are dropped as ``too_large`` (default: the extract stage's).
    """

    name = "💧 Dripper"
    type = "🛢 - EXTRAC"

    def __init__(
        self,
        extractor: Any = "cpu",
        *,
        output: Literal["markdown", "text"] = "text",
        batch_size: int = 64,
        timeout: float | None = 10.0,
        sandbox: Literal["auto", "process", "signal", "none"] = "auto",
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        max_page_bytes: int | None = None,
    ) -> None:
        super().__init__()
        from dripper.config.extractor import check_labeler_options, labeler_is_lm, parse_extractor

        if output not in ("markdown", "text"):
            raise ValueError(f"output must be 'markdown' or 'text', got {output!r}")
        if sandbox not in SANDBOXES:
            raise ValueError(f"sandbox must be one of {', '.join(SANDBOXES)}, got {sandbox!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive (or None for no bound), got {timeout}")
        self.spec = parse_extractor(extractor)
        check_labeler_options([self.spec])
        self.output = output
        self.batch_size = batch_size
        self.timeout = timeout
        if sandbox == "auto":
            sandbox = "signal" if self.spec.needs_gpu else "process"
        self.sandbox = sandbox if timeout is not None else "none"
        # Each document a call of its own under its own timeout, in the process sandbox, for a spec with no
        # language model (a CPU labeler gains nothing from a batch): a hang costs that document alone and no
        # document is extracted twice. An LM wants its batch: bounded as a whole, retried one by one.
        route = self.spec.route
        lm = self.spec.is_lm or (route is not None and labeler_is_lm(route.labeler))
        self.per_document = self.sandbox == "process" and not lm
        self.startup_timeout = startup_timeout
        self.max_page_bytes = max_page_bytes
        self._pipeline: Any = None
        self._warned_unbounded = False

    # -- the work, in whichever process runs it ------------------------------------------------------

    def _build(self) -> Any:
        from dataclasses import replace

        from dripper.pipeline import ExtractOptions, Extractor

        if self._pipeline is None:
            options = ExtractOptions(batch_size=self.batch_size)
            if self.max_page_bytes is not None:
                options = replace(options, max_page_bytes=self.max_page_bytes)
            self._pipeline = Extractor.from_spec(self.spec, options)
        return self._pipeline

    def extract_pages(self, items: Sequence[tuple[str, str | bytes, str | None, str | None]]) -> Any:
        """Extract ``(doc_id, html, url, http_charset)`` items: one :class:`PageOutcome` per item, in order
        (what runs in the sandbox's child; an exception is returned, not raised, so the child lives on)."""
        from dripper.markdown_text import markdown_plain_text
        from dripper.types import Page

        try:
            pipeline = self._build()
        except Exception as error:  # noqa: BLE001 - crosses the sandbox's pipe, raised by the parent
            return ExtractorBuildError(
                f"extractor {self.spec.name!r} cannot be built: {type(error).__name__}: {error}"
            )
        try:
            if not items:
                return []
            pages = [Page(doc_id=i, html=h, url=u, http_charset=c) for i, h, u, c in items]
            outcomes = []
            for result in pipeline.extract_batch(pages):
                text = result.markdown
                if self.output == "text" and text:
                    text = markdown_plain_text(text)
                outcomes.append(
                    PageOutcome(
                        text=text,
                        extractor=result.extractor,
                        fallback_reason=result.fallback_reason,
                        page_confidence=result.stats.get("page_confidence"),
                        routed=result.stats.get("routed"),
                    )
                )
            return outcomes
        except Exception as error:  # noqa: BLE001 - reported to the parent, which retries per document
            return error

    # -- the step --------------------------------------------------------------------------------------

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        """Extract every document of ``data``; forward those with text, count the others by reason."""
        if data is None:
            return
        with self._bounded() as call:
            batch: list[Document] = []
            for document in data:
                self.stat_update(StatHints.total)
                batch.append(document)
                if len(batch) >= self.batch_size:
                    yield from self._finish(batch, call)
                    batch = []
            if batch:
                yield from self._finish(batch, call)

    def _finish(self, batch: list[Document], call: Any) -> DocumentsPipeline:
        items = [_item(document) for document in batch]
        with self.track_time(unit="batch"):
            outcomes = [_single(call([item])) for item in items] if self.per_document else call(items)
            if not isinstance(outcomes, list):
                # The batch failed as a whole (a timeout, a dead child, an error): one by one, so that only
                # the document that fails alone is lost.
                self.stat_update("batches_retried")
                outcomes = [_single(call([item])) for item in items]
        for document, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, str):
                self._drop(outcome)
                continue
            if not self._accept(document, outcome):
                continue
            self.stat_update(StatHints.forwarded)
            self.update_doc_stats(document)
            yield document

    def _accept(self, document: Document, outcome: PageOutcome) -> bool:
        reason = outcome.fallback_reason
        kind = reason.split(":", 1)[0] if reason else None
        if outcome.extractor == "none":
            self._drop(kind or "error")
            return False
        self.stat_update(f"extractor:{outcome.extractor}")
        if kind is not None:
            if kind == "label_failed" and "low confidence" in reason:
                kind = "declined"
            self.stat_update(f"fallback:{kind}")
        if outcome.routed:
            self.stat_update("routed")
        if not outcome.text.strip():
            self._drop("empty")
            return False
        document.text = outcome.text
        document.metadata.update(
            extractor=outcome.extractor,
            fallback_reason=reason,
            page_confidence=outcome.page_confidence,
            labeler=self.spec.labeler,
            extractor_spec=self.spec.name,
        )
        return True

    def _drop(self, reason: str) -> None:
        self.stat_update(StatHints.dropped, f"dropped:{reason}")

    # -- time bounds -------------------------------------------------------------------------------------

    @contextmanager
    def _bounded(self):
        """A callable ``items → outcomes | failure reason`` that keeps to the time bound."""
        if self.sandbox == "process":
            from dripper.sandbox import Sandbox

            # The child builds the extractor (an empty batch) before it reports ready, under startup_timeout.
            with Sandbox(self.extract_pages, start_timeout=self.startup_timeout, warmup=([],)) as sandbox:
                yield lambda items: self._in_child(sandbox, items)
            return
        if self.sandbox == "signal":
            yield self._with_alarm
            return
        yield lambda items: _as_outcomes(self.extract_pages(items))

    def _budget(self, items: Sequence[Any]) -> float:
        return self.timeout * len(items)

    def _in_child(self, sandbox: Any, items: list[Any]) -> Any:
        from dripper.sandbox import ChildError, SandboxDied, SandboxTimeout, SandboxUnavailable

        try:
            return _as_outcomes(sandbox.call(items, timeout=self._budget(items)))
        except SandboxUnavailable as error:
            raise ExtractorBuildError(
                f"extractor {self.spec.name!r}: {error} (startup_timeout={self.startup_timeout:g} s; "
                "sandbox='signal' bounds documents without a child process)"
            ) from error
        except SandboxTimeout:
            return "timeout"
        except SandboxDied:
            return "broken_process"
        except ChildError as error:
            log.warning("dripper extractor: %s", error)
            return "error"

    def _with_alarm(self, items: list[Any]) -> Any:
        if threading.current_thread() is not threading.main_thread():
            if not self._warned_unbounded:
                log.warning("dripper extractor: sandbox='signal' needs the main thread; running unbounded")
                self._warned_unbounded = True
            return _as_outcomes(self.extract_pages(items))
        _as_outcomes(self.extract_pages([]))  # building the extractor is not the documents' time

        def expire(signum: int, frame: Any) -> None:
            raise _Timeout

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, self._budget(items))
        try:
            return _as_outcomes(self.extract_pages(items))
        except _Timeout:
            return "timeout"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def _item(document: Document) -> tuple[str, str | bytes, str | None, str | None]:
    metadata = document.metadata or {}
    return document.id, document.text, metadata.get("url"), metadata.get("http_charset")


def _as_outcomes(result: Any) -> Any:
    """An exception returned by :meth:`DripperExtractor.extract_pages` as a failure reason."""
    if isinstance(result, BaseException):
        if isinstance(result, ExtractorBuildError):
            raise result
        if isinstance(result, _Timeout):
            return "timeout"
        log.warning("dripper extractor: %s: %s", type(result).__name__, result)
        return "error"
    return result


def _single(result: Any) -> PageOutcome | str:
    """The outcome of a one-document call, or its failure reason."""
    return result[0] if isinstance(result, list) else result
