"""The fixture ablation report in headless Chromium at 1,280 px: no sideways scrolling, no figure or heading
over another, every figure drawn inside the window. Debian's ``chromium`` and ``chromium-driver`` (``make
browser``), driven by Selenium as in tests/dags/test_airflow_server.py; a screenshot of the whole page goes
to the test's temporary folder and, when ``DRIPPER_SCREENSHOT_DIR`` is set, there too."""

from __future__ import annotations

import base64
import os
import shutil
from itertools import combinations
from pathlib import Path

import pytest

from tests.browser import find_chromium, headless_chrome

pytest.importorskip("matplotlib")

WIDTH = 1280

#: Bounding rectangles of the laid-out elements that must not overlap one another.
RECTS_JS = """
return Array.from(document.querySelectorAll(arguments[0])).map(function (el) {
  var r = el.getBoundingClientRect();
  return {tag: el.tagName, text: (el.alt || el.textContent || "").slice(0, 60), left: r.left,
          top: r.top + window.scrollY, right: r.right, bottom: r.bottom + window.scrollY,
          natural: el.naturalWidth === undefined ? null : el.naturalWidth};
});
"""


@pytest.fixture(scope="module")
def chromium() -> tuple[str, str]:
    """Debian's chromium and its driver, or skip saying how to install them."""
    return find_chromium()


@pytest.fixture
def browser(chromium, tmp_path):
    with headless_chrome(chromium, tmp_path, (WIDTH, 900), ("--hide-scrollbars",)) as chrome:
        yield chrome


def save_full_page(driver, path: Path) -> Path:
    """A PNG of the whole page at the window's width (DevTools capture beyond the viewport); also copied to
    ``$DRIPPER_SCREENSHOT_DIR`` when set."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    width = driver.execute_script("return window.innerWidth")
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        },
    )
    path.write_bytes(base64.b64decode(shot["data"]))
    if os.environ.get("DRIPPER_SCREENSHOT_DIR"):
        extra = Path(os.environ["DRIPPER_SCREENSHOT_DIR"])
        extra.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, extra / path.name)
    return path


def _overlap(a: dict, b: dict) -> bool:
    return min(a["right"], b["right"]) - max(a["left"], b["left"]) > 0.5 and (
        min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > 0.5
    )


def test_report_fits_1280px_without_overlaps(browser, report_manifest, tmp_path):
    from dripper.eval.report import load_manifest, write_report

    page = tmp_path / "report.html"
    write_report(load_manifest(report_manifest), page)
    browser.get(page.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    inner = browser.execute_script("return window.innerWidth")
    assert inner == WIDTH
    try:
        assert browser.execute_script("return document.documentElement.scrollWidth") <= inner

        images = browser.execute_script(RECTS_JS, "figure img")
        assert [i["text"] for i in images] == [
            "Early signal: loss on held-out reference text",
            "Mean benchmark score over training",
            "Final benchmark scores",
            "Corpus through refinement",
            "Extraction quality",
            "Training loss",
        ]
        for image in images:
            assert image["natural"] > 0, f"{image['text']}: not drawn"
            assert image["left"] >= 0 and image["right"] <= inner, f"{image['text']} sticks out: {image}"
        blocks = images + browser.execute_script(RECTS_JS, "h1, h2, h3, figcaption")
        for a, b in combinations(blocks, 2):
            assert not _overlap(a, b), f"{a['tag']} {a['text']!r} overlaps {b['tag']} {b['text']!r}"
        # Nothing wider than the window either: no table, list or code that the page would cut off.
        wide = browser.execute_script(
            "return Array.from(document.querySelectorAll('table, dl, p, code, ul')).filter("
            "function (el) { return el.getBoundingClientRect().right > window.innerWidth; })"
            ".map(function (el) { return el.tagName + ' ' + el.className; })"
        )
        assert wide == []
    finally:
        shot = save_full_page(browser, tmp_path / "ablation-report-1280.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
