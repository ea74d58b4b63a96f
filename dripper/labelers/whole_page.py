"""Whole-page extractors: the ablation's baseline arms, run exactly as the corpora they stand for were made.

A :class:`PageExtractor` turns a whole page into its text in one call (no simplification, no blocks, no
labels). It is registered beside the block labelers and named in the same extractor specs (``fineweb``,
``dclm``: ``dripper extract --extractor fineweb``, the stage configs, the DAG forms); the pipeline
(:class:`dripper.pipeline.Extractor`) writes its text as the result's ``markdown``, with ``main_html``
empty, ``labels`` ``None`` and ``extractor`` its name.

==========  ===========================================================================================
``fineweb`` FineWeb's extraction: datatrove's own ``Trafilatura(favour_precision=True)`` step (its
            ``extract``: ``trafilatura.extract(html, favor_precision=True, include_comments=False,
            deduplicate=True)``, plain text), with datatrove's per-page ``timeout`` (1 s by default) in a
            child process, as datatrove's step runs it. Pages as bytes are decoded as datatrove's ``WarcReader``
            decodes them (UTF-8, else cchardet's guess). Source: datatrove ``examples/fineweb.py`` and
            ``src/datatrove/pipeline/extractors/trafilatura.py``.
``dclm``    DCLM's extraction: Resiliparse's ``extract_plain_text(html, main_content=True)``. DCLM's
            repository says DCLM-Pool is Common Crawl that "has only undergone text extraction (via
            resiliparse)" (mlfoundations/dclm ``README.md``, "Selecting Raw Sources") and its paper
            (arXiv 2406.11794, §3.1/§4.2) uses Resiliparse's main-content mode; the other arguments are
            Resiliparse's defaults (``preserve_formatting``, ``list_bullets``, ``alt_texts``, ``comments``
            on; ``links``, ``form_fields``, ``noscript`` off), each an option here. Pages as bytes:
            UTF-8, else Resiliparse's ``detect_encoding``.
==========  ===========================================================================================

Each extractor reports its exact settings (:meth:`PageExtractor.settings`), which the ablation report shows.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from dripper.sandbox import Sandbox, SandboxTimeout, SandboxUnavailable

__all__ = ["DclmExtractor", "FineWebExtractor", "PageExtractor", "PageExtractorTimeout"]

log = logging.getLogger(__name__)


class PageExtractorTimeout(TimeoutError):
    """The extraction of one page ran past the extractor's ``timeout``."""


