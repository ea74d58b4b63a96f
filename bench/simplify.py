"""Simplification speed: ours against upstream ``mineru-html`` 1.1.2 on the same pages, in the same run.

Usage: ``.venv/bin/python bench/simplify.py [--data FILE.jsonl.gz ...] [--limit N] [--rounds R] [--memory]``.
Default data: ``../shared/data/dev.jsonl.gz`` and the first 400 pages of ``dev_hard.jsonl.gz`` (the bundled
sample when absent), each reported on its own. Both run single-threaded, one after the other; the upstream
one in its own venv (``make oracle``), timing only its ``simplify_html`` call per page, as ours is timed.
Times are CPU times of the process (best of R rounds per page), so that other work on a shared machine
counts against neither side. Prints pages/s per core, the ratio, and how many pages give identical
Simplified HTML (and mapping HTML). It also times the parse floor on the same pages: lexbor's repair,
libxml2's parse of its markup and the processing copy, which any simplifier giving today's output needs
(the model input depends on libxml2's tree of the browser's tree); upstream's time over it is the ratio
no faster walk of the trees can pass.

``--memory`` measures instead the peak RSS of a fresh worker process simplifying one page: the largest page
of the last data file, a 50 MB page built by repeating that page's body, and a 50 MB page of dense markup.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dripper.simplify import SimplifyOptions, simplify_html  # noqa: E402
from dripper.simplify.dom import parse_document, processing_copy, repair_html  # noqa: E402

_WHITESPACE = re.compile(r"\s+")
_ORACLE_PYTHON = REPO / ".venv-oracle" / "bin" / "python"


def _records(path: Path, limit: int | None) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        records = []
        for line in lines:
            records.append(json.loads(line))
            if limit and len(records) >= limit:
                break
    return records


def _normalised(html: str) -> str:
    return _WHITESPACE.sub(" ", html)


def _upstream(records: list[dict], rounds: int) -> tuple[dict[str, float], dict[str, dict]]:
    """Upstream's best CPU seconds per page, and its output per page."""
    seconds: dict[str, float] = {}
    outputs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "in.jsonl", Path(folder) / "out.jsonl"
        source.write_text("".join(json.dumps({"id": r["id"], "html": r["html"]}) + "\n" for r in records))
        for _ in range(rounds):
            subprocess.run(
                [str(_ORACLE_PYTHON), str(REPO / "tests/oracle/mineru_oracle.py"), str(source), str(target)],
                check=True,
            )
            for row in map(json.loads, target.read_text().splitlines()):
                best = seconds.get(row["id"], float("inf"))
                seconds[row["id"]] = min(row.get("seconds", float("inf")), best)
                outputs[row["id"]] = row
    return seconds, outputs


def _parse_floor(html: str) -> None:
    """The work every output of ours needs whatever the rest costs: lexbor's repair, libxml2's parse of
    its markup (the model input depends on libxml2's tree of the browser's tree) and the processing copy."""
    original = parse_document(repair_html(html)[0])
    processing_copy(original)


def _best_cpu_seconds(function, argument, rounds: int):
    """The best CPU seconds of ``rounds`` calls of ``function(argument)``, and the last call's result."""
    best, result = float("inf"), None
    for _ in range(rounds):
        started = time.process_time()
        result = function(argument)
        best = min(best, time.process_time() - started)
    return best, result


def _compare(path: Path, limit: int | None, rounds: int) -> dict:
    records = _records(path, limit)
    upstream_seconds, upstream = _upstream(records, rounds)
    # Upstream's exact model input (for the identity count), and no block texts (upstream computes none).
    options = SimplifyOptions(keep_body_text=False, block_text=False)
    ours_seconds = floor_seconds = 0.0
    identical = identical_mapping = 0
    for record in records:
        seconds, page = _best_cpu_seconds(
            lambda html: simplify_html(html, options=options), record["html"], rounds
        )
        ours_seconds += seconds
        floor_seconds += _best_cpu_seconds(_parse_floor, record["html"], rounds)[0]
        theirs = upstream[record["id"]]
        identical += _normalised(page.simplified_html) == _normalised(theirs.get("simplified_html") or "")
        identical_mapping += page.mapping_markup() == theirs.get("mapping_html")
    n = len(records)
    total_up = sum(upstream_seconds.values())
    return {
        "data": path.name,
        "pages": n,
        "upstream_pages_per_s": n / total_up,
        "ours_pages_per_s": n / ours_seconds,
        "ratio": total_up / ours_seconds,
        "floor_pages_per_s": n / floor_seconds,
        "ceiling_ratio": total_up / floor_seconds,
        "identical_simplified": identical,
        "identical_mapping": identical_mapping,
    }


