"""``make demo``: Airflow on this machine (SQLite, every server on 127.0.0.1) builds a corpus from the bundled
sample snapshot, and the UI stays up with the run in it.

1. Starts the Airflow API server (UI, REST; 127.0.0.1:8080), scheduler, DAG processor and triggerer with
   ``scripts/airflow_env.sh``'s settings (AIRFLOW_HOME=out/airflow), unless this script's servers already
   run; their logs are ``out/airflow/demo-logs/*.log``.
2. Triggers ``corpus_build`` through the REST API on ``data/sample`` (4 WARC files) with the CPU labeler
   (``trafilatura`` when no ``cpu`` labeler is registered), a tokenizer found or trained locally, and waits.
3. Prints where the corpus is and its run summary, the UI's address and login, and how to stop it.

No network, no GPU. Run again: the servers are reused and the build resumes in the same run root, so the
finished stages are skipped (``--fresh`` deletes the demo's runs first). Stop: ``make demo-stop``
(``python scripts/airflow_demo.py --stop``), which ends only the processes this script started.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ENV_SCRIPT = REPO / "scripts" / "airflow_env.sh"
SERVERS = {
    "api-server": ["api-server", "--host", "127.0.0.1", "--port", "{port}"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}
DAG_ID = "corpus_build"


def airflow_environment(overrides: dict[str, str] | None = None) -> dict[str, str]:
    """The environment ``scripts/airflow_env.sh`` sets up, on top of this process's and ``overrides``
    (e.g. ``AIRFLOW_HOME``, ``DRIPPER_AIRFLOW_PORT``, ``DRIPPER_RUN_ROOT`` for a test's own Airflow)."""
    # The demo's Airflow is the repository's (out/airflow), whatever Airflow this shell points at.
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    output = subprocess.run(
        ["bash", "-c", f'source "{ENV_SCRIPT}" >/dev/null && env -0'],
        check=True,
        capture_output=True,
        env={**base, **(overrides or {})},
    ).stdout
    return dict(item.split("=", 1) for item in output.decode().split("\0") if "=" in item)


def say(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- processes --------------------------------------------------------------------------------------------


def pid_dir(env: dict[str, str]) -> Path:
    return Path(env["AIRFLOW_HOME"]) / "demo-pids"


def running_pid(path: Path) -> int | None:
    """The pid in ``path`` if that process is alive and is one of ours (an ``airflow`` command)."""
    try:
        pid = int(path.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    return pid if "airflow" in cmdline else None


def start_servers(env: dict[str, str]) -> None:
    pids, logs = pid_dir(env), Path(env["AIRFLOW_HOME"]) / "demo-logs"
    pids.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    for name, arguments in SERVERS.items():
        if running_pid(pids / f"{name}.pid"):
            say(f"{name} is already running (pid {running_pid(pids / f'{name}.pid')})")
            continue
        command = [shutil.which("airflow", path=env["PATH"]) or "airflow"]
        command += [a.format(port=env["DRIPPER_AIRFLOW_PORT"]) for a in arguments]
        with open(logs / f"{name}.log", "ab") as log:
            # A session of its own: `--stop` ends the server and the workers it forked, nothing else.
            process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True
            )
        (pids / f"{name}.pid").write_text(str(process.pid))
        say(f"started {name} (pid {process.pid}), log {logs / f'{name}.log'}")


def stop_servers(env: dict[str, str]) -> int:
    stopped = 0
    for name in reversed(list(SERVERS)):
        path = pid_dir(env) / f"{name}.pid"
        pid = running_pid(path)
        if pid is None:
            path.unlink(missing_ok=True)
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)  # its own session: the group is this server and its children
        for _ in range(40):
            if running_pid(path) is None:
                break
            time.sleep(0.5)
        else:
            os.killpg(pid, signal.SIGKILL)
        path.unlink(missing_ok=True)
        say(f"stopped {name} (pid {pid})")
        stopped += 1
    if not stopped:
        say("no demo server was running")
    return 0


def listening_addresses(env: dict[str, str]) -> list[str]:
    """``ip:port (server)`` for every TCP port the demo's processes (and their children) listen on."""
    import psutil

    found = []
    for name in SERVERS:
        pid = running_pid(pid_dir(env) / f"{name}.pid")
        if pid is None:
            continue
        try:
            root = psutil.Process(pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for process in processes:
            try:
                connections = process.net_connections(kind="inet")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            for connection in connections:
                if connection.status == psutil.CONN_LISTEN:
                    found.append(f"{connection.laddr.ip}:{connection.laddr.port} ({name})")
    return sorted(set(found))


# -- REST --------------------------------------------------------------------------------------------------


class Api:
    """The few REST calls the demo makes (``/auth/token``, ``/api/v2/…``)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.token: str | None = None

    def call(self, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read()
        return json.loads(text) if text else None

    def wait_until_up(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            try:
                self.call("GET", "/api/v2/monitor/health", timeout=5)
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the API server did not answer on {self.base_url} within {seconds:.0f} s"
                    ) from None
                time.sleep(1)

    def login(self, username: str, password: str) -> None:
        self.token = self.call("POST", "/auth/token", {"username": username, "password": password})[
            "access_token"
        ]


def admin_password(env: dict[str, str], seconds: float = 60) -> str:
    path = Path(env["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            raise FileNotFoundError(f"{path} was not written by the API server")
        time.sleep(1)
    return json.loads(path.read_text())["admin"]


def wait_for_dag(api: Api, seconds: float, dag_id: str = DAG_ID) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            api.call("GET", f"/api/v2/dags/{dag_id}")
            return
        except urllib.error.HTTPError as error:
            if error.code != 404 or time.monotonic() > deadline:
                raise
        errors = api.call("GET", "/api/v2/importErrors")
        if errors and errors.get("import_errors"):
            raise RuntimeError(f"DAG import errors: {json.dumps(errors['import_errors'], indent=1)[:2000]}")
        time.sleep(2)


def start_airflow(env: dict[str, str], seconds: float = 240) -> Api:
    """Migrates the SQLite database, starts the servers not already running, logs in as admin and waits
    until the DAG processor has loaded ``corpus_build``; returns the logged-in client."""
    airflow = shutil.which("airflow", path=env["PATH"]) or "airflow"
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True)
    start_servers(env)
    api = Api(f"http://127.0.0.1:{env['DRIPPER_AIRFLOW_PORT']}")
    api.wait_until_up(seconds)
    api.login("admin", admin_password(env))
    say("API server up; waiting for the DAG processor to load corpus_build")
    wait_for_dag(api, seconds)
    return api


#: DAGs the demo unpauses beside corpus_build: they run only when triggered, and run on this machine.
MANUAL_DAGS = ("extractor_ablation", "extraction_benchmark")
#: DAGs that stay paused, and why.
PAUSED_DAGS = {
    "cc_snapshot_refresh": "it runs weekly and reads Common Crawl's snapshot list from the internet, which "
    "this machine may not reach; unpause it in the UI where data.commoncrawl.org answers",
}


def unpause_manual_dags(api: Api, seconds: float = 120) -> list[str]:
    """Unpause :data:`MANUAL_DAGS` (triggered by hand from the UI or REST, they would otherwise stay queued);
    returns the DAG ids unpaused."""
    for dag_id in MANUAL_DAGS:
        wait_for_dag(api, seconds, dag_id)
        api.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
    return list(MANUAL_DAGS)


def trigger(api: Api, run_id: str, conf: dict[str, Any], dag_id: str = DAG_ID) -> None:
    """Unpauses ``dag_id`` (``corpus_build``) and starts run ``run_id`` with ``conf``."""
    api.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
    api.call(
        "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"dag_run_id": run_id, "logical_date": None, "conf": conf}
    )


# -- the run ----------------------------------------------------------------------------------------------


def demo_labeler() -> str:
    """``cpu`` when that labeler is registered and builds (its model ships in the package), else
    ``trafilatura``."""
    sys.path.insert(0, str(REPO))
    from dripper.labelers import available_labelers, build_labeler

    if "cpu" not in available_labelers():
        return "trafilatura"
    try:
        build_labeler("cpu").close()
    except Exception as error:  # a missing model file, a missing dependency: the demo still runs
        say(f"the cpu labeler cannot be built here ({error}); using trafilatura")
        return "trafilatura"
    return "cpu"


def demo_tokenizer(env: dict[str, str]) -> str:
    """Qwen's tokenizer when ``scripts/make_tiny_models.py`` has built it, else a small byte-level BPE
    trained here on the sample's ground truth (a second, offline)."""
    qwen = REPO / ".cache" / "models" / "qwen-tokenizer" / "tokenizer.json"
    if qwen.exists():
        return str(qwen.parent)
    return sample_tokenizer(Path(env["AIRFLOW_HOME"]).parent / "demo-tokenizer")


def sample_tokenizer(folder: Path, vocab_size: int = 2000) -> str:
    """``folder`` holding a byte-level BPE trained on the bundled sample's ground truth, saved as a Hugging
    Face tokenizer with ``<|endoftext|>`` as its end-of-document token (``dripper.pretrain.toy``; made once, no
    download); returns the folder."""
    if (folder / "tokenizer.json").exists() and (folder / "tokenizer_config.json").exists():
        return str(folder)
    import gzip

    sys.path.insert(0, str(REPO))
    from dripper.pretrain.toy import train_tokenizer

    with gzip.open(REPO / "data" / "sample" / "pages.jsonl.gz", "rt", encoding="utf-8") as lines:
        texts = [json.loads(line)["ground_truth_text"] for line in lines]
    return str(train_tokenizer(texts, folder, vocab_size))


def run_conf(env: dict[str, str], labeler: str, tokenizer: str) -> dict[str, Any]:
    return {
        "crawl_id": "CC-MAIN-SAMPLE",
        "crawl_base": str(REPO / "data" / "sample"),
        "warc_count": 4,
        "warc_fraction": None,
        "seed": 0,
        "warcs_per_task": 2,
        "extractor": labeler,
        "storage_root": env["DRIPPER_RUN_ROOT"],
        "dask_scheduler": None,
        "simplify_workers": 1,
        "extract_workers": 1,
        "refine_tasks": 2,
        "refine_workers": 1,
        "tokenizer": tokenizer,
    }


def get_run(api: Api, run_id: str, dag_id: str = DAG_ID) -> dict[str, Any]:
    """The run ``run_id`` of ``dag_id`` as the REST API reports it (state, conf, triggered_by…)."""
    return api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")


def published(api: Api, run_id: str, dag_id: str = DAG_ID, task_id: str = "publish_corpus") -> dict[str, Any]:
    """What the run's ``publish_corpus`` task (or ``task_id``) returned (paths and counts)."""
    xcom = api.call(
        "GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value"
    )
    return xcom["value"] if isinstance(xcom["value"], dict) else json.loads(xcom["value"])


def wait_for_run(api: Api, run_id: str, seconds: float, dag_id: str = DAG_ID) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    reported: dict[tuple[str, int], str] = {}
    while True:
        run = get_run(api, run_id, dag_id)
        instances = api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")
        for ti in instances.get("task_instances", []):
            key = (ti["task_id"], ti.get("map_index", -1))
            if ti.get("state") and reported.get(key) != ti["state"]:
                reported[key] = ti["state"]
                label = ti["task_id"] + (f"[{key[1]}]" if key[1] >= 0 else "")
                say(f"  {label}: {ti['state']}")
        if run["state"] in ("success", "failed"):
            return run
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} still {run['state']} after {seconds:.0f} s")
        time.sleep(3)


def print_result(api: Api, run_id: str, env: dict[str, str], elapsed: float) -> None:
    output = published(api, run_id)
    summary = json.loads(Path(output["build_summary"]).read_text())
    stages = summary["stages"]
    refine = summary.get("refine") or {}
    tokens = summary.get("tokens_summary") or {}
    view = {
        "crawl": summary["crawl_id"],
        "extractor": summary["parameters"].get("extractor"),
        "pages_simplified": stages.get("simplified", {}).get("pages_out"),
        "pages_dropped_by_reason": stages.get("simplified", {}).get("dropped"),
        "pages_extracted": stages.get("extracted", {}).get("pages_out"),
        "fallbacks_by_reason": stages.get("extracted", {}).get("fallbacks"),
        "corpus_documents_in": refine.get("documents_in"),
        "corpus_documents_out": refine.get("documents_out"),
        "dropped_by_refinement_step": {k: sum(v.values()) for k, v in (refine.get("dropped") or {}).items()},
        "tokens": tokens.get("tokens"),
        "tokenizer": tokens.get("tokenizer"),
        "wall_seconds_of_stages": {
            k: v.get("wall_seconds") for k, v in summary.get("stage_runs", {}).items()
        },
    }
    print("\n=== corpus_build: run summary ===")
    print(json.dumps(view, indent=1))
    print(f"\nCorpus:         {output['corpus']}")
    print(f"Tokens:         {output['tokens']}")
    print(f"Build summary:  {output['build_summary']}")
    print(f"Run root:       {output['run_root']}")
    print(f"Demo wall time: {elapsed:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stop", action="store_true", help="stop the servers this script started")
    parser.add_argument("--fresh", action="store_true", help="delete the demo's runs first (a full rebuild)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds to wait for the run")
    args = parser.parse_args(argv)
    env = airflow_environment()
    if args.stop:
        return stop_servers(env)
    port = env["DRIPPER_AIRFLOW_PORT"]
    api = Api(f"http://127.0.0.1:{port}")
    if not running_pid(pid_dir(env) / "api-server.pid"):
        try:
            api.call("GET", "/api/v2/monitor/health", timeout=3)
            say(
                f"127.0.0.1:{port} already answers but not from this demo: stop that server, or set DRIPPER_AIRFLOW_PORT"
            )
            return 1
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
    if args.fresh:
        shutil.rmtree(Path(env["DRIPPER_RUN_ROOT"]) / "runs" / "CC-MAIN-SAMPLE", ignore_errors=True)
        say("deleted the demo's previous runs")
    started = time.monotonic()
    say(f"AIRFLOW_HOME={env['AIRFLOW_HOME']}: migrating the SQLite database")
    api = start_airflow(env)
    unpaused = unpause_manual_dags(api)
    say(f"unpaused {', '.join(unpaused)} (they run when you trigger them)")
    for dag_id, why in PAUSED_DAGS.items():
        say(f"{dag_id} stays paused: {why}")
    labeler, tokenizer = demo_labeler(), demo_tokenizer(env)
    run_id = f"demo__{time.strftime('%Y%m%dT%H%M%S')}"
    trigger(api, run_id, run_conf(env, labeler, tokenizer))
    say(f"triggered {DAG_ID} run {run_id} (labeler {labeler}); waiting")
    run = wait_for_run(api, run_id, args.timeout)
    elapsed = time.monotonic() - started
    ui = f"http://127.0.0.1:{port}/dags/{DAG_ID}/runs/{run_id}"
    if run["state"] != "success":
        say(f"run {run_id} {run['state']}: see {ui} (logs under {env['AIRFLOW_HOME']}/logs)")
        return 1
    print_result(api, run_id, env, elapsed)
    listening = listening_addresses(env)
    exposed = [address for address in listening if not address.startswith(("127.", "[::1]", "::1"))]
    print("\nListening:", ", ".join(listening) or "-")
    if exposed:
        print(f"WARNING: listening beyond loopback: {', '.join(exposed)}")
    print(f"\nThe UI stays up: {ui}")
    print(f"  login admin / {admin_password(env)}")
    print("  stop it with: make demo-stop   (python scripts/airflow_demo.py --stop)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
