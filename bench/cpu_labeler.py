"""The CPU labeler: end-to-end speed against Trafilatura, peak memory, and identical reference outputs.

Usage::

    .venv/bin/python bench/cpu_labeler.py speed [--data FILE…] [--limit N] [--model MODEL] [--profile OUT]
        [--labeler-option KEY=VALUE…]
    .venv/bin/python bench/cpu_labeler.py memory [--data FILE…] [--synthetic-mb MB]
    .venv/bin/python bench/cpu_labeler.py reference (--write OUT.jsonl.gz | --check FILE) [--data FILE…]

``speed``: one process, pages given as UTF-8 bytes; per chunk of pages, Dripper with the ``cpu`` labeler
(decode, simplify, label, reconstruct, Markdown) then Trafilatura (``extract``, Markdown, tables, no
comments) on the same bytes, alternating so that both see the same machine load. CPU time of this process
is the measure (pages/s per core); wall time is printed too.

``speed`` prints these per data file (dev, dev_hard) and for all pages, with each step's CPU ms per page
(timers wrapped around the step functions): simplify, features (both stages), trees (both stages), render
(reconstruct, serialise, Markdown), fallback, other (decoding, checks, batching). ``--profile FILE``
profiles Dripper's calls (not Trafilatura's) with cProfile and prints the top entries.

``memory``: peak RSS of a fresh worker process (imports, model, one page) on the largest page of
``--data`` (default dev_hard), and on a synthetic page of ``--synthetic-mb`` MB.

``reference``: per page, hashes of the features and probabilities, the labels and confidences, and hashes
of the Markdown and main HTML: ``--write`` them from one version of the code, ``--check`` another version
against them (a faster path must give the same outputs; ``tests/labelers/cpu/
test_reference_outputs.py`` checks the bundled sample against a file written before the fast path).

Out-of-fold quality beside Trafilatura, Resiliparse and readability (``quality``, with paired-bootstrap
leads, and ``compare``: the leads of a saved run, and over an earlier one) is a study, not a benchmark:
``python -m research.cpu_labeler_quality``, whose docstring says what it measures.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import itertools
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dripper.types import Page  # noqa: E402


def _default_data() -> list[Path]:
    shared = REPO.parent / "shared" / "data"
    files = [shared / "dev.jsonl.gz", shared / "dev_hard.jsonl.gz"]
    if all(path.exists() for path in files):
        return files
    return [REPO / "data" / "sample" / "pages.jsonl.gz"]


def _records(paths: Sequence[Path], limit: int | None) -> list[dict]:
    """The records of the data files, at most ``limit`` per file."""
    from dripper.labelers.cpu.training_set import iter_records

    return [record for path in paths for record in itertools.islice(iter_records(path), limit)]


# -- speed ------------------------------------------------------------------------------------------------


STEPS = ("simplify", "features", "trees", "network", "render", "fallback")
# Timed inside simplify: the parses and the copy any simplifier with today's output needs (bench/simplify.py).
_PARSE_FLOOR = "parse floor"


class StepClock:
    """CPU seconds of each pipeline step, from timers wrapped around the step functions in this process.

    simplify: ``simplify_html``; features: ``page_features`` and the second stage's ``context_features``;
    trees: ``TreeEnsemble.decision_function`` (both stages); render: ``Extractor._build_output``
    (reconstruct, serialise, Markdown); fallback: ``Extractor._run_fallback`` (Trafilatura and Markdown).
    Within simplify, the parse floor: ``repair_html``, ``parse_document`` and ``processing_copy``.
    """

    def __init__(self) -> None:
        from dripper import pipeline, simplify
        from dripper.labelers.cpu import model
        from dripper.labelers.cpu_seq import labeler as seq_labeler
        from dripper.labelers.cpu_seq.network import SeqNetwork

        self.seconds = dict.fromkeys((*STEPS, _PARSE_FLOOR), 0.0)
        self._targets = [
            (pipeline, "simplify_html", "simplify"),
            (simplify, "repair_html", _PARSE_FLOOR),
            (simplify, "parse_document", _PARSE_FLOOR),
            (simplify, "processing_copy", _PARSE_FLOOR),
            (model, "page_features", "features"),
            (model, "context_features", "features"),
            (model.TreeEnsemble, "decision_function", "trees"),
            # cpu_seq: its own import of page_features (its trees run through the model's names above), its
            # tokens (as features), its network.
            (seq_labeler, "page_features", "features"),
            (seq_labeler, "block_tokens", "features"),
            (SeqNetwork, "logits", "network"),
            (pipeline.Extractor, "_build_output", "render"),
            (pipeline.Extractor, "_run_fallback", "fallback"),
        ]
        self._originals: list = []

    def __enter__(self) -> StepClock:
        for owner, name, step in self._targets:
            original = owner.__dict__[name]
            self._originals.append((owner, name, original))
            setattr(owner, name, self._timed(original, step))
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()

    def _timed(self, function, step: str):
        def timed(*args, **kwargs):
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[step] += time.process_time() - started

        return timed


def _speed_group(extractor, row: str, blobs, chunk: int, trafilatura_extract, profiler=None) -> dict:
    """Dripper (the row named ``row``) then Trafilatura on each chunk of ``blobs``: CPU and wall seconds,
    step CPU seconds.

    ``profiler`` (a ``cProfile.Profile``), when given, is enabled around Dripper's calls only.
    """
    cpu = {row: 0.0, "trafilatura": 0.0}
    wall = dict.fromkeys(cpu, 0.0)
    extractors: Counter = Counter()
    clock = StepClock()
    for offset in range(0, len(blobs), chunk):
        part = blobs[offset : offset + chunk]
        pages = [Page(doc_id=doc_id, html=html, url=url) for doc_id, html, url in part]
        with clock:
            if profiler is not None:
                profiler.enable()
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            results = extractor.extract_batch(pages)
            cpu[row] += time.process_time() - cpu_start
            wall[row] += time.perf_counter() - wall_start
            if profiler is not None:
                profiler.disable()
        extractors.update(result.extractor for result in results)
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        for _, html, url in part:
            trafilatura_extract(
                html, url=url, output_format="markdown", include_tables=True, include_comments=False
            )
        cpu["trafilatura"] += time.process_time() - cpu_start
        wall["trafilatura"] += time.perf_counter() - wall_start
    return {"n": len(blobs), "cpu": cpu, "wall": wall, "steps": clock.seconds, "extractors": extractors}


def _print_speed(name: str, group: dict) -> None:
    n, cpu, wall, steps = group["n"], group["cpu"], group["wall"], group["steps"]
    row = next(key for key in cpu if key != "trafilatura")
    print(f"\n{name}: {n} pages")
    print(f"  {'extractor':14} {'pages/s per core':>17} {'ms/page (CPU)':>14} {'pages/s (wall)':>15}")
    for extractor in cpu:
        per_core, ms = n / cpu[extractor], 1000 * cpu[extractor] / n
        print(f"  {extractor:14} {per_core:17.1f} {ms:14.1f} {n / wall[extractor]:15.1f}")
    print(f"  ratio {row} / trafilatura (per core): {cpu['trafilatura'] / cpu[row]:.2f}x")
    other = cpu[row] - sum(steps[step] for step in STEPS)  # decoding, checks, batching
    print(
        f"  {row} steps, ms/page (CPU): "
        + ", ".join(f"{key} {1000 * steps[key] / n:.2f}" for key in STEPS)
        + f", other {1000 * other / n:.2f}"
    )
    floor = steps[_PARSE_FLOOR]
    print(
        f"  of simplify, the parse floor (lexbor repair, libxml2 parse, processing copy): "
        f"{1000 * floor / n:.2f} ms/page, so no faster rest of the path passes "
        f"{cpu['trafilatura'] / max(floor, 1e-9):.2f}x trafilatura"
    )
    print(f"  results by extractor: {dict(group['extractors'])}")


def run_speed(args: argparse.Namespace) -> int:
    from trafilatura import extract as trafilatura_extract

    from dripper.labelers import build_labeler
    from dripper.labelers.cpu.training_set import iter_records
    from dripper.pipeline import ExtractOptions, Extractor

    groups = {}
    for path in args.data:
        records = itertools.islice(iter_records(path), args.limit)
        blobs = [(str(r["id"]), r["html"].encode("utf-8"), r.get("url")) for r in records if r.get("html")]
        groups[path.name.split(".")[0]] = blobs
    started = time.process_time()
    labeler = build_labeler(args.labeler, model=args.model, **args.labeler_option)
    load_seconds = time.process_time() - started
    extractor = Extractor(labeler, ExtractOptions(fallback="trafilatura", batch_size=args.chunk))
    # Warm both up (imports, lazy tables, the trees' walk layout) outside the measurement.
    first = next(blobs[0] for blobs in groups.values() if blobs)
    extractor.extract_batch([Page(doc_id=first[0], html=first[1], url=first[2])])
    trafilatura_extract(first[1], url=first[2], output_format="markdown", include_tables=True)

    print(f"data: {', '.join(map(str, args.data))}; model loaded in {1000 * load_seconds:.0f} ms CPU")
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    row = f"dripper:{args.labeler}"
    results = {
        name: _speed_group(extractor, row, blobs, args.chunk, trafilatura_extract, profiler)
        for name, blobs in groups.items()
    }
    for name, group in results.items():
        _print_speed(name, group)
    if len(results) > 1:
        total = {
            "n": 0,
            "cpu": Counter(),
            "wall": Counter(),
            "steps": dict.fromkeys((*STEPS, _PARSE_FLOOR), 0.0),
        }
        total["extractors"] = Counter()
        for group in results.values():
            total["n"] += group["n"]
            for key in ("cpu", "wall", "extractors"):
                total[key].update(group[key])
            for key, value in group["steps"].items():
                total["steps"][key] += value
        total["cpu"] = {key: total["cpu"][key] for key in (row, "trafilatura")}
        total["wall"] = {key: total["wall"][key] for key in (row, "trafilatura")}
        _print_speed("all", total)
    if profiler is not None:
        import pstats

        profiler.dump_stats(args.profile)
        print(f"\nprofile of {row} (cProfile, slows Python code; {args.profile}), by own time:")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(args.profile_top)
    return 0


# -- reference outputs -------------------------------------------------------------------------------------


def _short_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


#: Reference probabilities are stored rounded to this many decimals and compared within
#: :data:`FLOAT_TOLERANCE`: the last bits of ``exp``/``log`` differ between CPUs (numpy picks its SIMD
#: kernels by the CPU), so a hash of the float64 bytes held on one machine and not on another.
P_DECIMALS = 10
FLOAT_TOLERANCE = 1e-8


def same_output(found: object, expected: object) -> bool:
    """Whether one reference output equals the stored one: numbers (and lists of numbers) within
    :data:`FLOAT_TOLERANCE`, everything else exactly."""
    if isinstance(found, list) and isinstance(expected, list):
        return len(found) == len(expected) and all(map(same_output, found, expected))
    numbers = (int, float)
    if isinstance(found, numbers) and isinstance(expected, numbers) and not isinstance(found, bool):
        return abs(found - expected) <= FLOAT_TOLERANCE
    return found == expected


def reference_outputs(records, model: str | None = None):
    """Per page, what the labeler and the pipeline make of it, small enough to store and compare.

    Yields one dict per record with HTML: ``id``; ``features`` and ``structure`` (hashes of the feature
    matrix and of the containers/signatures/chars); ``p``, the block probabilities rounded to
    :data:`P_DECIMALS` (compare with :func:`same_output`);
    ``labels``, ``failure`` and ``confidence`` as the labeler answers; ``extractor``, ``markdown`` and
    ``main_html`` (hashes) as the pipeline ends (fallback included).
    """
    from dripper.labelers.base import LabelRequest
    from dripper.labelers.cpu.features import page_features
    from dripper.labelers.cpu.model import CpuLabeler
    from dripper.pipeline import ExtractOptions, Extractor, prepare_page

    labeler = CpuLabeler(model=model)
    extractor = Extractor(labeler, ExtractOptions(fallback="trafilatura"))
    for record in records:
        if not record.get("html"):
            continue
        page = Page(doc_id=str(record["id"]), html=record["html"].encode("utf-8"), url=record.get("url"))
        out: dict = {"id": page.doc_id}
        prepared = prepare_page(page, extractor.options)
        if prepared.simplified is not None and prepared.simplified.n_blocks:
            features = page_features(prepared.simplified)
            out["features"] = _short_hash(features.values.tobytes())
            out["structure"] = _short_hash(
                features.containers.tobytes() + features.signatures.tobytes() + features.chars.tobytes()
            )
            probabilities = labeler.model.probabilities([features])[0]
            out["p"] = [round(value, P_DECIMALS) for value in probabilities.tolist()]
            (answer,) = labeler.label_batch([LabelRequest(page, prepared.simplified, prepared.text)])
            out["labels"] = (
                None if answer.main is None else "".join("1" if main else "0" for main in answer.main)
            )
            out["failure"] = answer.failure
            out["confidence"] = answer.confidence
        (result,) = extractor.extract_batch([page])
        out["extractor"] = result.extractor
        out["markdown"] = _short_hash(result.markdown.encode("utf-8"))
        out["main_html"] = _short_hash(result.main_html.encode("utf-8"))
        yield out


def run_reference(args: argparse.Namespace) -> int:
    """Write this code's reference outputs (``--write``), or compare them with a file (``--check``)."""
    from dripper.labelers.cpu.training_set import iter_records

    records = (record for path in args.data for record in itertools.islice(iter_records(path), args.limit))
    outputs = reference_outputs(records, args.model)
    if args.write:
        with gzip.open(args.write, "wt", encoding="utf-8") as out:
            for found in outputs:
                out.write(json.dumps(found, ensure_ascii=False) + "\n")
        return 0
    with gzip.open(args.check, "rt", encoding="utf-8") as lines:
        expected = {found["id"]: found for found in map(json.loads, lines)}
    differ: Counter = Counter()
    pages = 0
    for found in outputs:
        pages += 1
        for key, value in found.items():
            if not same_output(value, expected.get(found["id"], {}).get(key)):
                differ[key] += 1
                if differ[key] <= 3:
                    print(f"{found['id']}: {key} differs")
    print(f"{pages} pages; differing: {dict(differ) or 'none'}")
    return 1 if differ else 0