_DENSE_UNIT = '<div class="c"><p>Some words <a href="/x">a link</a> and <b>bold</b> text.</p></div>\n'
_MEMORY_PAGE_BYTES = 50_000_000


def _memory_pages(path: Path) -> dict[str, str]:
    """The largest page of ``path``, a 50 MB page built from it, and a 50 MB page of dense markup."""
    largest = ""
    with gzip.open(path, "rt", encoding="utf-8") as lines:  # streamed: the parent's peak is no concern
        for line in lines:
            html = json.loads(line)["html"]
            largest = html if len(html) > len(largest) else largest
    head, _, body = largest.partition("<body")
    body = "<body" + body
    repeats = _MEMORY_PAGE_BYTES // max(len(body.encode("utf-8", "surrogatepass")), 1) + 1
    dense = _DENSE_UNIT * (_MEMORY_PAGE_BYTES // len(_DENSE_UNIT) + 1)
    return {
        f"largest {path.name} page": largest,
        "50 MB page built from it": head + body * repeats,
        "50 MB page of dense markup": f"<html><body>{dense}</body></html>",
    }


def _peak_rss_mib() -> float:
    # VmHWM, not getrusage's ru_maxrss, which keeps the peak of the process before its exec (the parent's).
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _peak_rss_worker(page_file: str) -> None:
    """Run in a fresh process: simplify one page, print RSS before and peak (MiB), blocks and seconds."""
    html = Path(page_file).read_text(encoding="utf-8", errors="surrogatepass")
    before = _peak_rss_mib()
    started = time.process_time()
    page = simplify_html(html)
    seconds = time.process_time() - started
    peak = _peak_rss_mib()
    print(json.dumps({"before_mib": before, "peak_mib": peak, "blocks": page.n_blocks, "seconds": seconds}))


def _memory(path: Path) -> None:
    with tempfile.TemporaryDirectory() as folder:
        for name, html in _memory_pages(path).items():
            page_file = Path(folder) / "page.html"
            page_file.write_text(html, encoding="utf-8", errors="surrogatepass")
            result = subprocess.run(
                [sys.executable, __file__, "--peak-rss-worker", str(page_file)],
                check=True,
                capture_output=True,
                text=True,
            )
            row = json.loads(result.stdout.splitlines()[-1])
            print(
                f"{name}: {len(html.encode('utf-8', 'surrogatepass')) / 1e6:.1f} MB, {row['blocks']} blocks, "
                f"{row['seconds']:.2f} s | peak RSS {row['peak_mib']:.0f} MiB "
                f"({row['before_mib']:.0f} MiB with the page read, before simplifying)",
                flush=True,
            )


def main() -> int:
    shared = REPO.parent / "shared" / "data"
    defaults = [shared / "dev.jsonl.gz", shared / "dev_hard.jsonl.gz"]
    if not defaults[0].exists():
        defaults = [REPO / "data" / "sample" / "pages.jsonl.gz"]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, nargs="+", default=defaults)
    parser.add_argument("--limit", type=int, default=400, help="first N pages of each file (0: all)")
    parser.add_argument("--rounds", type=int, default=2, help="best of R rounds, per page, for both")
    parser.add_argument("--memory", action="store_true", help="peak RSS per worker process instead of speed")
    parser.add_argument("--peak-rss-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak_rss_worker:
        _peak_rss_worker(args.peak_rss_worker)
        return 0
    if args.memory:
        _memory(args.data[-1])
        return 0
    if not _ORACLE_PYTHON.exists():
        print("the upstream oracle venv is missing: run `make oracle`", file=sys.stderr)
        return 2
    for path in args.data:
        row = _compare(path, args.limit or None, args.rounds)
        print(
            f"{row['data']}: {row['pages']} pages | upstream mineru-html 1.1.2 "
            f"{row['upstream_pages_per_s']:.1f} pages/s per core | ours {row['ours_pages_per_s']:.1f} "
            f"pages/s per core | ratio {row['ratio']:.2f}x | parse floor {row['floor_pages_per_s']:.1f} pages/s "
            f"(ceiling {row['ceiling_ratio']:.2f}x) | identical Simplified HTML "
            f"{row['identical_simplified']}/{row['pages']}, mapping HTML {row['identical_mapping']}/{row['pages']}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
