"""FineWeb's first stage in datatrove, with datatrove's extractor and with ours: documents per CPU-second.

    OMP_NUM_THREADS=1 .venv/bin/python bench/datatrove_extract.py [--rounds 3] [--arms fineweb,dripper,...]

Each arm is a datatrove pipeline run by ``LocalPipelineExecutor`` (one task, in one fresh interpreter per
round) over the same WARC files: by default the two bundled sample files datatrove's own ``WarcReader`` can
read to the end (it ends the task on the other two). CPU time is the interpreter's and its children's
(``RUSAGE_CHILDREN`` after it exits, every sandbox child waited for: the extractor's sandbox processes
included), less the same interpreter
started with the same imports and steps built but no document read (``startup``), so the figure is
steady-state cost per document. Arms:

- ``fineweb``: datatrove's ``WarcReader`` → ``Trafilatura(favour_precision=True)`` (FineWeb's settings, its
  per-document sandbox process): the reference;
- ``dripper``: ``DripperWarcReader`` → ``DripperExtractor("cpu")`` (its default sandbox: one child, one
  round trip per document, the child started again only after a document that hangs or kills it);
- ``dripper-signal``, ``dripper-none``: the same with the ``signal`` bound or none (what the child costs);
- ``dripper-reader+trafilatura``: our reader before datatrove's ``Trafilatura`` (what the reader costs).

Prints one JSON line per arm (best round: documents in and out, CPU-s, documents per CPU-s, the datatrove
per-step wall times) and the ratios against ``fineweb``. ``--profile`` instead runs our extractor on the
same documents in this process under cProfile and prints where its time goes (milliseconds a page per
part: simplification, the labeler, the fallback on declined pages, reconstruction and Markdown).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEGMENTS = REPO / "data" / "sample" / "crawl-data" / "CC-MAIN-SAMPLE" / "segments"
#: The sample files datatrove's WarcReader reads to the end (no corrupt member, no cut-off record).
READABLE = (
    "1741910000000.11/warc/CC-MAIN-20250314001422-20250314031422-00000.warc.gz",
    "1741910000000.42/warc/CC-MAIN-20250314031422-20250314061422-00001.warc.gz",
)
ARMS = ("fineweb", "dripper", "dripper-signal", "dripper-none", "dripper-reader+trafilatura")


def build_pipeline(arm: str, folder: str, paths_file: str) -> list:
    """The steps of ``arm`` over the WARC files listed in ``paths_file`` (relative to ``folder``)."""
    from datatrove.pipeline.extractors import Trafilatura

    if arm == "fineweb":
        from datatrove.pipeline.readers import WarcReader

        return [WarcReader(folder, paths_file=paths_file), Trafilatura(favour_precision=True)]
    from dripper.datatrove import DripperExtractor, DripperWarcReader

    reader = DripperWarcReader(folder, paths_file=paths_file)
    if arm == "dripper-reader+trafilatura":
        return [reader, Trafilatura(favour_precision=True)]
    sandbox = {"dripper": "auto", "dripper-signal": "signal", "dripper-none": "none"}[arm]
    return [reader, DripperExtractor("cpu", sandbox=sandbox)]


def run_arm(arm: str, paths_file: str, logs: str, startup_only: bool) -> None:
    """Inside the measured interpreter: build (and unless ``startup_only``, run) the arm's pipeline."""
    from datatrove.executor import LocalPipelineExecutor

    pipeline = build_pipeline(arm, str(SEGMENTS), paths_file)
    if startup_only:
        # Warm what a run imports and builds before its first document, without reading any.
        from dripper.pipeline import Extractor

        if arm.startswith("dripper") and "trafilatura" not in arm:
            Extractor.from_spec("cpu")
        import trafilatura  # noqa: F401

        return
    LocalPipelineExecutor(pipeline, tasks=1, workers=1, logging_dir=logs).run()
    reap_children()


