"""Our model input against upstream ``mineru-html`` 1.1.2's on every page of the dev sets.

    .venv/bin/python -m research.upstream_conformance [--data FILE ...] [--limit N] [--show K] [--json]

For each page, upstream's ``simplify_html`` and prompt come from the oracle venv (``.venv-oracle``,
``tests/oracle/mineru_oracle.py``) and ours from :func:`dripper.simplify.simplify_html` with
``keep_body_text=False`` (the upstream-identical mode). A page is *identical* when both the Simplified HTML
and the full prompt are equal byte for byte, or when both sides fail on it. Pages that differ are split into
*differing ids* (the number of ``_item_id`` blocks differs, so every later label lands on another block) and
*text only* (same blocks, some markup or text differs). *Errors* count pages one side fails on.

Default data: ``../shared/data/dev.jsonl.gz``, ``dev_hard.jsonl.gz``, ``dev_fundus.jsonl.gz``; a file that
is absent is skipped with a note (and the bundled sample is used when none is there).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ORACLE_PYTHON = REPO / ".venv-oracle" / "bin" / "python"
ORACLE_RUNNER = REPO / "tests" / "oracle" / "mineru_oracle.py"
DEV_FILES = ("dev.jsonl.gz", "dev_hard.jsonl.gz", "dev_fundus.jsonl.gz")
_ITEM_ID = re.compile(r'\s_item_id="\d+"')


@dataclass
class Conformance:
    """The comparison of one data file."""

    data: str
    pages: int = 0
    identical: int = 0
    differing_ids: int = 0
    differing_text: int = 0
    errors_ours: int = 0
    errors_upstream: int = 0
    examples: list[str] = field(default_factory=list)
    """Ids of the first differing pages."""


def _records(path: Path, limit: int | None) -> Iterator[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for index, line in enumerate(lines):
            if limit is not None and index >= limit:
                return
            record = json.loads(line)
            yield {"id": str(record.get("id", index)), "html": record["html"]}


def run_oracle(records: list[dict], folder: Path) -> Iterator[dict]:
    """Upstream's output for each record, in order (``simplified_html``, ``prompt``, ``error``)."""
    source, target = folder / "in.jsonl", folder / "out.jsonl"
    with source.open("w") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    subprocess.run([str(ORACLE_PYTHON), str(ORACLE_RUNNER), str(source), str(target)], check=True)
    with target.open() as lines:
        yield from map(json.loads, lines)


def compare_page(html: str, upstream: dict) -> str:
    """``identical``, ``differing_ids``, ``differing_text``, ``errors_ours`` or ``errors_upstream``."""
    from dripper.prompt import build_prompt
    from dripper.simplify import SimplifyOptions, simplify_html

    try:
        ours = simplify_html(html, options=SimplifyOptions(keep_body_text=False, block_text=False))
    except Exception:  # a failure on either side is a figure of the comparison, not a crash of it
        return "identical" if upstream["error"] else "errors_ours"
    if upstream["error"]:
        return "errors_upstream"
    theirs = upstream["simplified_html"]
    if ours.simplified_html == theirs and build_prompt(ours.simplified_html) == upstream["prompt"]:
        return "identical"
    if len(_ITEM_ID.findall(ours.simplified_html)) != len(_ITEM_ID.findall(theirs)):
        return "differing_ids"
    return "differing_text"


def conformance(path: Path, limit: int | None = None, examples: int = 10) -> Conformance:
    """Compare every page of one ``.jsonl.gz`` file (or its first ``limit``)."""
    records = list(_records(path, limit))
    result = Conformance(data=path.name, pages=len(records))
    with tempfile.TemporaryDirectory() as folder:
        for record, upstream in zip(records, run_oracle(records, Path(folder)), strict=True):
            outcome = compare_page(record["html"], upstream)
            setattr(result, outcome, getattr(result, outcome) + 1)
            if outcome != "identical" and len(result.examples) < examples:
                result.examples.append(f"{record['id']}: {outcome}")
    return result


def main(argv: list[str] | None = None) -> int:
    shared = REPO.parent / "shared" / "data"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, nargs="+", default=[shared / name for name in DEV_FILES])
    parser.add_argument("--limit", type=int, default=0, help="first N pages of each file (0: all)")
    parser.add_argument("--show", type=int, default=10, help="list up to K differing pages per file")
    parser.add_argument("--json", action="store_true", help="one JSON line per file")
    args = parser.parse_args(argv)
    if not ORACLE_PYTHON.exists():
        print("the upstream oracle venv is missing: run `make oracle`", file=sys.stderr)
        return 2
    paths = [path for path in args.data if path.exists()]
    for path in sorted(set(args.data) - set(paths)):
        print(f"{path}: absent, skipped", file=sys.stderr)
    if not paths:
        paths = [REPO / "data" / "sample" / "pages.jsonl.gz"]
        print(f"no dev file found: comparing the bundled sample ({paths[0]})", file=sys.stderr)
    for path in paths:
        row = conformance(path, args.limit or None, args.show)
        if args.json:
            print(json.dumps(asdict(row)), flush=True)
            continue
        print(
            f"{row.data}: {row.identical}/{row.pages} identical (Simplified HTML and prompt) | "
            f"differing ids {row.differing_ids} | text only {row.differing_text} | "
            f"errors ours {row.errors_ours}, upstream {row.errors_upstream}",
            flush=True,
        )
        for example in row.examples:
            print(f"  {example}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
