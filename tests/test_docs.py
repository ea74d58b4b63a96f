"""The documentation site builds with ``mkdocs build --strict`` and the README stays a short front page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
README_MAX_LINES = 150
ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\d{1,3}\b", re.IGNORECASE)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _markdown_sources() -> list[Path]:
    return [README, *sorted((REPO / "docs").rglob("*.md"))]


def test_mkdocs_build_strict(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (
        "mkdocs build --strict failed (the `docs` extra installs mkdocs):\n" + proc.stdout + proc.stderr
    )
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "pipeline" / "index.html").is_file()


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


def test_readme_starts_with_the_two_commands():
    lines = [line for line in README.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert lines[0].startswith("# "), "README.md opens with its title"
    assert lines[1].startswith("```"), "the first thing after the title is the commands' code block"
    assert lines[2].startswith("make demo"), lines[2]
    assert lines[3].startswith("make test"), lines[3]


def test_no_paths_outside_the_repository_and_no_issue_numbers():
    for path in _markdown_sources():
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(REPO)
        assert "../shared" not in text, f"{name} points outside the repository (../shared)"
        found = ISSUE_NUMBER.findall(text)
        assert not found, f"{name} names internal issue numbers: {found}"


def test_readme_links_resolve():
    for target in LINK.findall(README.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+://", target):
            continue
        file_part = target.split("#", 1)[0]
        assert file_part, target
        assert (REPO / file_part).resolve().is_relative_to(REPO), (
            f"README link leaves the repository: {target}"
        )
        assert (REPO / file_part).exists(), f"README link to a missing file: {target}"
