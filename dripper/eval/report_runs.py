"""The ablation report's tables about its training runs (:mod:`dripper.eval.report`'s data): each arm's
token budget and epochs, its runs per seed, the early signal (loss on a held-out reference text) per
checkpoint, and the benchmark settings with their sources. :mod:`dripper.eval.report_html` lays them out.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BUDGET_HEADER",
    "EARLY_HEADER",
    "EARLY_NOTE",
    "SEED_HEADER",
    "SETTINGS_HEADER",
    "budget_rows",
    "early_signal_rows",
    "seed_rows",
    "settings_rows",
]


def _count(value: Any) -> str:
    return "–" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def _percent(value: float | None, stderr: float | None = None) -> str:
    if value is None:
        return "–"
    return f"{100 * value:.2f}" + (f" ± {100 * stderr:.2f}" if stderr is not None else "")


EARLY_NOTE = (
    "Each checkpoint's mean per-token loss on a reference text that no arm trains on (by default the ground "
    "truth of labelled pages not in the run's WARC files, checked by URL and HTML hash), tokenized with the "
    "run's tokenizer: a model trained on boilerplate shows it here long before the benchmarks move. The mean "
    "over seeds; sd across seeds; window SE is the standard error over the text's context-length windows."
)

BUDGET_HEADER = [
    "extractor", "corpus tokens", "unique tokens trained on", "training tokens", "steps", "epochs", "flag",
]  # fmt: skip


def budget_rows(data: dict[str, Any]) -> list[list[Any]]:
    """Per arm: its corpus, the unique tokens it trained on (cut with equalize_corpora), the training
    tokens and steps, epochs over the unique tokens, flagged above ``max_epochs``."""
    rows = []
    for e in data["extractors"]:
        b = e.get("budget")
        if not b:
            rows.append([e["name"], "–", "–", "–", "–", "–", "no training run"])
            continue
        unique = _count(b["unique_tokens"]) + (" (cut)" if b.get("cut") else "")
        flag = f"repeated more than {b['max_epochs']:g} times" if b["flagged"] else ""
        epochs = "–" if b["epochs"] is None else f"{b['epochs']:.2f}"
        rows.append([e["name"], _count(b["corpus_tokens"]), unique, _count(b["train_tokens"]), _count(b["train_steps"]),
                     epochs, flag])  # fmt: skip
    return rows


SEED_HEADER = ["extractor", "seed", "average score (%)", "reference loss", "final training loss"]


def seed_rows(data: dict[str, Any]) -> list[list[Any]]:
    """Each arm's runs, one per seed: their final average score and reference loss."""
    rows = []
    for e in data["extractors"]:
        for run in e.get("runs") or []:
            scores = run.get("scores") or {}
            loss = run.get("loss") or []
            reference = scores.get("reference_loss")
            rows.append(
                [
                    e["name"],
                    "–" if run.get("seed") is None else str(run["seed"]),
                    _percent(scores.get("mean"), scores.get("mean_stderr")),
                    "–" if reference is None else f"{reference:.4f}",
                    f"{loss[-1]['loss']:.4f}" if loss else "–",
                ]
            )
    return rows


EARLY_HEADER = [
    "extractor",
    "step",
    "training tokens",
    "reference loss (mean over seeds)",
    "seeds (sd)",
    "window SE",
]


def early_signal_rows(data: dict[str, Any]) -> list[list[Any]]:
    """Per arm and checkpoint: the reference loss, mean over seeds, its spread and its SE over windows."""
    rows = []
    for e in data["extractors"]:
        for p in e.get("curve") or []:
            if p.get("reference_loss") is None:
                continue
            sd = p.get("reference_loss_seed_sd")
            se = p.get("reference_loss_stderr")
            rows.append([e["name"], p["step"], p["tokens"], f"{p['reference_loss']:.4f}",
                         f"{p.get('seeds', 1)} ({'–' if sd is None else f'{sd:.4f}'})",
                         "–" if se is None else f"{se:.4f}"])  # fmt: skip
    return rows


SETTINGS_HEADER = ["benchmark", "lm-eval task", "shots", "metric", "filter", "source of the setting"]


def settings_rows(data: dict[str, Any]) -> list[list[Any]]:
    return [
        [t["name"], t["task"], str(t["num_fewshot"]), t["metric"], t["filter"], t["source"]]
        for t in data.get("settings") or []
    ]
