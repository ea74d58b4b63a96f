"""Simplification speed: ours against upstream ``mineru-html`` 1.1.2 on the same pages, in the same run.

Usage: ``.venv/bin/python bench/simplify.py [--data FILE.jsonl.gz] [--limit N] [--rounds R]``.
Default data: ``../shared/data/dev.jsonl.gz`` (the bundled sample when absent). Both run single-threaded,
one after the other; the upstream one in its own venv (``make oracle``), timing only its
``simplify_html`` call per page, as ours is timed. Prints pages/s per core, the ratio, and how many
pages give identical Simplified HTML.
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


def _records(path: Path, limit: int | None) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines]
    return records[:limit] if limit else records


def main() -> int:
    default = REPO.parent / "shared" / "data" / "dev.jsonl.gz"
    if not default.exists():
        default = REPO / "data" / "sample" / "pages.jsonl.gz"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=default)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=2, help="best of R rounds, per page, for both")
    args = parser.parse_args()
    oracle_python = REPO / ".venv-oracle" / "bin" / "python"
    if not oracle_python.exists():
        print("the upstream oracle venv is missing: run `make oracle`", file=sys.stderr)
        return 2
    records = _records(args.data, args.limit or None)

    upstream_seconds: dict[str, float] = {}
    upstream_html: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "in.jsonl", Path(folder) / "out.jsonl"
        source.write_text("".join(json.dumps({"id": r["id"], "html": r["html"]}) + "\n" for r in records))
        for _ in range(args.rounds):
            subprocess.run(
                [str(oracle_python), str(REPO / "tests/oracle/mineru_oracle.py"), str(source), str(target)],
                check=True,
            )
            for row in map(json.loads, target.read_text().splitlines()):
                seconds = row.get("seconds", float("inf"))
                upstream_seconds[row["id"]] = min(seconds, upstream_seconds.get(row["id"], float("inf")))
                upstream_html[row["id"]] = row.get("simplified_html") or ""

    ours_seconds: dict[str, float] = {}
    identical = 0
    # Upstream's exact model input (for the identity count), and no block texts (upstream computes none).
    options = SimplifyOptions(keep_body_text=False, block_text=False)
    for record in records:
        best = float("inf")
        for _ in range(args.rounds):
            started = time.perf_counter()
            page = simplify_html(record["html"], options=options)
            best = min(best, time.perf_counter() - started)
        ours_seconds[record["id"]] = best
        identical += _WHITESPACE.sub(" ", page.simplified_html) == _WHITESPACE.sub(
            " ", upstream_html[record["id"]]
        )

    total_up = sum(upstream_seconds.values())
    total_ours = sum(ours_seconds.values())
    n = len(records)
    print(f"pages: {n} from {args.data}")
    print(
        f"upstream mineru-html 1.1.2: {n / total_up:8.1f} pages/s per core ({1000 * total_up / n:.1f} ms/page)"
    )
    print(
        f"ours:                       {n / total_ours:8.1f} pages/s per core ({1000 * total_ours / n:.1f} ms/page)"
    )
    print(f"speed-up: {total_up / total_ours:.2f}x   identical Simplified HTML: {identical}/{n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
