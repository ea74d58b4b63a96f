"""CPU cost per page: our ``cpu`` extractor against the extractors corpus teams pick by their bill.

Usage::

    .venv/bin/python bench/cost.py [--data FILE…] [--limit N] [--fallback trafilatura|trafilatura_fast]
        [--chunk N] [--labeler-option KEY=VALUE…] [--rss] [--json OUT]

One process, one page after another, CPU time (``time.process_time``) per page, on each data file (default:
``../shared/data/`` dev, dev_hard and dev_fundus where present, and the bundled sample). Per chunk of pages
the extractors take turns, so all of them see the same machine load:

- ``datatrove-trafilatura``: ``trafilatura.extract`` with the settings of datatrove's ``Trafilatura()`` step
  (``favor_precision=True``, ``include_comments=False``, ``deduplicate=True``), FineWeb's extractor, called
  in-process (datatrove's own step adds a sandbox process and a pipe round trip per document: see
  ``bench/datatrove_extract.py``);
- ``resiliparse``: ``extract_plain_text(HTMLTree.parse(html), main_content=True)`` (DCLM's, NeMo-Curator's);
- ``dripper:cpu``: ``dripper.pipeline.Extractor`` with the ``cpu`` labeler and ``--fallback`` for the pages
  the labeler declines (decode, simplify, label, reconstruct, Markdown), with its steps apart (the timers of
  ``bench/cpu_labeler.py``): simplify, features, trees, render (reconstruction, serialisation, Markdown),
  fallback, other.

The baselines get the page as ``str`` (as datatrove's reader hands it over); ours gets the WARC's bytes and
decodes them (counted in ``other``). Printed per file and pooled over the dev files: ms per page and each
extractor's cost as a share of ``datatrove-trafilatura``'s (the issue's target: ``dripper:cpu`` at 1/3 or
less). ``--rss`` also runs each extractor over every page in a fresh process and prints its peak RSS.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# run as a script, sys.path[0] is bench/, whose files would shadow modules of the same names
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.cpu_labeler import STEPS, StepClock  # noqa: E402
from dripper.types import Page  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"
DEV_FILES = ("dev", "dev_hard", "dev_fundus")
REFERENCE = "datatrove-trafilatura"
OURS = "dripper:cpu"


def default_data() -> list[Path]:
    """The dev files present under ``../shared/data``, then the bundled sample."""
    return [path for name in DEV_FILES if (path := SHARED / f"{name}.jsonl.gz").exists()] + [SAMPLE]


def baselines() -> dict[str, Callable[[str, str | None], str]]:
    """The reference extractors, each ``(html, url) -> text``."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree
    from trafilatura import extract

    def datatrove_trafilatura(html: str, url: str | None) -> str:
        return extract(html, favor_precision=True, include_comments=False, deduplicate=True) or ""

    def resiliparse(html: str, url: str | None) -> str:
        return extract_plain_text(HTMLTree.parse(html), main_content=True)

    return {REFERENCE: datatrove_trafilatura, "resiliparse": resiliparse}


def ours(fallback: str, options: dict):
    from dripper.labelers import build_labeler
    from dripper.pipeline import ExtractOptions, Extractor

    return Extractor(build_labeler("cpu", **options), ExtractOptions(fallback=fallback))


def load(path: Path, limit: int | None) -> list[tuple[str, bytes, str, str | None]]:
    """``(id, bytes, str, url)`` of the pages of ``path`` with HTML."""
    from dripper.labelers.cpu.training_set import iter_records

    return [
        (str(r["id"]), r["html"].encode("utf-8"), r["html"], r.get("url"))
        for r in itertools.islice(iter_records(path), limit)
        if r.get("html")
    ]


def measure(pages, extractor, references: dict, chunk: int) -> dict:
    """CPU seconds per extractor over ``pages`` (turns per chunk), our steps' seconds, our result kinds."""
    cpu = dict.fromkeys([*references, OURS], 0.0)
    clock = StepClock()
    kinds: Counter = Counter()
    for offset in range(0, len(pages), chunk):
        part = pages[offset : offset + chunk]
        for name, function in references.items():
            started = time.process_time()
            for _, _, text, url in part:
                function(text, url)
            cpu[name] += time.process_time() - started
        batch = [Page(doc_id=doc_id, html=blob, url=url) for doc_id, blob, _, url in part]
        with clock:
            started = time.process_time()
            results = extractor.extract_batch(batch)
            cpu[OURS] += time.process_time() - started
        kinds.update(result.extractor for result in results)
    return {"pages": len(pages), "cpu": cpu, "steps": dict(clock.seconds), "results": dict(kinds)}