class PageExtractor(ABC):
    """Extracts a whole page's text in one call.

    Subclasses set ``name`` and ``source`` and implement :meth:`extract_text`; they may override
    :meth:`decode` (how the anchor decoded bytes) and :meth:`settings`. The class declares what it takes as
    a labeler does (its signature, ``required_options``, :meth:`check_options`), so specs are checked the
    same way, without building it.

    With ``timeout`` (seconds) each page is extracted in a forked child process killed past the deadline
    (:class:`dripper.sandbox.Sandbox`, as datatrove's extractor steps do); a page over it raises
    :class:`PageExtractorTimeout` from :meth:`extract`. Where no child process can be started (a daemonic
    worker), pages are extracted in this process without a deadline (``stats["sandbox"] == "unavailable"``).
    """

    name: ClassVar[str] = "page"
    source: ClassVar[str] = ""
    """Where the settings come from (for the report and the docs)."""
    is_lm: ClassVar[bool] = False
    needs_block_text: ClassVar[bool] = False
    required_options: ClassVar[Mapping[str, str]] = {}

    def __init__(self, timeout: float | None = None) -> None:
        if timeout is not None and timeout <= 0:
            raise ValueError(f"{self.name}: timeout must be positive seconds or None, got {timeout}")
        self.timeout = timeout
        self._sandbox: Any = None
        self._sandbox_failed = False
        self.stats: dict[str, Any] = {"pages": 0, "empty": 0, "timeouts": 0, "errors": 0, "seconds": 0.0}

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` for option values the extractor would refuse (no import of its library)."""
        timeout = options.get("timeout")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise ValueError(f"timeout must be positive seconds or null, got {timeout!r}")

    @classmethod
    def needs_gpu(cls, options: Mapping[str, Any]) -> bool:
        return False

    @abstractmethod
    def extract_text(self, html: str, url: str | None = None) -> str:
        """The page's text ('' when the extractor finds nothing)."""

    #: Settings that are not options (the function called, what it is told to leave out).
    fixed_settings: ClassVar[Mapping[str, Any]] = {}
    #: The distributions whose versions the settings record.
    libraries: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def settings_for(cls, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The settings a spec's ``options`` give, without building the extractor (no import of its
        library): the fixed ones, every option at its value or default, and the libraries' versions."""
        import inspect

        values = {
            name: parameter.default
            for name, parameter in inspect.signature(cls.__init__).parameters.items()
            if name != "self" and parameter.default is not inspect.Parameter.empty
        }
        values.update(options or {})
        return {**cls.fixed_settings, **values, **{name: _version(name) for name in cls.libraries}}

    def settings(self) -> dict[str, Any]:
        """The exact settings this extractor runs with (shown in the ablation report)."""
        return type(self).settings_for({"timeout": self.timeout})

    def describe(self) -> dict[str, Any]:
        """``{"name", "source", "settings"}``: what the report shows of a baseline arm."""
        return {"name": self.name, "source": self.source, "settings": self.settings()}

    def decode(self, data: bytes, http_charset: str | None = None) -> str:
        """Bytes to text as the anchor's reader did (default: strict UTF-8, else the pipeline's decoder);
        ``ValueError`` for a page the anchor could not decode (it ends as ``none``, ``invalid_input``)."""
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            from dripper.decode import decode_html

            return decode_html(data, http_charset).text

    def extract(self, html: str, url: str | None = None) -> str:
        """:meth:`extract_text` under the timeout; counts pages, empties, timeouts and errors."""
        started = time.perf_counter()
        self.stats["pages"] += 1
        try:
            text = self._run(html, url) or ""
        except PageExtractorTimeout:
            self.stats["timeouts"] += 1
            raise
        except Exception:
            self.stats["errors"] += 1
            raise
        finally:
            self.stats["seconds"] += time.perf_counter() - started
        if not text:
            self.stats["empty"] += 1
        return text

    def _run(self, html: str, url: str | None) -> str | None:
        if self.timeout is None or self._sandbox_failed:
            return self.extract_text(html, url)
        if self._sandbox is None:
            self.extract_text("", None)  # import the library here: the forked process inherits it
            self._sandbox = Sandbox(self.extract_text, start_timeout=self.START_SECONDS)
        try:
            return self._sandbox.call(html, url, timeout=self.timeout)
        except SandboxUnavailable as error:
            log.warning("%s: %s; extracting without a per-page timeout", self.name, error)
            self._sandbox_failed = True
            self.stats["sandbox"] = "unavailable"
            return self.extract_text(html, url)
        except SandboxTimeout:
            raise PageExtractorTimeout(f"extraction ran past timeout={self.timeout:g}s") from None

    #: Seconds a sandbox process may take to start, apart from the per-page timeout.
    START_SECONDS: ClassVar[float] = 120.0

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_sandbox"] = None  # the process and its pipe stay with their owner
        return state

    def close(self) -> None:
        if self._sandbox is not None:
            sandbox, self._sandbox = self._sandbox, None
            sandbox.stop()


class FineWebExtractor(PageExtractor):
    """FineWeb's text: datatrove's own ``Trafilatura(favour_precision=True)`` step, page by page.

    Args:
        timeout: Seconds per page (datatrove's default, 1, as FineWeb ran it); ``None``: no deadline.
        favour_precision: datatrove's argument (FineWeb: ``True``).
        deduplicate: Trafilatura's ``deduplicate`` (datatrove's default, ``True``).
    """

    name = "fineweb"
    source = (
        "datatrove examples/fineweb.py: Trafilatura(favour_precision=True) "
        "(datatrove/pipeline/extractors/trafilatura.py: include_comments=False, deduplicate=True)"
    )

    def __init__(self, timeout: float | None = 1.0, favour_precision: bool = True, deduplicate: bool = True):
        super().__init__(timeout)
        try:
            from datatrove.pipeline.extractors import Trafilatura
        except ImportError as error:
            raise ImportError(
                f"the fineweb extractor runs datatrove's Trafilatura step ({error}): "
                "pip install 'dripper-platform[refine]'"
            ) from None

        self._step = Trafilatura(
            favour_precision=favour_precision, timeout=timeout or 1, deduplicate=deduplicate
        )

    def extract_text(self, html: str, url: str | None = None) -> str:
        # datatrove's step passes the HTML only (no URL): so does this, for the same text.
        return self._step.extract(html) or ""

    def decode(self, data: bytes, http_charset: str | None = None) -> str:
        """As datatrove's ``WarcReader`` (``process_record``): UTF-8, else cchardet's guess; a page neither
        decodes raises ``ValueError`` (datatrove skips that record: the page ends as ``none``)."""
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        try:
            import cchardet
        except ImportError:  # datatrove's WarcReader needs it too; without it, the pipeline's decoder
            return super().decode(data, http_charset)
        encoding = cchardet.detect(data)["encoding"]
        if not encoding or encoding == "UTF-8":
            raise ValueError("undecodable: not UTF-8 and no other charset detected (datatrove skips it)")
        try:
            return data.decode(encoding)
        except (UnicodeDecodeError, LookupError) as error:
            raise ValueError(f"undecodable as detected {encoding} ({error}); datatrove skips it") from None

    fixed_settings = {
        "step": "datatrove.pipeline.extractors.Trafilatura",
        "include_comments": False,
        "output": "plain text",
    }
    libraries = ("datatrove", "trafilatura")

    def settings(self) -> dict[str, Any]:
        step = self._step
        return self.settings_for(
            {
                "timeout": self.timeout,
                "favour_precision": step.favour_precision,
                "deduplicate": step.deduplicate,
            }
        )


class DclmExtractor(PageExtractor):
    """DCLM's text: Resiliparse's ``extract_plain_text`` with ``main_content=True``.

    Args:
        main_content: Resiliparse's main-content heuristics (DCLM: ``True``).
        preserve_formatting, list_bullets, alt_texts, links, form_fields, noscript, comments: Resiliparse's
            arguments, at its defaults (DCLM set none of them).
        timeout: Seconds per page; ``None`` (DCLM's pipeline had none): no deadline.
    """

    name = "dclm"
    source = (
        "mlfoundations/dclm README.md (DCLM-Pool: text extraction via resiliparse) and arXiv 2406.11794: "
        "resiliparse extract_plain_text(html, main_content=True), other arguments at Resiliparse's defaults"
    )

    def __init__(
        self,
        main_content: bool = True,
        preserve_formatting: bool = True,
        list_bullets: bool = True,
        alt_texts: bool = True,
        links: bool = False,
        form_fields: bool = False,
        noscript: bool = False,
        comments: bool = True,
        timeout: float | None = None,
    ):
        super().__init__(timeout)
        try:
            from resiliparse.extract.html2text import extract_plain_text
        except ImportError as error:
            raise ImportError(
                f"the dclm extractor runs Resiliparse ({error}): pip install 'dripper-platform[dataplane]'"
            ) from None

        self._extract = extract_plain_text
        self.arguments = {
            "main_content": main_content,
            "preserve_formatting": preserve_formatting,
            "list_bullets": list_bullets,
            "alt_texts": alt_texts,
            "links": links,
            "form_fields": form_fields,
            "noscript": noscript,
            "comments": comments,
        }

    def extract_text(self, html: str, url: str | None = None) -> str:
        return self._extract(html, **self.arguments) or ""

    def decode(self, data: bytes, http_charset: str | None = None) -> str:
        """UTF-8, else Resiliparse's ``detect_encoding`` (``bytes_to_str``)."""
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            from resiliparse.parse.encoding import bytes_to_str, detect_encoding

            return bytes_to_str(data, detect_encoding(data))

    fixed_settings = {"function": "resiliparse.extract.html2text.extract_plain_text"}
    libraries = ("resiliparse",)

    def settings(self) -> dict[str, Any]:
        return self.settings_for({**self.arguments, "timeout": self.timeout})


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None
