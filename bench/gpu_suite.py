"""The GPU measurements of issue 17 in one run: the LM engine bench on two architectures, then pretraining.

On one H200, in order and within ``--budget`` seconds (default 480):

1. ``bench/lm_engine.py --arch qwen3``: the ``torch`` engine (speculation from the previous label, from the
   CPU labeler's drafts, none; and on 8 pages one sequence at a time through transformers' forward, the
   path HunYuan took before) and transformers ``generate`` with the same constraint (3 pages), on all
   prepared dev prompts (real lengths, Qwen's real tokenizer), with a Qwen3-0.6B-shaped random-weight model
   (bf16);
2. the shipped ``torch`` engine alone on the pages a 30% CPU → LM cascade routes (``--routed-share 0.3``:
   the pages the CPU labeler declines, then its least confident; longer than average), so the cascade's
   GPU-hours per million pages come from a measured rate;
3. the same as 1 with ``--arch hunyuan``: HunYuan-0.5B's shape (HunYuanDenseV1, the v1.1 weights');
4. ``bench/pretrain_gpu.py``: the 1B config at micro-batch 8, then 16.

Models are built on the machine from their configs (no downloads); the GPU machine needs only torch and
transformers, plus the repository and the prepared files of :data:`CARRY` (under 64 MiB; ``--list-carry``
prints them): the prompts, Qwen's tokenizer, and a megatron-core wheel for the machine's Python 3.12,
installed into a temporary folder for the pretraining steps when megatron is not importable there. Each step runs in its own process with its share of the budget; every result
is appended as a JSON line to ``OUT/results.jsonl`` the moment it exists (``run`` names the step), so a run
cut off at any point keeps what it measured; ``OUT/<step>.log`` keeps each step's output.

Usage::

    python bench/gpu_suite.py --prepare-carry           # here, once: prompts, tokenizer, megatron wheel
    python bench/gpu_suite.py --list-carry              # what to copy beside the repository
    python bench/gpu_suite.py OUT                       # on the GPU machine
    python bench/gpu_suite.py OUT --tiny --calls FILE   # the same steps on CPU, 2-layer models, a few pages
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CALLS = Path(".cache/bench/lm_calls.json.gz")
TOKENIZER = Path(".cache/models/qwen-tokenizer")
WHEELS = Path(".cache/gpu-wheels")
CARRY = (CALLS, TOKENIZER, WHEELS)
"""The prepared files the GPU run needs beside the repository (relative to it; git ignores ``.cache``)."""
# The GPU image has torch and transformers but not megatron-core (its own deps, torch, numpy and packaging,
# are there). Its Python is 3.12: the wheel carries a cp312 extension (datasets' helpers, unused here).
MEGATRON_WHEEL = "megatron-core==0.16.0"
WHEEL_PLATFORM = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:"]
WHEEL_PLATFORM += [f"--platform=manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28)]
CARRY_LIMIT_MIB = 64
DEFAULT_BUDGET = 480.0


def carry_listing() -> dict:
    """Each carried path with its size, and the total against the 64 MiB limit."""
    sizes = {}
    for path in CARRY:
        full = REPO / path
        files = [full] if full.is_file() else sorted(p for p in full.rglob("*") if p.is_file())
        sizes[str(path)] = sum(p.stat().st_size for p in files) if full.exists() else None
    total = sum(size or 0 for size in sizes.values())
    return {
        "carry": [str(path) for path in CARRY],
        "bytes": sizes,
        "total_mib": round(total / 2**20, 2),
        "limit_mib": CARRY_LIMIT_MIB,
        "missing": [path for path, size in sizes.items() if size is None],
        # The repository travels too, within the same limit: tracked and untracked files git does not ignore.
        "working_tree_mib": _working_tree_mib(),
    }


def _working_tree_mib() -> float | None:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True
        ).stdout.split(b"\0")
    except (OSError, subprocess.CalledProcessError):
        return None
    files = [REPO / name.decode() for name in listed if name]
    return round(sum(path.stat().st_size for path in files if path.is_file()) / 2**20, 2)


def steps(tiny: bool, calls: Path, out: Path) -> list[tuple[str, list[str], float]]:
    """``(name, argv, share of the budget)`` of every step, in order."""
    python = sys.executable
    results = str(out / "results.jsonl")
    lm = [
        python,
        str(REPO / "bench" / "lm_engine.py"),
        "--calls",
        str(calls),
        "--output",
        results,
        "--no-vllm",
    ]
    if tiny:  # CPU: two pages, one torch thread (OpenMP spin-waiting on shared cores: docs/lm-labelers.md)
        lm += ["--tiny", "--threads", "1", "--pages", "2", "--plain-pages", "1", "--sequential-pages", "1"]
    else:  # generate costs one forward pass per answer token: 3 pages of it take about as long as 352 of ours
        lm += ["--plain-pages", "3", "--sequential-pages", "8"]
    pretrain = [python, str(REPO / "bench" / "pretrain_gpu.py"), "--jsonl", results]
    if tiny:
        pretrain += ["--model", "tiny", "--device", "cpu", "--precision", "fp32", "--vocab-size", "512"]
        pretrain += ["--steps", "2", "--warmup-steps", "1", "--no-matmul"]
    else:
        pretrain += ["--steps", "10", "--warmup-steps", "3", "--max-seconds", "45"]
    return [
        ("lm-qwen3-0.6b", [*lm, "--arch", "qwen3", "--tag", "lm-qwen3-0.6b"], 0.34),
        # The pages a 30% CPU -> LM cascade sends to the GPU: its GPU-hours per million pages, measured.
        (
            "lm-qwen3-0.6b-cascade30",
            [
                *lm,
                "--arch",
                "qwen3",
                "--routed-share",
                "0.3",
                "--shipped-only",
                "--tag",
                "lm-qwen3-0.6b-cascade30",
            ],
            0.08,
        ),
        ("lm-hunyuan-0.5b", [*lm, "--arch", "hunyuan", "--tag", "lm-hunyuan-0.5b"], 0.28),
        (
            "pretrain-1b-mbs8",
            [*pretrain, "--micro-batch-size", "2" if tiny else "8", "--tag", "pretrain-1b-mbs8"],
            0.15,
        ),
        (
            "pretrain-1b-mbs16",
            [
                *pretrain,
                "--micro-batch-size",
                "2" if tiny else "16",
                "--no-matmul",
                "--tag",
                "pretrain-1b-mbs16",
            ],
            0.15,
        ),
    ]


def prepare_carry() -> dict:
    """Build what :data:`CARRY` lists, here (CPU, registries reachable): nothing that exists is redone."""
    python = sys.executable
    if not (REPO / TOKENIZER / "tokenizer.json").exists():
        subprocess.run([python, str(REPO / "scripts" / "make_tiny_models.py")], check=True)
    if not (REPO / CALLS).exists():
        subprocess.run(
            [python, str(REPO / "bench" / "lm_engine.py"), "--prepare", "--threads", "1"], check=True
        )
    if not list((REPO / WHEELS).glob("megatron_core-*.whl")):
        command = [
            python,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "-q",
            "-d",
            str(REPO / WHEELS),
            MEGATRON_WHEEL,
        ]
        subprocess.run(command + WHEEL_PLATFORM, check=True)
    return carry_listing()


def megatron_path() -> str | None:
    """A folder to put on ``PYTHONPATH`` so the pretraining steps import megatron: ``None`` where it imports
    already; else the carried wheel installed into a temporary folder (no index, no dependencies).

    Not under the output folder: only a few files come back from the GPU machine's output folder.
    """
    import importlib.util
    import tempfile

    if importlib.util.find_spec("megatron") is not None:
        return None
    wheels = sorted((REPO / WHEELS).glob("megatron_core-*.whl"))
    if not wheels:
        return None  # the steps fail and say so in their logs
    site = tempfile.mkdtemp(prefix="dripper-megatron-")
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
    subprocess.run([*command, "--target", str(site), str(wheels[-1])], check=True)
    return site


def append(out: Path, record: dict) -> None:
    with (out / "results.jsonl").open("a", encoding="utf-8") as results:
        results.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)


def sha256(path: Path) -> str | None:
    if not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_step(name: str, argv: list[str], timeout: float, out: Path, path: str | None = None) -> dict:
    """Run one step in its own process group; on timeout the whole group is killed (its lines are kept).

    ``path`` is prepended to the step's ``PYTHONPATH``.
    """
    started = time.monotonic()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH")) if p)
    with (out / f"{name}.log").open("wb") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True
        )
        try:
            status = "ok" if process.wait(timeout=timeout) == 0 else f"exit {process.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            status = "timeout"
    if status != "ok":  # the log stays in OUT; its end is what a reader of the run's output needs first
        tail = (out / f"{name}.log").read_bytes()[-3000:].decode("utf-8", "replace")
        print(f"--- {name}: {status}, the end of {name}.log ---\n{tail}", file=sys.stderr, flush=True)
    return {"suite_step": name, "status": status, "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("out", nargs="?", type=Path, help="output folder (created)")
    parser.add_argument("--list-carry", action="store_true", help="print the files to carry and exit")
    parser.add_argument(
        "--prepare-carry", action="store_true", help="build the files to carry (here, on CPU) and exit"
    )
    parser.add_argument("--tiny", action="store_true", help="2-layer models and the tiny pretraining on CPU")
    parser.add_argument(
        "--calls", type=Path, default=REPO / CALLS, help="prepared calls (bench/lm_engine.py)"
    )
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET, help="seconds for all steps")
    parser.add_argument("--only", action="append", help="run only this step (repeatable)")
    args = parser.parse_args(argv)
    if args.list_carry or args.prepare_carry:
        print(json.dumps(prepare_carry() if args.prepare_carry else carry_listing()))
        return 0
    if args.out is None:
        parser.error("the output folder is required")
    if not args.calls.exists():
        raise SystemExit(f"{args.calls} is missing: run `python bench/lm_engine.py --prepare` and carry it")
    if not (REPO / TOKENIZER / "tokenizer.json").exists():
        raise SystemExit(f"{REPO / TOKENIZER} is missing: run `python scripts/make_tiny_models.py`, carry it")
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget
    plan = [step for step in steps(args.tiny, args.calls, args.out) if not args.only or step[0] in args.only]
    append(
        args.out,
        {
            "suite": "bench/gpu_suite.py",
            "tiny": args.tiny,
            "budget_seconds": args.budget,
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "calls_sha256": sha256(args.calls),
            "steps": [name for name, _, _ in plan],
        },
    )
    total_share = sum(share for _, _, share in plan)
    failures = 0
    site = None
    if any(name.startswith("pretrain") for name, _, _ in plan):
        try:
            site = megatron_path()
        except subprocess.CalledProcessError as error:
            append(args.out, {"suite": "megatron wheel install failed", "error": str(error)})
    for index, (name, command, share) in enumerate(plan):
        left = deadline - time.monotonic()
        # A step may use time earlier steps left unused, but leaves the later ones their shares.
        later = sum(s for _, _, s in plan[index + 1 :]) / total_share * args.budget
        timeout = max(left - later, min(left, share / total_share * args.budget))
        if timeout < 5:
            append(args.out, {"suite_step": name, "status": "skipped: budget spent", "seconds": 0})
            failures += 1
            continue
        result = run_step(name, command, timeout, args.out, site if name.startswith("pretrain") else None)
        failures += result["status"] != "ok"
        append(args.out, {**result, "timeout_seconds": round(timeout, 1)})
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
