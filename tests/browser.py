"""Headless Chromium for the browser tests: Debian's ``chromium`` and ``chromium-driver`` (``make browser``
installs them as root), driven by Selenium with an explicit driver path (nothing is downloaded)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest


def find_chromium() -> tuple[str, str]:
    """The browser and driver binaries, or skip saying how to install them."""
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")
    browser = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        pytest.skip(
            "headless Chromium is not installed: `make browser` (as root: apt-get install chromium chromium-driver)"
        )
    return browser, driver


@contextmanager
def headless_chrome(
    chromium: tuple[str, str], folder: Path, window: tuple[int, int], extra: Sequence[str] = ()
) -> Iterator[object]:
    """A Selenium Chrome driver on a fresh profile under ``folder``, quit on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = chromium
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={window[0]},{window[1]}", f"--user-data-dir={folder / 'chromium-profile'}",
                     *extra):  # fmt: skip
        options.add_argument(argument)
    chrome = webdriver.Chrome(
        service=Service(driver, log_output=str(folder / "chromedriver.log")), options=options
    )
    chrome.set_page_load_timeout(60)
    try:
        yield chrome
    finally:
        chrome.quit()
