"""Simplification speed: ours against upstream ``mineru-html`` 1.1.2 on the same pages, in the same run.

Usage: ``.venv/bin/python bench/simplify.py [--data FILE.jsonl.gz ...] [--limit N] [--rounds R]``.
Default data: ``../shared/data/dev.jsonl.gz`` and the first 400 pages of ``dev_hard.jsonl.gz`` (the bundled
sample when absent), each reported on its own. Both run single-threaded, one after the other; the upstream
one in its own venv (``make oracle``), timing only its ``simplify_html`` call per page, as ours is timed.
Times are CPU times of the process (best of R rounds per page), so that other work on a shared machine
counts against neither side. Prints pages/s per core, the ratio, and how many pages give identical
Simplified HTML (and mapping HTML).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dripper_core.simplify import SimplifyOptions, simplify_html  # noqa: E402

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


def _compare(path: Path, limit: int | None, rounds: int) -> dict:
    records = _records(path, limit)
    upstream_seconds, upstream = _upstream(records, rounds)
    # Upstream's exact model input (for the identity count), and no block texts (upstream computes none).
    options = SimplifyOptions(keep_body_text=False, block_text=False)
    ours_seconds = 0.0
    identical = identical_mapping = 0
    for record in records:
        best = float("inf")
        for _ in range(rounds):
            started = time.process_time()
            page = simplify_html(record["html"], options=options)
            best = min(best, time.process_time() - started)
        ours_seconds += best
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
        "identical_simplified": identical,
        "identical_mapping": identical_mapping,
    }


def main() -> int:
    shared = REPO.parent / "shared" / "data"
    defaults = [shared / "dev.jsonl.gz", shared / "dev_hard.jsonl.gz"]
    if not defaults[0].exists():
        defaults = [REPO / "data" / "sample" / "pages.jsonl.gz"]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, nargs="+", default=defaults)
    parser.add_argument("--limit", type=int, default=400, help="first N pages of each file (0: all)")
    parser.add_argument("--rounds", type=int, default=2, help="best of R rounds, per page, for both")
    args = parser.parse_args()
    if not _ORACLE_PYTHON.exists():
        print("the upstream oracle venv is missing: run `make oracle`", file=sys.stderr)
        return 2
    for path in args.data:
        row = _compare(path, args.limit or None, args.rounds)
        print(
            f"{row['data']}: {row['pages']} pages | upstream mineru-html 1.1.2 "
            f"{row['upstream_pages_per_s']:.1f} pages/s per core | ours {row['ours_pages_per_s']:.1f} "
            f"pages/s per core | ratio {row['ratio']:.2f}x | identical Simplified HTML "
            f"{row['identical_simplified']}/{row['pages']}, mapping HTML {row['identical_mapping']}/{row['pages']}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
