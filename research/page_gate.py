"""Would a learned page gate beat the expected-F1 cut? Replays gates on a ``cpu_labeler_quality`` run.

Usage::

    .venv/bin/python -m research.page_gate --cv CV.pkl.gz --pages PAGES.jsonl --data FILE… \
        [--lump-sources NAME=SOURCE,SOURCE…] [--metric rouge_f1_norm] [--workers N]

``--cv`` and ``--pages`` are the ``--save-cv`` and ``--pages-out`` of one ``python -m
research.cpu_labeler_quality quality`` run, ``--data`` and ``--lump-sources`` the same as that run's (the
training pages are rebuilt in the same order, to pair each with its out-of-fold block probabilities). For every full-text training page it takes, from the pages
file, the model's own labels' score (the ``ungated`` row) and Trafilatura's (the fallback), and from the
probabilities a dozen page summaries that the labeler could compute at run time (its expected F1, best
block, share of text it is unsure of, how many runs its main blocks form, the page-level block features).

It prints, per file, the mean score of: always the model, always the fallback, the better of the two (the
ceiling of any gate), the expected-F1 cut at several values (what the shipped gate does), and a learned
gate: a small LightGBM regressor of (model − fallback) from the summaries, itself evaluated
leave-one-source-out (its prediction for a page comes from a regressor that saw no page of its source),
sending a page to the fallback when the predicted gain is below a margin. Each cell gives the share of
pages sent to the fallback too (each costs a Trafilatura run).
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
from pathlib import Path

import numpy as np

SUMMARY_NAMES = (
    "expected_f1",
    "best_probability",
    "selected_char_share",
    "unsure_char_share",
    "selected_mean_probability",
    "log_blocks",
    "log_chars",
    "selected_runs",
    "first_selected_position",
    "last_selected_position",
    "page_link_share",
    "page_dense_share",
    "page_n_articles",
    "page_max_share",
)
_PAGE_FEATURES = ("page_link_share", "page_dense_share", "page_n_articles", "page_max_share")
_EXPECTED_F1_CUTS = (0.0, 0.8, 0.85, 0.9, 0.92)
_MARGINS = (-0.05, -0.02, 0.0, 0.02)


def page_summary(probabilities: np.ndarray, features) -> list[float]:
    """The :data:`SUMMARY_NAMES` of one page, from its block probabilities and features."""
    from dripper.labelers.cpu.decision import expected_f1, expected_f1_main
    from dripper.labelers.cpu.features import FEATURE_NAMES

    p = np.asarray(probabilities, dtype=np.float64)
    chars = features.chars.astype(np.float64)
    main = expected_f1_main(p, chars)
    total = float(chars.sum()) or 1.0
    selected = float(chars[main].sum())
    positions = np.flatnonzero(main)
    runs = int(main[0]) + int(np.count_nonzero(main[1:] & ~main[:-1])) if main.size else 0
    n = max(p.shape[0] - 1, 1)
    row = [
        expected_f1(p, chars, main),
        float(p.max()) if p.size else 0.0,
        selected / total,
        float(chars[(p > 0.2) & (p < 0.8)].sum()) / total,
        float((p[main] * chars[main]).sum()) / selected if selected else 0.0,
        float(np.log1p(p.shape[0])),
        float(np.log1p(total)),
        float(runs),
        float(positions[0]) / n if positions.size else 1.0,
        float(positions[-1]) / n if positions.size else 1.0,
    ]
    row += [float(features.values[0, FEATURE_NAMES.index(name)]) for name in _PAGE_FEATURES]
    return row


def _scores(path: Path, metric: str) -> dict[str, dict[str, tuple[str, float]]]:
    """Per page id, per row: (file, score) for the rows the gates choose between."""
    wanted = {"dripper:cpu-oof/ungated", "trafilatura"}
    scores: dict[str, dict[str, tuple[str, float]]] = {}
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if record.get("extractor") in wanted and record.get(metric) is not None:
                key = f"{record.get('source')}:{record['id']}"
                scores.setdefault(key, {})[record["extractor"]] = (record.get("file", "?"), record[metric])
    return scores


def held_out_predictions(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, rounds: int = 150, **params
) -> np.ndarray:
    """Predictions of ``y`` from ``x`` by a small LightGBM regressor, each group's rows by one fitted on the
    other groups' rows; ``params`` add to or override the regressor's (7 leaves, rate 0.05, 2 threads)."""
    import lightgbm

    settings = {
        "objective": "regression",
        "learning_rate": 0.05,
        "num_leaves": 7,
        "min_data_in_leaf": 20,
        "lambda_l2": 1.0,
        "num_threads": 2,
        "seed": 0,
        "deterministic": True,
        "verbose": -1,
        **params,
    }
    predicted = np.zeros(len(y))
    for group in np.unique(groups):
        held = groups == group
        booster = lightgbm.train(settings, lightgbm.Dataset(x[~held], y[~held]), num_boost_round=rounds)
        predicted[held] = booster.predict(x[held])
    return predicted


def _line(label: str, files: np.ndarray, chosen: np.ndarray, to_fallback: np.ndarray) -> str:
    cells = []
    for file in sorted(set(files)):
        mine = files == file
        cells.append(f"{file} {chosen[mine].mean():.3f} ({to_fallback[mine].mean():.0%})")
    return f"  {label:28} " + ", ".join(cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cv", type=Path, required=True)
    parser.add_argument("--pages", type=Path, required=True)
    parser.add_argument("--data", type=Path, nargs="+", required=True)
    parser.add_argument("--lump-sources", action="append", default=[], metavar="NAME=SOURCE,SOURCE")
    parser.add_argument("--metric", default="rouge_f1_norm")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)

    from dripper.labelers.cpu.training_set import build_training_set

    lumped = {}
    for spec in args.lump_sources:
        name, _, members = spec.partition("=")
        lumped.update({member: name for member in members.split(",")})
    with gzip.open(args.cv, "rb") as cached:
        cv = pickle.load(cached)  # noqa: S301 - our own --save-cv file
    training = build_training_set(args.data, workers=args.workers, progress=True)
    if len(training.pages) != len(cv.probabilities):
        raise SystemExit(
            f"{len(training.pages)} training pages but {len(cv.probabilities)} in {args.cv}: "
            "give the --data of the run that saved it"
        )
    scores = _scores(args.pages, args.metric)
    rows, files, sources, model, fallback = [], [], [], [], []
    for page, probabilities in zip(training.pages, cv.probabilities, strict=True):
        pair = scores.get(f"{page.source}:{page.doc_id}", {})
        if len(pair) < 2:
            continue
        rows.append(page_summary(probabilities, page.features))
        files.append(pair["trafilatura"][0])
        sources.append(lumped.get(page.source, page.source))
        model.append(pair["dripper:cpu-oof/ungated"][1])
        fallback.append(pair["trafilatura"][1])
    summaries, files = np.array(rows), np.array(files)
    model, fallback = np.array(model), np.array(fallback)
    print(f"{len(model)} pages paired; {args.metric}, per file: mean (share sent to the fallback)")
    print(_line("always the model", files, model, np.zeros(len(model))))
    print(_line("always the fallback", files, fallback, np.ones(len(model))))
    print(_line("better of the two (ceiling)", files, np.maximum(model, fallback), fallback > model))
    expected = summaries[:, 0]
    for cut in _EXPECTED_F1_CUTS:
        declined = expected < cut
        print(_line(f"expected F1 >= {cut:.2f}", files, np.where(declined, fallback, model), declined))
    predicted = held_out_predictions(summaries, model - fallback, np.array(sources))  # leave one source out
    for margin in _MARGINS:
        declined = predicted < margin
        chosen = np.where(declined, fallback, model)
        print(_line(f"learned gain >= {margin:+.2f}", files, chosen, declined))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