def pooled(groups: Sequence[dict]) -> dict:
    total: dict = {"pages": 0, "cpu": Counter(), "steps": Counter(), "results": Counter()}
    for group in groups:
        total["pages"] += group["pages"]
        for key in ("cpu", "steps", "results"):
            total[key].update(group[key])
    return {key: dict(value) if isinstance(value, Counter) else value for key, value in total.items()}


def format_group(name: str, group: dict) -> str:
    n, cpu, steps = group["pages"], group["cpu"], group["steps"]
    reference = cpu[REFERENCE]
    lines = [f"\n{name}: {n} pages"]
    lines.append(f"  {'extractor':22} {'ms/page':>8} {'x ' + REFERENCE:>28}")
    for extractor, seconds in cpu.items():
        lines.append(f"  {extractor:22} {1000 * seconds / n:8.2f} {seconds / reference:28.2f}")
    other = cpu[OURS] - sum(steps.get(step, 0.0) for step in STEPS)
    parts = ", ".join(f"{step} {1000 * steps.get(step, 0.0) / n:.2f}" for step in STEPS if step != "network")
    lines.append(f"  {OURS} steps, ms/page: {parts}, other {1000 * other / n:.2f}")
    lines.append(f"  {OURS} results: {group['results']}")
    return "\n".join(lines)


def _peak_rss(name: str, data: list[Path], limit: int | None, fallback: str, options: dict) -> float:
    """In a fresh process: every page of ``data`` through extractor ``name``; the peak RSS in MiB."""
    extractor = ours(fallback, options) if name == OURS else baselines()[name]
    for path in data:
        for doc_id, blob, text, url in load(path, limit):
            if name == OURS:
                extractor.extract_batch([Page(doc_id=doc_id, html=blob, url=url)])
            else:
                extractor(text, url)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, nargs="+", default=None, help="labelled-page files")
    parser.add_argument("--limit", type=int, default=None, help="pages per file")
    parser.add_argument("--fallback", default="trafilatura", help="our fallback for declined pages")
    parser.add_argument("--chunk", type=int, default=16, help="pages per turn (and our batch size)")
    parser.add_argument("--labeler-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--rss", action="store_true", help="peak RSS of each extractor in a fresh process")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    from dripper.config.settings import parse_key_values

    options = parse_key_values(args.labeler_option, "--labeler-option")
    data = args.data or default_data()
    missing = [str(path) for path in data if not path.exists()]
    if missing:
        parser.error(f"no such data file: {', '.join(missing)}")
    references = baselines()
    extractor = ours(args.fallback, options)
    first = load(data[0], 1)[0]  # warm-up outside the measurement: imports, lazy tables
    extractor.extract_batch([Page(doc_id=first[0], html=first[1], url=first[3])])
    for function in references.values():
        function(first[2], first[3])
    print(f"{OURS}: fallback {args.fallback}, options {options or 'shipped'}; CPU time, one process")
    groups = {}
    for path in data:
        name = path.name.split(".")[0]
        groups[name] = measure(load(path, args.limit), extractor, references, args.chunk)
        print(format_group(name, groups[name]), flush=True)
    dev = [groups[name] for name in DEV_FILES if name in groups]
    if len(dev) > 1:
        groups["dev sets pooled"] = pooled(dev)
        print(format_group("dev sets pooled", groups["dev sets pooled"]))
    if args.rss:
        context = multiprocessing.get_context("spawn")
        print("\npeak RSS of a fresh process extracting every page:")
        for name in [*references, OURS]:
            with context.Pool(1) as pool:
                peak = pool.apply(_peak_rss, (name, data, args.limit, args.fallback, options))
            print(f"  {name:22} {peak:7.0f} MiB")
            groups.setdefault("peak_rss_mib", {})[name] = round(peak, 1)
    if args.json:
        record = {"date": time.strftime("%Y-%m-%d"), "fallback": args.fallback, "options": options}
        args.json.write_text(json.dumps({**record, "groups": groups}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
