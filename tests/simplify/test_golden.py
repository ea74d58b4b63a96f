"""The simplifier's output is pinned: Simplified HTML, mapping HTML and blocks equal the stored digests.

``golden_hashes.json`` was written by the simplifier as it stood before the speed work of issue 16, so any
change to the model input, the mapping view or the blocks (tag and text, which the CPU labeler reads) on
these real pages fails here. Pages: the bundled sample, and where ``../shared/data`` is present all dev
pages and the first 400 dev_hard pages (the pages ``bench/simplify.py`` times).

Regenerate only for a deliberate change of the format:
``.venv/bin/python -m tests.simplify.test_golden [--output FILE] [--all-hard]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import pytest

from dripper.simplify import simplify_html
from tests.conftest import SAMPLE_PAGES, read_records, shared_data_dir

GOLDEN = Path(__file__).with_name("golden_hashes.json")
HARD_PAGES = 400
# 64 bits of sha256 per output: enough to tell any change apart, small enough to keep in the repository.
_DIGEST_CHARS = 16


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]


def page_digests(html: str) -> dict[str, str]:
    """Digests of one page's Simplified HTML, mapping HTML and blocks, with the default options."""
    try:
        page = simplify_html(html)
    except Exception as error:  # a page that raises is pinned by the error's type
        return {"error": type(error).__name__}
    blocks = json.dumps(
        [(block.item_id, block.tag, block.simplified_html, block.text) for block in page.blocks]
    )
    return {
        "simplified": _digest(page.simplified_html),
        "mapping": _digest(page.mapping_markup()),
        "blocks": _digest(blocks),
    }


def _page_sets(hard_limit: int | None = HARD_PAGES) -> dict[str, tuple[Path, int | None]]:
    """Each page set's file and how many of its first pages are pinned (``None``: all)."""
    sets: dict[str, tuple[Path, int | None]] = {"sample": (SAMPLE_PAGES, None)}
    directory = shared_data_dir()
    if directory is not None:
        sets["dev"] = (directory / "dev.jsonl.gz", None)
        sets["dev_hard"] = (directory / "dev_hard.jsonl.gz", hard_limit)
    return sets


def _load_golden() -> dict[str, dict[str, dict[str, str]]]:
    return json.loads(GOLDEN.read_text())


def _changed_pages(name: str) -> list[str]:
    expected = _load_golden()[name]
    path, limit = _page_sets()[name]
    records = read_records(path, limit)
    assert {record["id"] for record in records} == set(expected), "the page set changed: regenerate"
    return [record["id"] for record in records if page_digests(record["html"]) != expected[record["id"]]]


def test_sample_output_equals_golden():
    assert _changed_pages("sample") == []


@pytest.mark.parametrize("name", ["dev", "dev_hard"])
def test_dev_output_equals_golden(name):
    if shared_data_dir() is None:
        pytest.skip("../shared/data is not available")
    assert _changed_pages(name) == []


def main() -> int:
    parser = argparse.ArgumentParser(description="write the simplifier's golden digests")
    parser.add_argument("--output", type=Path, default=GOLDEN)
    parser.add_argument("--all-hard", action="store_true", help="every dev_hard page, not the first 400")
    args = parser.parse_args()
    golden = {}
    for name, (path, limit) in _page_sets(None if args.all_hard else HARD_PAGES).items():
        golden[name] = {record["id"]: page_digests(record["html"]) for record in read_records(path, limit)}
        print(f"{name}: {len(golden[name])} pages", file=sys.stderr)
    args.output.write_text(json.dumps(golden, indent=0, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
