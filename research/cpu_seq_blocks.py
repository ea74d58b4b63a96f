"""Block-level comparison of cached out-of-fold probabilities: ``cpu`` against ``cpu_seq`` runs.

Usage::

    .venv/bin/python -m research.cpu_seq_blocks [TAG …] [--cache DIR]

Reads ``research.cpu_seq_quality``'s cache (``set.pkl.gz``, ``trees_cv.pkl.gz``, ``seq_oof{TAG}.pkl.gz``;
the empty tag is ``""``) and prints, per group of fully labelled pages (all, hard, articles, each WCXB page
type or other source), the mean character F1 of the ``expected_f1`` rule's labels and the block log-loss
weighted by √chars. No extraction: seconds, not minutes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

__all__ = ["main"]

_HARD = ("wcxb", "cleaneval", "dragnet")


def page_figures(page, p: np.ndarray) -> tuple[float, float]:
    """Character F1 of the ``expected_f1`` labels and the √chars-weighted log-loss of one page."""
    from dripper.labelers.cpu.decision import finish_labels
    from dripper.labelers.cpu.train import page_scores

    chars = page.features.chars.astype(np.float64)
    main = np.array(finish_labels(p, page.features.chars, 0.4, decision="expected_f1"), bool)
    f1 = page_scores(page, p, selected=main)["f1"]
    keep = chars > 0
    q, y = np.clip(p[keep], 1e-6, 1 - 1e-6), page.labels[keep]
    loss = -(y * np.log(q) + (1 - y) * np.log(1 - q))
    return f1, float(np.average(loss, weights=np.sqrt(chars[keep])))


def summary(pages, probabilities) -> dict[str, tuple[int, float, float]]:
    """``{group: (pages, mean F1, mean log-loss)}`` over the fully labelled pages."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for page, p in zip(pages, probabilities, strict=True):
        if page.partial:
            continue
        kind = "hard" if page.source in _HARD else "articles"
        detail = page.page_type if page.source == "wcxb" and page.page_type else page.source
        for group in ("all", kind, detail):
            groups.setdefault(group, []).append(page_figures(page, p))
    return {
        g: (len(v), float(np.mean([a for a, _ in v])), float(np.mean([b for _, b in v])))
        for g, v in groups.items()
    }


def main(argv=None) -> int:
    from research.cpu_seq_quality import DEFAULT_CACHE, load_cached

    parser = argparse.ArgumentParser(
        prog="python -m research.cpu_seq_blocks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("tags", nargs="*", default=[""], help="suffixes of cached seq_oof files")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args(argv)
    pages = load_cached(args.cache / "set.pkl.gz").pages
    rows = {"cpu": summary(pages, load_cached(args.cache / "trees_cv.pkl.gz")["stage2"])}
    for tag in args.tags:
        rows[f"seq{tag}"] = summary(pages, load_cached(args.cache / f"seq_oof{tag}.pkl.gz")["probabilities"])
    print("F1 / log-loss per group")
    print("group".ljust(22), "pages".rjust(5), *[name.rjust(16) for name in rows])
    for group in sorted(rows["cpu"], key=lambda g: (g not in ("all", "hard", "articles"), g)):
        cells = [f"{rows[name][group][1]:.3f} / {rows[name][group][2]:.3f}".rjust(16) for name in rows]
        print(group.ljust(22), str(rows["cpu"][group][0]).rjust(5), *cells)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