def reap_children() -> None:
    """Wait for every child this interpreter started: a sandbox child killed but never waited for would
    leave its CPU time out of ``RUSAGE_CHILDREN`` (datatrove's sandbox kills a slow child without a wait)."""
    import multiprocessing

    for child in multiprocessing.active_children():
        child.kill()
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def measure(arm: str, paths_file: str, startup_only: bool) -> dict:
    with tempfile.TemporaryDirectory() as logs:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        command = [sys.executable, __file__, "--inside", arm, "--paths-file", paths_file, "--logs", logs]
        if startup_only:
            command.append("--startup-only")
        subprocess.run(command, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        result = {"cpu_s": cpu, "wall_s": wall}
        if not startup_only:
            stats = json.loads((Path(logs) / "stats.json").read_text())
            reader, extractor = stats[0], stats[1]
            result["documents_in"] = _total(reader["stats"].get("documents", 0))
            result["documents_out"] = _total(extractor["stats"].get("forwarded", 0))
            result["step_seconds"] = {s["name"]: round(s["time_stats"]["total"], 3) for s in stats}
        return result


def _total(value) -> int:
    return int(value["total"] if isinstance(value, dict) else value)


#: The functions whose cumulative time ``--profile`` reports, by part.
PARTS = {
    "simplification": "prepare_page",
    "labeler": "label_batch",
    "fallback": "main_html",
    "reconstruction and Markdown": "_build_output",
}


def profile() -> int:
    """The ``cpu`` extractor over the readable sample files' pages, in this process, under cProfile."""
    import cProfile
    import pstats

    from dripper.datatrove import DripperWarcReader
    from dripper.pipeline import Extractor
    from dripper.types import Page

    with tempfile.NamedTemporaryFile("w", suffix=".paths", delete=False) as listing:
        listing.write("\n".join(READABLE) + "\n")
    documents = list(DripperWarcReader(str(SEGMENTS), paths_file=listing.name).run(None, 0, 1))
    os.unlink(listing.name)
    pages = [
        Page(
            doc_id=str(i), html=d.text, url=d.metadata.get("url"), http_charset=d.metadata.get("http_charset")
        )
        for i, d in enumerate(documents)
    ]
    extractor = Extractor.from_spec("cpu")
    extractor.extract_batch(pages[:5])  # build and warm up outside the measurement
    profiler = cProfile.Profile()
    profiler.enable()
    results = extractor.extract_batch(pages)
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    total = max(
        cumulative for (_, _, name), (_, _, _, cumulative, _) in stats.items() if name == "extract_batch"
    )
    parts = {
        part: sum(cumulative for (_, _, name), (_, _, _, cumulative, _) in stats.items() if name == function)
        for part, function in PARTS.items()
    }
    fallbacks = sum(1 for r in results if r.extractor == "trafilatura")
    print(json.dumps({
        "pages": len(pages), "fallback_pages": fallbacks, "ms_per_page_profiled": 1000 * total / len(pages),
        "ms_per_page": {part: round(1000 * t / len(pages), 2) for part, t in parts.items()},
        "share": {part: round(t / total, 3) for part, t in parts.items()},
    }))  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--inside", help=argparse.SUPPRESS)
    parser.add_argument("--paths-file", help=argparse.SUPPRESS)
    parser.add_argument("--logs", help=argparse.SUPPRESS)
    parser.add_argument("--startup-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help="where DripperExtractor('cpu')'s time goes")
    args = parser.parse_args(argv)
    if args.profile:
        return profile()
    if args.inside:
        run_arm(args.inside, args.paths_file, args.logs, args.startup_only)
        return 0
    arms = [a for a in args.arms.split(",") if a]
    unknown = set(arms) - set(ARMS)
    if unknown:
        parser.error(f"unknown arms {sorted(unknown)}; choose from {', '.join(ARMS)}")
    with tempfile.NamedTemporaryFile("w", suffix=".paths", delete=False) as listing:
        listing.write("\n".join(READABLE) + "\n")
    rows = {}
    for arm in arms:
        best = None
        for _ in range(args.rounds):
            startup = measure(arm, listing.name, startup_only=True)
            run = measure(arm, listing.name, startup_only=False)
            run["startup_cpu_s"] = startup["cpu_s"]
            run["steady_cpu_s"] = max(run["cpu_s"] - startup["cpu_s"], 1e-9)
            if best is None or run["steady_cpu_s"] < best["steady_cpu_s"]:
                best = run
        best["docs_per_cpu_s"] = best["documents_in"] / best["steady_cpu_s"]
        best["docs_per_cpu_s_with_startup"] = best["documents_in"] / best["cpu_s"]
        rows[arm] = best
        print(
            json.dumps(
                {"arm": arm, **{k: round(v, 4) if isinstance(v, float) else v for k, v in best.items()}}
            )
        )
    os.unlink(listing.name)
    if "fineweb" in rows:
        reference = rows["fineweb"]
        for arm, row in rows.items():
            if arm != "fineweb":
                print(
                    f"{arm} / fineweb: {row['docs_per_cpu_s'] / reference['docs_per_cpu_s']:.2f}x documents per "
                    f"CPU-second ({row['docs_per_cpu_s_with_startup'] / reference['docs_per_cpu_s_with_startup']:.2f}x "
                    "with interpreter start)"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