# -- memory -----------------------------------------------------------------------------------------------


def _rss_mb() -> float:
    """This process's resident set now (MiB), from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _measure_page(html: bytes, url: str | None, model: str | None) -> dict:
    """In a fresh worker process: RSS after the imports and the model, then peak RSS extracting ``html``."""
    import resource

    from dripper.labelers.cpu.model import CpuLabeler
    from dripper.pipeline import ExtractOptions, Extractor

    extractor = Extractor(
        CpuLabeler(model=model),
        ExtractOptions(fallback="trafilatura", max_page_bytes=max(len(html) + 1, 20_000_000)),
    )
    extractor.extract_batch([Page(doc_id="warm", html=b"<html><body><p>Warm up.</p></body></html>")])
    ready = _rss_mb()
    started = time.perf_counter()
    result = extractor.extract_batch([Page(doc_id="page", html=html, url=url)])[0]
    return {
        "ready_mb": ready,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "seconds": time.perf_counter() - started,
        "blocks": result.stats.get("n_blocks"),
        "extractor": result.extractor,
        "reason": result.fallback_reason,
    }


def run_memory(args: argparse.Namespace) -> int:
    """Peak RSS of one worker process extracting the largest page of ``--data`` (and a synthetic one)."""
    import multiprocessing

    from dripper.labelers.cpu.training_set import iter_records

    largest = max(
        (record for path in args.data for record in iter_records(path) if record.get("html")),
        key=lambda record: len(record["html"].encode("utf-8")),
    )
    html = largest["html"].encode("utf-8")
    files = ", ".join(path.name for path in args.data)
    cases = [(f"largest page of {files} ({largest['id']})", html, largest.get("url"))]
    if args.synthetic_mb:
        # The largest page's body repeated until the page is that large: many blocks, deep enough.
        head, _, rest = largest["html"].partition("<body")
        body = "<body" + rest.rsplit("</body>", 1)[0].split(">", 1)[1] if rest else largest["html"]
        copies = int(args.synthetic_mb * 1_000_000 / max(len(body.encode("utf-8")), 1)) + 1
        synthetic = f"{head}<body>{body * copies}</body></html>".encode()
        cases.append((f"synthetic page: the largest page's body x{copies}", synthetic, largest.get("url")))
    context = multiprocessing.get_context("spawn")  # a fresh interpreter per page: its own peak
    for name, page, url in cases:
        with context.Pool(1) as pool:
            found = pool.apply(_measure_page, (page, url, args.model))
        print(
            f"{name}: {len(page) / 1e6:.1f} MB, {found['blocks']} blocks, {found['extractor']}"
            f"{' (' + found['reason'] + ')' if found['reason'] else ''}, {found['seconds']:.1f} s; "
            f"RSS ready {found['ready_mb']:.0f} MiB, peak {found['peak_mb']:.0f} MiB"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    speed = modes.add_parser("speed", help="end-to-end pages/s per core against Trafilatura")
    speed.add_argument("--data", type=Path, nargs="+", default=_default_data())
    speed.add_argument("--limit", type=int, default=None, help="pages per file")
    speed.add_argument("--model", default=None, help="model file (default: the shipped one)")
    speed.add_argument("--labeler", default="cpu", choices=("cpu", "cpu_seq"), help="which CPU labeler")
    speed.add_argument("--chunk", type=int, default=32, help="pages per alternation (and labeler batch)")
    speed.add_argument("--profile", type=Path, default=None, help="cProfile Dripper's calls into this file")
    speed.add_argument("--profile-top", type=int, default=30, help="profile entries printed")
    speed.add_argument(
        "--labeler-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="CpuLabeler option (threshold, min_confidence, min_page_confidence, decision)",
    )
    speed.set_defaults(handler=run_speed)
    reference = modes.add_parser("reference", help="write or check per-page reference outputs")
    reference.add_argument("--data", type=Path, nargs="+", default=_default_data())
    reference.add_argument("--limit", type=int, default=None, help="pages per file")
    reference.add_argument("--model", default=None, help="model file (default: the shipped one)")
    target = reference.add_mutually_exclusive_group(required=True)
    target.add_argument("--write", type=Path, help="write this code's outputs here (.jsonl.gz)")
    target.add_argument("--check", type=Path, help="compare this code's outputs with this file")
    reference.set_defaults(handler=run_reference)
    memory = modes.add_parser("memory", help="peak RSS of a worker process on the largest page")
    memory.add_argument("--data", type=Path, nargs="+", default=_default_data()[-1:])
    memory.add_argument("--model", default=None, help="model file (default: the shipped one)")
    memory.add_argument("--synthetic-mb", type=float, default=0, help="also a synthetic page of this size")
    memory.set_defaults(handler=run_memory)
    args = parser.parse_args(argv)
    if args.mode == "speed":
        from dripper.config.settings import parse_key_values

        args.labeler_option = parse_key_values(args.labeler_option, "--labeler-option")
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
