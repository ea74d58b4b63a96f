"""dripper.sandbox: a forked child per sandbox, a deadline per call, its start bounded apart."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from dripper.sandbox import ChildError, Sandbox, SandboxDied, SandboxTimeout, SandboxUnavailable


def work(kind: str, value: int = 0) -> object:
    if kind == "pid":
        return os.getpid()
    if kind == "double":
        return 2 * value
    if kind == "raise":
        raise ValueError(f"bad value {value}")
    if kind == "sleep":
        time.sleep(value)
        return "woke"
    if kind == "exit":
        os._exit(3)
    raise AssertionError(kind)


def test_calls_run_in_one_child_that_outlives_the_function_raising():
    with Sandbox(work) as sandbox:
        pid = sandbox.call("pid", timeout=10)
        assert pid != os.getpid()
        assert sandbox.call("double", 21, timeout=10) == 42
        with pytest.raises(ChildError, match="ValueError: bad value 7"):
            sandbox.call("raise", 7, timeout=10)
        assert sandbox.call("pid", timeout=10) == pid and sandbox.started == 1
    assert sandbox.process is None


def test_a_call_past_its_deadline_kills_the_child_and_the_next_call_starts_another():
    with Sandbox(work) as sandbox:
        first = sandbox.call("pid", timeout=10)
        started = time.monotonic()
        with pytest.raises(SandboxTimeout):
            sandbox.call("sleep", 30, timeout=0.5)
        assert time.monotonic() - started < 30  # sooner than the call's sleep: the deadline cut it
        assert sandbox.call("pid", timeout=10) != first and sandbox.started == 2


def test_a_child_that_dies_mid_call_is_reported_and_replaced():
    with Sandbox(work) as sandbox:
        with pytest.raises(SandboxDied):
            sandbox.call("exit", timeout=10)
        assert sandbox.call("double", 2, timeout=10) == 4 and sandbox.started == 2


def test_the_start_is_bounded_apart_from_the_calls():
    # A warm-up slower than any call's deadline is the start's time, not the call's.
    with Sandbox(work, start_timeout=30, warmup=("sleep", 1)) as sandbox:
        assert sandbox.call("double", 1, timeout=0.5) == 2
    # A start past its own bound: no sandbox here, said as such.
    with (
        Sandbox(work, start_timeout=0.5, warmup=("sleep", 30)) as sandbox,
        pytest.raises(SandboxUnavailable, match="did not start within 0.5 s"),
    ):
        sandbox.call("double", 1, timeout=10)
    # A warm-up that raises does not stop the child: the calls report their own errors.
    with Sandbox(work, warmup=("raise", 1)) as sandbox:
        assert sandbox.call("double", 3, timeout=10) == 6


def _in_a_daemon(queue) -> None:
    try:
        Sandbox(work).call("pid", timeout=10)
        queue.put("started")
    except SandboxUnavailable as error:
        queue.put(str(error))


def test_a_daemonic_process_gets_a_clear_unavailable():
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    daemon = context.Process(target=_in_a_daemon, args=(queue,), daemon=True)
    daemon.start()
    message = queue.get(timeout=30)
    daemon.join(timeout=10)
    assert message.startswith("no sandbox process can be started here") and "daemonic" in message
