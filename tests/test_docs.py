"""The documentation site builds with ``mkdocs build --strict``, the README stays a short front page, and
what the repository cites is in it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

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


# A citation of a file the repository does not hold: the developers' notes that lived beside the checkout.
OUTSIDE_CITATION = re.compile(r"\b(?:UPSTREAM|DESIGN|ENVIRONMENT)\.md\b|\bshared/[\w./-]*\.md\b")
DOCS_CITATION = re.compile(r"\bdocs/([\w/-]+\.md)(?:#([\w-]+))?")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".txt", ".sh", ".json", ".j2"}
TEXT_NAMES = {"Makefile", "Dockerfile"}


def _repository_text_files() -> list[Path]:
    """Tracked files and new ones git does not ignore: what a clone (or the next commit) holds."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the file list comes from git")
    files = []
    for name in listed:
        path = REPO / name
        if (
            path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES or path.name.endswith(".Dockerfile")
        ) and (path.is_file()):
            files.append(path)
    return files


def _anchors(markdown: str) -> set[str]:
    """The heading anchors MkDocs gives a page (Python-Markdown's toc slugs)."""
    anchors = set()
    for line in markdown.splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).replace("`", "")
            text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
            text = re.sub(r"[^\w\s-]", "", text).strip().lower()
            anchors.add(re.sub(r"[-\s]+", "-", text))
    return anchors


def test_nothing_cites_a_file_outside_the_repository():
    """Code comments, docs and build files cite only what a clone holds (``docs/upstream.md``, not notes
    that lived beside the developers' checkout)."""
    found = []
    for path in _repository_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE_CITATION.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    assert not found, "citations of files that are not in the repository:\n" + "\n".join(found)


def test_cited_documentation_pages_and_sections_exist():
    """A documentation page cited in code and docs (``docs/<page>.md#<section>``) exists, and so does the
    heading its section names."""
    anchors: dict[str, set[str]] = {}
    missing = []
    for path in _repository_text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for page, section in DOCS_CITATION.findall(text):
            target = REPO / "docs" / page
            if not target.is_file():
                missing.append(f"{path.relative_to(REPO)}: docs/{page} does not exist")
                continue
            if section:
                if page not in anchors:
                    anchors[page] = _anchors(target.read_text(encoding="utf-8"))
                if section not in anchors[page]:
                    missing.append(f"{path.relative_to(REPO)}: docs/{page} has no section #{section}")
    assert not missing, "\n".join(missing)


def test_tests_named_in_the_docs_exist():
    """A behaviour the docs say a test holds (``tests/<file>.py::<test>``) names a test that exists."""
    missing = []
    for path in _markdown_sources():
        for file_name, test_name in re.findall(
            r"\b(tests/[\w/]+\.py)::(\w+)", path.read_text(encoding="utf-8")
        ):
            target = REPO / file_name
            if not target.is_file() or not re.search(
                rf"^\s*(?:async\s+)?def {test_name}\(", target.read_text(encoding="utf-8"), re.MULTILINE
            ):
                missing.append(f"{path.relative_to(REPO)}: {file_name}::{test_name}")
    assert not missing, "tests named in the docs that do not exist:\n" + "\n".join(missing)
