"""Fixtures for the extraction-benchmark tests: the shared dev data and tiny hand-written data files."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

# The checkout lives next to ``shared/`` (…/main and …/shared); DRIPPER_SHARED_DATA points elsewhere.
DEFAULT_SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def shared_data_dir() -> Path:
    return Path(os.environ.get("DRIPPER_SHARED_DATA", DEFAULT_SHARED_DATA))


@pytest.fixture(scope="session")
def dev_data() -> Path:
    """``dev.jsonl.gz`` from the shared data folder; the test is skipped when it is absent."""
    path = shared_data_dir() / "dev.jsonl.gz"
    if not path.is_file():
        pytest.skip(f"{path} not found (set DRIPPER_SHARED_DATA to the folder holding dev.jsonl.gz)")
    return path


ARTICLE_TEXT = (
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch. "
    "Nobody expected the fox to come back the next morning with three friends."
)

ARTICLE_HTML = f"""<html><head><title>Fox news</title></head><body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/about">About us</a></li></ul></nav>
<article><h1>The fox returns</h1>
<p>{ARTICLE_TEXT}</p>
<p>Second paragraph with <a href="https://example.com/more">a link</a> and an <img src="x.png" alt="image">
picture, long enough to be kept by every heuristic extractor that looks at text density.</p>
</article>
<footer>Copyright 2024 Example Media. All rights reserved.</footer>
</body></html>"""


def webmainbench_records() -> list[dict]:
    """Four WebMainBench-schema records covering the reader's edge cases.

    1. ``groundtruth_content`` present: it wins over ``convert_main_content``.
    2. ``convert_main_content`` followed by ``groundtruth_content: null`` (the toolkit's key-order pitfall):
       the ground truth must still be ``convert_main_content``.
    3. Only ``convert_main_content``.
    4. Neither: no ground truth.
    All carry annotation artefacts in the HTML.
    """
    html = (
        '<html><body><div data-anno-uid="a1" class="main"><marked-text data-anno-uid=\'b2\'>'
        f"{ARTICLE_TEXT}</marked-text><marked-tail>tail</marked-tail>"
        "<p data-anno-uid=x3>para <marked-inline>inline</marked-inline></p></div></body></html>"
    )
    meta = {
        "language": "en",
        "style": "Article",
        "level": "simple",
        "table": [],
        "code": ["inline"],
        "equation": [],
    }
    return [
        {
            "track_id": "t-1",
            "url": "https://example.com/1",
            "html": html,
            "main_html": None,
            "convert_main_content": "converted one",
            "groundtruth_content": "# Calibrated\n\n" + ARTICLE_TEXT,
            "meta": meta,
        },
        {
            "track_id": "t-2",
            "url": "https://example.com/2",
            "html": html,
            "convert_main_content": ARTICLE_TEXT,
            "groundtruth_content": None,
            "meta": {**meta, "level": "hard", "style": "Forum_or_Article_with_commentsection"},
        },
        {
            "track_id": "t-3",
            "url": None,
            "html": html,
            "convert_main_content": ARTICLE_TEXT,
            "meta": {**meta, "language": "zh", "level": "mid", "table": ["data", "layout"]},
        },
        {"track_id": "t-4", "url": None, "html": html, "meta": {}},
    ]


@pytest.fixture
def webmainbench_file(tmp_path: Path) -> Path:
    path = tmp_path / "wmb.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in webmainbench_records()), encoding="utf-8")
    return path


def dev_records() -> list[dict]:
    """Two dev-format records: a full-text page and a snippet page."""
    return [
        {
            "id": "p-full",
            "url": "https://example.com/fox",
            "html": ARTICLE_HTML,
            "ground_truth_text": "# The fox returns\n\n" + ARTICLE_TEXT,
            "ground_truth_format": "markdown(html2text of expected.html)",
            "language": "en",
            "source": "unit",
            "title": "Fox news",
        },
        {
            "id": "p-snip",
            "url": None,
            "html": ARTICLE_HTML,
            "ground_truth_text": None,
            "ground_truth_format": "snippets(with/without)",
            "with_snippets": ["The quick brown fox", "three friends"],
            "without_snippets": ["All rights reserved"],
            "language": "en",
            "source": "unit",
            "page_type": "article",
        },
    ]


@pytest.fixture
def fake_core(monkeypatch):
    """Install a fake ``dripper_core.pipeline`` recording its calls; the real types module is used."""
    from dripper_core.types import ExtractResult

    calls: list[dict] = []

    def extract_batch(pages, labeler="oracle", fallback="trafilatura"):
        calls.append(
            {"ids": [p.doc_id for p in pages], "gts": [p.ground_truth for p in pages], "labeler": labeler}
        )
        if any("crash" in p.html for p in pages):
            raise RuntimeError("batch crashed")
        return [
            ExtractResult(
                doc_id=p.doc_id,
                url=p.url,
                markdown=f"# MD {p.doc_id}",
                main_html=f"<h1>HTML {p.doc_id}</h1><p><a href='/x'>link text</a></p>",
                labels=[True],
                extractor=f"dripper:{labeler}",
                fallback_reason="parse_error" if "fallback" in p.html else None,
            )
            for p in pages
        ]

    module = types.ModuleType("dripper_core.pipeline")
    module.extract_batch = extract_batch
    monkeypatch.setitem(sys.modules, "dripper_core.pipeline", module)
    # `from dripper_core import pipeline` reads the package attribute first once the real module was imported.
    import dripper_core

    monkeypatch.setattr(dripper_core, "pipeline", module, raising=False)
    return calls
