#!/usr/bin/env python3
"""Container health check for every image of the stack (installed as ``dripper-healthcheck``).

    dripper-healthcheck                      # check whatever this container runs (from PID 1's command line)
    dripper-healthcheck http://host:port/p   # GET the URL: healthy on a 2xx answer
    dripper-healthcheck airflow COMPONENT    # api-server, scheduler, dag-processor, triggerer, celery-worker

Exit status 0 is healthy, 1 unhealthy (Docker's convention). The standard library only: the images carry
no curl. What "healthy" means per service:

- Airflow API server: ``/api/v2/version`` answers; scheduler: its health server (``:8974/health``,
  ``AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK``) answers; DAG processor and triggerer: ``airflow jobs
  check --local`` finds their live job; Celery worker: it answers a ping.
- Dask scheduler and workers: ``/health`` on their HTTP (dashboard) port.
- vLLM's OpenAI-compatible server: ``/health`` (200 once the model is loaded).
- Anything else (a one-shot job, a shell): healthy while it runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

TIMEOUT_S = float(os.environ.get("DRIPPER_HEALTHCHECK_TIMEOUT", "10"))
INITS = {"docker-init", "tini", "dumb-init", "catatonit"}
AIRFLOW_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer", "celery-worker")


def http_ok(url: str, timeout: float = TIMEOUT_S) -> bool:
    """Whether a GET of ``url`` answers 2xx within ``timeout`` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - local URLs only
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def command_ok(command: list[str], timeout: float = 60.0) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=timeout, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def option(argv: list[str], name: str, default: str) -> str:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in ``argv``."""
    for index, arg in enumerate(argv):
        if arg == name and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return default


def port_of(address: str, default: int) -> int:
    """The port of ``:8787``, ``0.0.0.0:8787``, ``tcp://host:8787`` or ``8787``."""
    tail = address.rsplit(":", 1)[-1].strip("/")
    return int(tail) if tail.isdigit() else default


def main_command(cmdline: list[str]) -> list[str]:
    """PID 1's command without an init wrapper (``docker-init -- airflow scheduler`` → ``airflow scheduler``)."""
    if cmdline and Path(cmdline[0]).name in INITS:
        rest = cmdline[1:]
        return rest[rest.index("--") + 1 :] if "--" in rest else rest
    return cmdline


def read_pid1() -> list[str]:
    try:
        raw = Path("/proc/1/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def airflow_ok(component: str) -> bool:
    if component == "api-server":
        port = os.environ.get("AIRFLOW__API__PORT", "8080")
        return http_ok(f"http://127.0.0.1:{port}/api/v2/version")
    if component == "scheduler":
        port = os.environ.get("AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT", "8974")
        return http_ok(f"http://127.0.0.1:{port}/health")
    if component in ("dag-processor", "triggerer"):
        job = "DagProcessorJob" if component == "dag-processor" else "TriggererJob"
        return command_ok(["airflow", "jobs", "check", "--job-type", job, "--local"])
    if component == "celery-worker":
        app = "airflow.providers.celery.executors.celery_executor.app"
        node = f"celery@{os.environ.get('HOSTNAME', '')}"
        return command_ok(["celery", "--app", app, "inspect", "ping", "-d", node])
    raise ValueError(f"unknown Airflow component {component!r}; expected one of {AIRFLOW_COMPONENTS}")


def check_for(command: list[str]) -> tuple[str, object]:
    """What to check for a container whose main command is ``command``: ``(kind, target)``.

    Kinds: ``("airflow", component)``, ``("http", url)``, ``("none", None)``.
    """
    words = [Path(word).name for word in command]
    # The Airflow image's entry point `dripper-airflow` runs `airflow`; an init keeps it in PID 1's command.
    airflow = next((word for word in words if word in ("airflow", "dripper-airflow")), None)
    if airflow:
        rest = words[words.index(airflow) + 1 :]
        if rest[:2] == ["celery", "worker"]:
            return "airflow", "celery-worker"
        if rest and rest[0] in AIRFLOW_COMPONENTS:
            return "airflow", rest[0]
        return "none", None
    if "dask" in words or "dask-scheduler" in words or "dask-worker" in words:
        is_scheduler = "scheduler" in words or "dask-scheduler" in words
        default = ":8787" if is_scheduler else ""
        address = option(command, "--dashboard-address", default)
        if not address:
            return "none", None  # a worker without a fixed HTTP port: nothing to ask
        return "http", f"http://127.0.0.1:{port_of(address, 8787)}/health"
    if any("vllm" in word for word in command):
        return "http", f"http://127.0.0.1:{option(command, '--port', '8000')}/health"
    return "none", None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if args and args[0].startswith(("http://", "https://")):
        return 0 if http_ok(args[0]) else 1
    if args and args[0] == "airflow":
        if len(args) != 2:
            print(f"usage: dripper-healthcheck airflow {{{','.join(AIRFLOW_COMPONENTS)}}}", file=sys.stderr)
            return 2
        return 0 if airflow_ok(args[1]) else 1
    if args:
        print(f"dripper-healthcheck: unknown argument {args[0]!r}; see --help", file=sys.stderr)
        return 2
    kind, target = check_for(main_command(read_pid1()))
    if kind == "airflow":
        return 0 if airflow_ok(str(target)) else 1
    if kind == "http":
        return 0 if http_ok(str(target)) else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
