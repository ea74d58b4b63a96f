"""The ablation report's controls: how the baseline arms were run, and what decontamination removed.

Collected per extractor by :func:`dripper.eval.report.collect` (``baseline``: a whole-page extractor's exact
settings and their source, from its spec; ``decontamination``: its refinement summary's section) and
rendered in the report's corpus section by :func:`controls_html` and :func:`controls_markdown`.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "baseline_settings",
    "baseline_rows",
    "controls_html",
    "controls_markdown",
    "decontamination_rows",
]

DECONT_NOTE = (
    "Documents removed from each corpus because they share an n-gram with an item of the evaluation suite "
    "(the items lm-eval scores); in spans mode, documents cut (their matching lines removed). A benchmark "
    "whose data was not at hand is listed as not decontaminated."
)


def baseline_settings(spec: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A whole-page extractor arm's exact settings and their source (``None`` for a block labeler): read
    from its class and the spec's options, nothing built."""
    from dripper.config.labelers import PAGE_EXTRACTORS, labeler_factory

    labeler = (spec or {}).get("labeler")
    if labeler not in PAGE_EXTRACTORS:
        return None
    cls = labeler_factory(labeler)
    return {
        "extractor": labeler,
        "source": cls.source,
        "settings": cls.settings_for((spec or {}).get("options") or {}),
    }


def baseline_rows(data: Mapping[str, Any]) -> list[list[Any]]:
    """``[arm, extractor, settings, source]`` per baseline arm."""
    rows = []
    for e in data["extractors"]:
        baseline = e.get("baseline")
        if baseline:
            settings = ", ".join(f"{k}={v}" for k, v in baseline["settings"].items())
            rows.append([e["name"], baseline["extractor"], settings, baseline["source"]])
    return rows


def _benchmarks(data: Mapping[str, Any]) -> list[str]:
    names: dict[str, None] = {}
    for e in data["extractors"]:
        names.update(dict.fromkeys((e.get("decontamination") or {}).get("benchmarks") or {}))
    return list(names)


def decontamination_rows(data: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """The decontamination table: per arm its suite, n and mode, documents removed per benchmark, the totals
    and the benchmarks left out; arms refined without the step say so."""
    benchmarks = _benchmarks(data)
    header = ["extractor", "suite", "n-gram", "mode", *benchmarks, "removed", "cut", "not decontaminated"]
    rows = []
    for e in data["extractors"]:
        decont = e.get("decontamination")
        if not decont:
            rows.append([e["name"], "not decontaminated", *["–"] * (len(header) - 2)])
            continue
        per = decont.get("benchmarks") or {}
        rows.append(
            [
                e["name"],
                decont.get("suite"),
                decont.get("n"),
                decont.get("mode"),
                *[(per.get(name) or {}).get("documents_removed", "–") for name in benchmarks],
                decont.get("documents_removed", 0),
                decont.get("documents_cut", 0),
                ", ".join(decont.get("unavailable") or {}) or "–",
            ]
        )
    return header, rows


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], css: str) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows
    )
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def controls_html(data: Mapping[str, Any]) -> str:
    """The baseline arms' settings (when there are any) and the decontamination table, as HTML."""
    parts = []
    baselines = baseline_rows(data)
    if baselines:
        parts.append("<h3>Baseline arms, as their corpora were made</h3>")
        parts.append(_table(["extractor", "as", "settings", "source"], baselines, "baselines"))
    header, rows = decontamination_rows(data)
    parts.append(f"<h3>Decontamination</h3><p class='note'>{html.escape(DECONT_NOTE)}</p>")
    parts.append(_table(header, rows, "decontamination"))
    return "".join(parts)


def controls_markdown(data: Mapping[str, Any]) -> list[str]:
    """The same as Markdown lines."""

    def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
        cells = [[str(c).replace("|", "\\|") for c in row] for row in rows]
        return [
            "| " + " | ".join(header) + " |",
            "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(row) + " |" for row in cells),
            "",
        ]

    lines: list[str] = []
    baselines = baseline_rows(data)
    if baselines:
        lines += ["## Baseline arms, as their corpora were made", ""]
        lines += table(["extractor", "as", "settings", "source"], baselines)
    header, rows = decontamination_rows(data)
    lines += ["## Decontamination", "", DECONT_NOTE, ""] + table(header, rows)
    return lines
