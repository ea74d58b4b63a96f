"""A forked child process that runs one function for its parent under a deadline per call.

What datatrove's ``ExtractorSandbox`` does for its extractor steps (the ``fineweb`` arm and
``DripperExtractor`` both keep their time bounds this way), with three differences that matter here:

- the child's start (its warm-up: importing a library, building an extractor) is bounded apart from each
  call, so that a loaded machine is not taken for a slow page;
- an exception raised by the function in the child comes back as :class:`ChildError` and the child lives
  on (datatrove's child dies with it and is started again for the next document);
- where no child can be started (a daemonic Dask worker, no ``fork``) :class:`SandboxUnavailable` says so,
  and the caller decides (run unbounded, or stop).

The child is forked, so it inherits the parent's imports and the function's object (nothing is pickled
but each call's arguments and result); on Linux it asks the OOM killer to take it first, as datatrove's
does. A call past its deadline kills the child (:class:`SandboxTimeout`); a child that dies mid-call
(out of memory, a crash in a C library) raises :class:`SandboxDied`; the next call starts a new one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["ChildError", "Sandbox", "SandboxDied", "SandboxTimeout", "SandboxUnavailable"]

log = logging.getLogger(__name__)


class SandboxUnavailable(RuntimeError):
    """No child process could be started here, or it did not start within ``start_timeout``."""


class SandboxTimeout(TimeoutError):
    """A call ran past its deadline; its child was killed."""


class SandboxDied(RuntimeError):
    """The child died during a call (out of memory, a crash in a C library)."""


class ChildError(RuntimeError):
    """The function raised in the child (``"TypeName: message"``); the child lives on."""


class Sandbox:
    """Runs ``function(*args)`` in a forked child, one call at a time, each under its own deadline.

    Args:
        function: What the child runs.
        start_timeout: Seconds a new child may take to start and run ``warmup``.
        warmup: Arguments of a first call made by the child before it reports ready (its result is
            dropped), e.g. to build an extractor once per child.
    """

    def __init__(
        self, function: Callable[..., Any], start_timeout: float = 120.0, warmup: Sequence[Any] | None = None
    ) -> None:
        self.function = function
        self.start_timeout = start_timeout
        self.warmup = tuple(warmup) if warmup is not None else None
        self.process: Any = None
        self.conn: Any = None
        self.started = 0

    def call(self, *args: Any, timeout: float) -> Any:
        """``function(*args)`` in the child, within ``timeout`` seconds (a child is started first if none
        is alive, under ``start_timeout``).

        Raises:
            SandboxUnavailable: no child could be started.
            SandboxTimeout: past ``timeout`` (the child is killed).
            SandboxDied: the child died during the call.
            ChildError: the function raised in the child.
        """
        if self.process is None or not self.process.is_alive():
            self.stop()
            self._start()
        self.conn.send(args)
        if not self.conn.poll(timeout):  # a dead child's end of the pipe is readable: recv says EOF
            self.stop()
            raise SandboxTimeout(f"call ran past timeout={timeout:g}s")
        try:
            ok, value = self.conn.recv()
        except EOFError:
            self.stop()
            raise SandboxDied("the sandbox process died (out of memory?)") from None
        if not ok:
            raise ChildError(value)
        return value

    def _start(self) -> None:
        import multiprocessing

        try:
            context = multiprocessing.get_context("fork")
            parent, child = context.Pipe()
            process = context.Process(target=_serve, args=(child, self.function, self.warmup), daemon=True)
            process.start()
        except (AssertionError, ValueError, OSError) as error:  # daemonic parent, no fork, no resources
            raise SandboxUnavailable(f"no sandbox process can be started here ({error})") from None
        child.close()
        self.process, self.conn = process, parent
        self.started += 1
        if not parent.poll(self.start_timeout):
            self.stop()
            raise SandboxUnavailable(f"the sandbox process did not start within {self.start_timeout:g} s")
        try:
            parent.recv()
        except EOFError:
            self.stop()
            raise SandboxUnavailable("the sandbox process died while starting") from None

    def stop(self) -> None:
        """Kill the child (if any) and wait for it: its CPU time is then counted as the parent's child's."""
        if self.conn is not None:
            self.conn.close()
        if self.process is not None:
            self.process.kill()
            self.process.join(timeout=5)
        self.process = self.conn = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _serve(conn: Any, function: Callable[..., Any], warmup: tuple[Any, ...] | None) -> None:
    """The child: run ``warmup``, report ready, then answer each call with ``(ok, result or error)``."""
    try:
        with open("/proc/self/oom_score_adj", "w") as adj:  # noqa: PTH123 - Linux only, best effort
            adj.write("1000\n")
    except OSError:
        pass
    if warmup is not None:
        try:
            function(*warmup)
        except Exception as error:  # noqa: BLE001 - the first real call reports it again
            log.debug("sandbox warm-up failed: %s", error)
    conn.send(None)
    while True:
        try:
            args = conn.recv()
        except EOFError:
            return
        try:
            conn.send((True, function(*args)))
        except Exception as error:  # noqa: BLE001 - the parent raises it for this call
            conn.send((False, f"{type(error).__name__}: {error}"))
