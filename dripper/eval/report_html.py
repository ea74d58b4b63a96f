"""Rendering the ablation report (:mod:`dripper.eval.report`'s data): one self-contained HTML page and a Markdown
summary.

The page opens with what was run and a summary in the shape of the paper's Table 5 (per-category and
average scores per extractor, each with its standard error, beside corpus documents and tokens), then the
pairwise comparisons against noise, scores over training tokens, per-benchmark scores, corpus statistics,
extraction quality and the training loss. Tables are laid out to fit a 1,280 px window (benchmarks as
rows, extractors as columns; long names wrap), the tokenizer is named once, above the tables.

Each figure is embedded as a PNG with the plotted numbers beside it as JSON
(``<script type="application/json" class="figure-data" data-figure="...">``), and the whole collected data
as ``<script id="report-data">``, so tests and readers can check a figure against the run's outputs.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from collections.abc import Sequence
from typing import Any

from dripper.eval.noise import NOISE_RULE
from dripper.eval.report_controls import controls_html, controls_markdown
from dripper.eval.report_runs import (
    BUDGET_HEADER,
    EARLY_HEADER,
    EARLY_NOTE,
    SEED_HEADER,
    SETTINGS_HEADER,
    budget_rows,
    early_signal_rows,
    seed_rows,
    settings_rows,
)

# -- numbers -----------------------------------------------------------------------------------------------


def percent(value: float | None, stderr: float | None = None) -> str:
    """``"32.10 ± 1.20"`` (scores in [0, 1] shown in percent); ``–`` when missing."""
    if value is None:
        return "–"
    text = f"{100 * value:.2f}"
    return text + (f" ± {100 * stderr:.2f}" if stderr is not None else "")


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return html.escape(str(value))


def _category_labels(data: dict[str, Any]) -> dict[str, str]:
    """Category labels of the suite the scores came from, when its file is at hand."""
    from dripper.eval.lm_suite import load_suite

    suite = next((e["scores"].get("suite") for e in data["extractors"] if e["scores"]), None)
    try:
        return load_suite(suite).categories if suite else {}
    except (FileNotFoundError, ValueError):
        return {}


def tokenizer_name(data: dict[str, Any]) -> str | None:
    """The tokenizer the token counts are in (the run's, else the first tokens summary's)."""
    named = data.get("run", {}).get("tokenizer")
    if named:
        return str(named)
    for e in data["extractors"]:
        if e.get("tokens") and e["tokens"].get("tokenizer"):
            return str(e["tokens"]["tokenizer"])
    return None


def summary_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The Table-5-shaped summary: per extractor, each category's and the average score ± standard error
    (percent), then the corpus's documents and tokens."""
    labels = _category_labels(data)
    categories: list[str] = []
    for e in data["extractors"]:
        for category in (e["scores"] or {}).get("categories") or {}:
            if category not in categories:
                categories.append(category)
    header = [
        "extractor", *(labels.get(c, c) for c in categories), "average", "seeds (sd of average)", "documents",
        "tokens",
    ]  # fmt: skip
    rows = []
    for e in data["extractors"]:
        scores = e["scores"] or {}
        cells = [
            percent(scores.get("categories", {}).get(c), (scores.get("categories_stderr") or {}).get(c))
            for c in categories
        ]
        tokens = (e.get("tokens") or {}).get("tokens")
        documents = (e.get("tokens") or {}).get("documents")
        if documents is None:
            documents = (e["corpus"] or {}).get("documents_out")
        rows.append(
            [
                e["name"],
                *cells,
                percent(scores.get("mean"), scores.get("mean_stderr")),
                seed_cell(scores, "mean_seed_sd"),
                _fmt(documents),
                _fmt(tokens),
            ]
        )
    return header, rows


def seed_cell(scores: dict[str, Any], key: str, scale: float = 100.0, digits: int = 2) -> str:
    """``"2 (sd 1.20)"``: the seeds an arm's figure is the mean of, and their spread (``–`` without scores)."""
    if not scores:
        return "–"
    n = int(scores.get("seeds") or 1)
    sd = scores.get(key)
    return f"{n} (sd {scale * sd:.{digits}f})" if sd is not None else f"{n} (no sd)"


def benchmark_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per benchmark (rows, in suite order), each extractor's final score ± standard error (columns)."""
    scored = [e for e in data["extractors"] if e["scores"]]
    if not scored:
        return [], []
    labels = _category_labels(data)
    first = scored[0]["scores"]
    header = ["benchmark", "category", *(e["name"] for e in scored)]
    rows = []
    for task, row in first["tasks"].items():
        cells = []
        for e in scored:
            other = e["scores"]["tasks"].get(task) or {}
            cells.append(percent(other.get("score"), other.get("stderr")))
        rows.append([task, labels.get(row["category"], row["category"]), *cells])
    return header, rows


COMPARISON_HEADER = [
    "pair", "score", "difference", "item SE", "seed SE", "noise", "|difference| / noise", "verdict", "reading",
]  # fmt: skip


def comparison_rows(data: dict[str, Any]) -> list[list[str]]:
    """Per pair and score, the difference, its item and seed noise, their combination, ratio and reading
    (benchmark scores in points, the reference loss in nats per token)."""
    labels = _category_labels(data)
    rows = []
    for pair in data["comparisons"]:
        metrics = [("average", pair["mean"], 100.0)] + [
            (labels.get(c, c), result, 100.0) for c, result in pair["categories"].items()
        ]
        if pair.get("reference_loss"):
            metrics.append(("reference loss (early signal)", pair["reference_loss"], 1.0))
        for metric, result, scale in metrics:
            digits = 2 if scale == 100.0 else 4

            def number(value: float | None, sign: str = "") -> str:
                return "–" if value is None else f"{scale * value:{sign}.{digits}f}"  # noqa: B023

            rows.append(
                [
                    f"{pair['a']} − {pair['b']}",
                    metric,
                    number(result["difference"], "+"),
                    number(result.get("item_stderr")),
                    number(result.get("seed_stderr")),
                    number(result["combined_stderr"]),
                    "–" if result["ratio"] is None else f"{result['ratio']:.2f}",
                    result["verdict"],
                    result.get("reading", ""),
                ]
            )
    return rows


# -- figures -----------------------------------------------------------------------------------------------


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _legend(ax) -> None:
    """One row of entries above the plot, outside the axes: it never covers a bar or a point."""
    count = len(ax.get_legend_handles_labels()[1])
    ax.legend(
        fontsize="small",
        ncols=min(count, 4),
        loc="lower left",
        bbox_to_anchor=(0.0, 1.01),
        frameon=False,
        borderaxespad=0.0,
    )


def figures(data: dict[str, Any]) -> list[dict[str, Any]]:
    """``[{"id", "title", "png" (base64), "data" (the plotted numbers)}]`` for the sections with data.

    Each figure is one plot at most 7.5 × 3.6 inches in a constrained layout, so no title or tick label
    overlaps another and every image fits the page's column.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def new(width: float = 7.5, height: float = 3.6):
        return plt.subplots(figsize=(width, height), layout="constrained")

    out = []
    with_curve = [e for e in data["extractors"] if e.get("curve")]
    if with_curve:
        fig, ax = new()
        plotted = {}
        for e in with_curve:
            points = e["curve"]
            x = [p["tokens"] if p["tokens"] is not None else p["step"] for p in points]
            y = [100 * p["mean"] for p in points]
            err = [100 * (p["mean_stderr"] or 0.0) for p in points]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=e["name"])
            plotted[e["name"]] = {
                "step": [p["step"] for p in points],
                "tokens": [p["tokens"] for p in points],
                "mean": y,
                "mean_stderr": [
                    100 * p["mean_stderr"] if p["mean_stderr"] is not None else None for p in points
                ],
            }
        ax.set_xlabel("training tokens")
        ax.set_ylabel("mean score (%) ± 1 SE")
        _legend(ax)
        out.append(
            {"id": "curve", "title": "Mean benchmark score over training", "png": _png(fig), "data": plotted}
        )

    with_scores = [e for e in data["extractors"] if e["scores"]]
    if with_scores:
        tasks = list(with_scores[0]["scores"]["tasks"])
        fig, ax = new(7.5, 3.6)
        width = 0.8 / len(with_scores)
        plotted = {}
        for i, e in enumerate(with_scores):
            rows = [e["scores"]["tasks"].get(t) or {} for t in tasks]
            values = [100 * r["score"] if r.get("score") is not None else None for r in rows]
            errors = [100 * (r.get("stderr") or 0.0) for r in rows]
            ax.bar(
                [x + i * width for x in range(len(tasks))],
                [math.nan if v is None else v for v in values],
                width=width,
                yerr=errors,
                capsize=2,
                label=e["name"],
            )
            plotted[e["name"]] = dict(zip(tasks, values, strict=True))
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(tasks))], tasks, rotation=35, ha="right")
        ax.set_ylabel("score (%) ± 1 SE")
        _legend(ax)
        out.append({"id": "scores", "title": "Final benchmark scores", "png": _png(fig), "data": plotted})

    with_corpus = [e for e in data["extractors"] if e["corpus"]]
    if with_corpus:
        fig, ax = new()
        plotted = {}
        for e in with_corpus:
            steps = [row["step"] for row in e["corpus"]["steps"]]
            docs = [row["docs_out"] for row in e["corpus"]["steps"]]
            tokens = [row["tokens_out"] for row in e["corpus"]["steps"]]
            ax.plot(steps, docs, marker="o", label=e["name"])
            plotted[e["name"]] = {"steps": steps, "docs_out": docs, "tokens_out": tokens}
        ax.set_ylabel("documents after the step")
        plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
        _legend(ax)
        out.append({"id": "corpus", "title": "Corpus through refinement", "png": _png(fig), "data": plotted})

    rows = data["extraction_rows"]
    if rows:
        labels = list(rows)
        values = [rows[r].get("rouge5_f1") for r in labels]
        fig, ax = new()
        highlight = {e["extraction_row"] for e in data["extractors"]}
        ax.bar(
            range(len(labels)),
            [math.nan if v is None else v for v in values],
            color=["tab:blue" if r in highlight else "tab:gray" for r in labels],
        )
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize="small")
        ax.set_ylabel("ROUGE-5 F1")
        ax.set_ylim(0, 1)
        out.append(
            {
                "id": "extraction",
                "title": "Extraction quality",
                "png": _png(fig),
                "data": dict(zip(labels, values, strict=True)),
            }
        )

    with_reference = [
        e
        for e in data["extractors"]
        if any(p.get("reference_loss") is not None for p in e.get("curve") or [])
    ]
    if with_reference:
        fig, ax = new()
        plotted = {}
        for e in with_reference:
            points = [p for p in e["curve"] if p.get("reference_loss") is not None]
            x = [p["tokens"] if p["tokens"] is not None else p["step"] for p in points]
            y = [p["reference_loss"] for p in points]
            err = [p.get("reference_loss_seed_sd") or 0.0 for p in points]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=e["name"])
            plotted[e["name"]] = {
                "step": [p["step"] for p in points],
                "tokens": [p["tokens"] for p in points],
                "reference_loss": y,
                "seed_sd": [p.get("reference_loss_seed_sd") for p in points],
                "seeds": [p.get("seeds", 1) for p in points],
            }
        ax.set_xlabel("training tokens")
        ax.set_ylabel("loss on the reference text ± sd over seeds")
        _legend(ax)
        out.append(
            {
                "id": "reference",
                "title": "Early signal: loss on held-out reference text",
                "png": _png(fig),
                "data": plotted,
            }  # fmt: skip
        )

    with_loss = [e for e in data["extractors"] if e["loss"]]
    if with_loss:
        fig, ax = new()
        plotted = {}
        for e in with_loss:
            tokens = [r.get("tokens", r["step"]) for r in e["loss"]]
            losses = [r["loss"] for r in e["loss"]]
            ax.plot(tokens, losses, label=e["name"])
            plotted[e["name"]] = {"step": [r["step"] for r in e["loss"]], "tokens": tokens, "loss": losses}
            for run in (e.get("runs") or [])[1:]:  # the other seeds, thin, unlabelled
                if run.get("loss"):
                    ax.plot([r.get("tokens", r["step"]) for r in run["loss"]], [r["loss"] for r in run["loss"]],
                            color=ax.lines[-1].get_color(), alpha=0.4, linewidth=0.8)  # fmt: skip
        ax.set_xlabel("training tokens")
        ax.set_ylabel("loss")
        _legend(ax)
        out.append({"id": "loss", "title": "Training loss", "png": _png(fig), "data": plotted})
    return out


# -- HTML --------------------------------------------------------------------------------------------------

STYLE = (
    "body{font-family:sans-serif;max-width:1180px;margin:1.5em auto;padding:0 1em;color:#222;line-height:1.4}"
    "table{border-collapse:collapse;margin:.5em 0;max-width:100%}"
    # Cells may break anywhere (a long path must not widen its table); headers only between words.
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;vertical-align:top}"
    "td{overflow-wrap:anywhere}th{background:#f4f4f4;overflow-wrap:normal}"
    "td:first-child,th:first-child,td.text{text-align:left}"
    "img{max-width:100%;height:auto;display:block}figure{margin:1em 0}figcaption{color:#555}"
    ".missing{color:#a00}code{overflow-wrap:anywhere}"
    ".note{color:#555;font-size:.92em;max-width:60em}"
    "dl.run{display:grid;grid-template-columns:14em minmax(0,1fr);gap:2px 1em}"
    "dl.run dt{font-weight:bold}dl.run dd{margin:0;overflow-wrap:anywhere}"
)

_NUMBER = re.compile(r"^[-+−]?[\d,.]+%?( ± [\d.]+)?$|^–$|^inf$")


def _cell(value: Any) -> str:
    text = _fmt(value)
    numeric = isinstance(value, int | float) or _NUMBER.match(text)
    return f"<td>{text}</td>" if numeric else f'<td class="text">{text}</td>'


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], css: str = "") -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _missing(what: str) -> str:
    return f"<p class='missing'>{html.escape(what)}</p>"


def _spec_text(e: dict[str, Any]) -> str:
    spec = e.get("spec") or {}
    if not spec:
        return e.get("labeler") or e["name"]
    options = ", ".join(f"{k}={v}" for k, v in (spec.get("options") or {}).items())
    text = spec.get("labeler", "") + (f" ({options})" if options else "")
    text += f"; fallback {spec.get('fallback') or 'none'}" + (
        ", also on empty" if spec.get("fallback_on_empty") else ""
    )
    return text + (f"; {_FORMATS[e['text_format']]}" if e.get("text_format") in _FORMATS else "")


_FORMATS = {"markdown": "Markdown documents", "text": "plain-text documents"}


def _run_section(data: dict[str, Any]) -> str:
    run = dict(data.get("run") or {})
    items = []
    labels = {
        "crawl": "Crawl",
        "warc_files": "WARC files",
        "model": "Model",
        "train_tokens": "Training tokens (budget)",
        "train_steps": "Training steps",
        "seeds": "Seeds",
        "max_epochs": "Epochs before a flag",
        "equalize_corpora": "Corpora cut to the smallest",
        "eval_every": "Evaluated every",
        "suite": "Benchmark suite",
        "tokenizer": "Tokenizer",
    }
    for key, label in labels.items():
        if run.get(key) not in (None, ""):
            value = run.pop(key)
            value = f"{value} steps" if key == "eval_every" else value
            items.append((label, value))
    for key, value in run.items():
        items.append((key.replace("_", " "), value))
    trained = {e["name"]: e["loss"][-1].get("tokens") for e in data["extractors"] if e["loss"]}
    if trained:
        shown = {name: f"{n:,}" if isinstance(n, int) else "–" for name, n in trained.items()}
        items.append(
            (
                "Training tokens per model",
                next(iter(shown.values()))
                if len(set(shown.values())) == 1
                else "; ".join(f"{name}: {n}" for name, n in shown.items()),
            )
        )
    items.append(("Extractors", "; ".join(f"{e['name']}: {_spec_text(e)}" for e in data["extractors"])))
    formats = {e.get("text_format") for e in data["extractors"]} - {None}
    if len(formats) > 1:
        items.append(
            (
                "Document text",
                "the arms trained on different formats (Markdown and plain text): their differences mix the "
                "extractor with the format; give the Markdown arms output=text to compare extractors alone",
            )
        )
    body = "".join(f"<dt>{html.escape(str(k))}</dt><dd>{_fmt(v)}</dd>" for k, v in items)
    missing = [
        *data.get("missing_inputs", []),
        *(p for e in data["extractors"] for p in e.get("missing_inputs", [])),
    ]
    notes = (
        "<p class='missing'>Inputs named in the manifest but not found (their sections say what is "
        "missing):</p><ul class='missing-inputs'>"
        + "".join(f"<li><code>{html.escape(p)}</code></li>" for p in missing)
        + "</ul>"
        if missing
        else ""
    )
    return f'<section id="run"><h2>What was run</h2><dl class="run">{body}</dl>{notes}</section>'


def render_html(data: dict[str, Any], figs: list[dict[str, Any]]) -> str:
    """The self-contained HTML page (inline CSS, PNGs as data URIs, plotted numbers as JSON)."""
    by_id = {f["id"]: f for f in figs}

    def figure(fig_id: str) -> str:
        fig = by_id.get(fig_id)
        if not fig:
            return ""
        payload = json.dumps(fig["data"]).replace("</", "<\\/")
        return (
            f'<figure id="fig-{fig_id}"><img alt="{html.escape(fig["title"])}" '
            f'src="data:image/png;base64,{fig["png"]}"><figcaption>{html.escape(fig["title"])}</figcaption>'
            f'</figure><script type="application/json" class="figure-data" data-figure="{fig_id}">{payload}</script>'
        )

    tokenizer = tokenizer_name(data)
    token_note = (
        f"<p class='note'>Tokens are counted with the tokenizer <code>{html.escape(tokenizer)}</code> "
        "(the Megatron token files the models train on).</p>"
        if tokenizer
        else ""
    )
    sections = [f"<h1>{html.escape(data['title'])}</h1>", _run_section(data)]

    header, rows = summary_rows(data)
    sections.append(
        '<section id="summary"><h2>Summary: benchmark scores (%) and corpus size</h2>' + token_note
    )
    sections.append(_table(header, rows, "summary"))
    if not any(e["scores"] for e in data["extractors"]):
        sections.append(_missing("no benchmark scores given"))
    sections.append(
        "<p class='note'>Same WARC files for every extractor; their corpora differ in size and every model "
        "trains on the same token budget, so a smaller corpus is repeated more often (epochs below). Each "
        "score is the mean over the arm's seeds ± its item SE; the seed column gives their spread.</p></section>"
    )

    sections.append('<section id="comparisons"><h2>Differences against noise</h2>')
    sections.append(f"<p class='note'>{html.escape(NOISE_RULE)}</p>")
    compared = comparison_rows(data)
    sections.append(
        _table(COMPARISON_HEADER, compared, "comparisons")
        if compared
        else _missing("fewer than two extractors with scores")
    )
    sections.append(
        "<p class='note'>Benchmark differences in points; the reference loss in nats per token (lower is "
        "better).</p></section>"
    )

    sections.append('<section id="budget"><h2>Token budget and epochs</h2>' + token_note)
    sections.append(_table(BUDGET_HEADER, budget_rows(data), "budget"))
    equalized = any((e.get("budget") or {}).get("cut") for e in data["extractors"])
    sections.append(
        "<p class='note'>Epochs = training tokens / unique tokens trained on; an arm is flagged above "
        f"{html.escape(str(next((e['budget']['max_epochs'] for e in data['extractors'] if e.get('budget')), '–')))} "
        "epochs (max_epochs). "
        + ("Corpora were cut to the smallest arm's tokens (equalize_corpora): a seeded random subset of "
           "documents, the same for every seed." if equalized else "Corpora were not cut (equalize_corpora off).")
        + "</p></section>"
    )  # fmt: skip

    sections.append('<section id="seeds"><h2>Runs per seed</h2>')
    runs = seed_rows(data)
    sections.append(_table(SEED_HEADER, runs, "seeds") if runs else _missing("no training runs given"))
    sections.append("</section>")

    sections.append('<section id="early-signal"><h2>Early signal: loss on a held-out reference text</h2>')
    sections.append(f"<p class='note'>{html.escape(EARLY_NOTE)}</p>")
    early = early_signal_rows(data)
    sections.append(
        _table(EARLY_HEADER, early, "early-signal") if early else _missing("no reference loss in the scores")
    )
    sections.append(figure("reference") + "</section>")

    sections.append('<section id="training-scores"><h2>Scores over training</h2>')
    curve_rows = [
        [e["name"], p["step"], p["tokens"], percent(p["mean"], p["mean_stderr"])]
        for e in data["extractors"]
        for p in e.get("curve") or []
    ]
    sections.append(
        _table(["extractor", "step", "training tokens", "mean score (%)"], curve_rows, "curve")
        if curve_rows
        else _missing("no checkpoint scores given")
    )
    sections.append(figure("curve") + "</section>")

    sections.append('<section id="scores"><h2>Final scores per benchmark (%)</h2>')
    header, rows = benchmark_rows(data)
    sections.append(_table(header, rows, "scores") if rows else _missing("no benchmark scores given"))
    sections.append(figure("scores") + "</section>")

    sections.append('<section id="settings"><h2>Benchmark settings and their sources</h2>')
    settings = settings_rows(data)
    sections.append(
        _table(SETTINGS_HEADER, settings, "settings")
        if settings
        else _missing("the suite file is not at hand")
    )
    sections.append("</section>")

    sections.append('<section id="corpus"><h2>Corpus statistics</h2>' + token_note)
    for e in data["extractors"]:
        corpus = e["corpus"]
        sections.append(f"<h3>{html.escape(e['name'])}</h3>")
        if not corpus:
            sections.append(_missing("no refinement summary for this extractor"))
            continue
        sections.append(
            _table(
                ["step", "documents in", "documents out", "tokens in", "tokens out"],
                [
                    [r["step"], r["docs_in"], r["docs_out"], r["tokens_in"], r["tokens_out"]]
                    for r in corpus["steps"]
                ],
                "corpus-steps",
            )
        )
        rate = "–" if corpus["dedup_rate"] is None else f"{100 * corpus['dedup_rate']:.2f}%"
        sections.append(f'<p>Dedup rate: <b class="dedup-rate">{rate}</b></p>')
        drops = [
            [step, reason, n]
            for step, reasons in corpus["drop_reasons"].items()
            for reason, n in reasons.items()
        ]
        if drops:
            sections.append(f"<p>Drop reasons (scope: {html.escape(corpus['drop_reasons_scope'])}):</p>")
            sections.append(_table(["step", "reason", "documents"], drops, "drop-reasons"))
    sections.append(controls_html(data))  # baseline arms' settings, decontamination per benchmark
    sections.append(figure("corpus") + "</section>")

    sections.append('<section id="extraction"><h2>Extraction quality (labelled pages)</h2>')
    if data["extraction_rows"]:
        columns = {
            "pages": "pages",
            "rouge5_f1": "ROUGE-5 F1",
            "rouge5_f1_norm": "ROUGE-5 F1 (normalised)",
            "snippet_precision": "snippet precision",
            "snippet_recall": "snippet recall",
            "snippet_f1": "snippet F1",
            "errors": "errors",
        }
        ablation = {}
        for e in data["extractors"]:
            ablation.setdefault(e["extraction_row"], []).append(e["name"])
        rows = [
            [row, ", ".join(ablation.get(row, [])) or "–", *(stats.get(c) for c in columns)]
            for row, stats in data["extraction_rows"].items()
        ]
        sections.append(
            _table(["benchmark row", "ablation extractor", *columns.values()], rows, "extraction")
        )
        for e in data["extractors"]:
            if e["extraction_row"] not in data["extraction_rows"]:
                sections.append(
                    _missing(
                        f"{e['name']}: no row {e['extraction_row']!r} in the extraction benchmark summary"
                    )
                )
    else:
        sections.append(_missing("no extraction benchmark summary given"))
    sections.append(figure("extraction") + "</section>")

    sections.append('<section id="lm-cost"><h2>What each extractor asked of the LM</h2>')
    sections.append(f"<p>{html.escape(LM_COST_NOTE)}</p>")
    sections.append(_table(LM_COST_HEADER, lm_cost_rows(data), "lm-cost"))
    sections.append("</section>")

    sections.append('<section id="training"><h2>Training loss</h2>')
    loss_rows = [
        [
            e["name"],
            e["loss"][-1]["step"],
            e["loss"][-1].get("tokens"),
            e["loss"][0]["loss"],
            e["loss"][-1]["loss"],
        ]
        for e in data["extractors"]
        if e["loss"]
    ]
    sections.append(
        _table(["extractor", "steps", "tokens", "first loss", "final loss"], loss_rows, "training")
        if loss_rows
        else _missing("no training log given")
    )
    sections.append(figure("loss") + "</section>")
    payload = json.dumps(data, default=str).replace("</", "<\\/")
    sections.append(f'<script type="application/json" id="report-data">{payload}</script>')
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{html.escape(data['title'])}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(sections)}</body></html>\n"
    )


# -- Markdown ----------------------------------------------------------------------------------------------


def _markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines + [""]


LM_COST_HEADER = [
    "extractor",
    "LM",
    "pages to the LM",
    "prompt tokens to the LM",
    "GPU-hours per million pages",
    "at LM pages/s",
    "this run's LM pages/s",
]
LM_COST_NOTE = (
    "Shares of the extracted pages and of their (estimated) prompt tokens labelled by an LM: a cascade "
    "sends only its least sure pages. GPU-hours per million pages = token share x 10^6 / (pages/s x 3600), "
    "at one GPU's LM pages/s on the average page (the report's lm_pages_per_second); the last column is "
    "the rate of this run's own LM step on the pages it took, on whatever hardware ran it."
)


def lm_cost_rows(data: dict[str, Any]) -> list[list[Any]]:
    """One row per extractor of the LM-cost table (``–`` where the run summary says nothing)."""

    def share(value: float | None) -> str:
        return "–" if value is None else f"{100 * value:.1f}%"

    rows = []
    for e in data["extractors"]:
        cost = e.get("lm_cost") or {}
        hours = cost.get("gpu_hours_per_million_pages")
        measured = cost.get("measured_pages_per_second")
        rows.append(
            [
                e["name"],
                cost.get("lm") or "none",
                share(cost.get("page_share")),
                share(cost.get("token_share")),
                "–" if hours is None else f"{hours:,.1f}",
                cost.get("pages_per_second", "–"),
                "–" if measured is None else f"{measured:.2f}",
            ]
        )
    return rows


def render_markdown(data: dict[str, Any]) -> str:
    """A Markdown summary: the Table-5-shaped scores with standard errors and corpus size, the pairwise
    comparisons, then per-benchmark scores and corpus and extraction figures per extractor."""
    lines = [f"# {data['title']}", ""]
    tokenizer = tokenizer_name(data)
    header, rows = summary_rows(data)
    lines += ["## Summary: benchmark scores (%) and corpus size", ""]
    if tokenizer:
        lines += [f"Tokens counted with the tokenizer `{tokenizer}`.", ""]
    lines += _markdown_table(header, rows)
    compared = comparison_rows(data)
    if compared:
        lines += ["## Differences against noise", "", NOISE_RULE, ""]
        lines += _markdown_table([h.replace("|", "\\|") for h in COMPARISON_HEADER], compared)
    lines += ["## Token budget and epochs", ""] + _markdown_table(BUDGET_HEADER, budget_rows(data))
    runs = seed_rows(data)
    if runs:
        lines += ["## Runs per seed", ""] + _markdown_table(SEED_HEADER, runs)
    early = early_signal_rows(data)
    if early:
        lines += ["## Early signal: loss on a held-out reference text", "", EARLY_NOTE, ""]
        lines += _markdown_table(EARLY_HEADER, early)
    settings = settings_rows(data)
    if settings:
        lines += ["## Benchmark settings and their sources", ""] + _markdown_table(SETTINGS_HEADER, settings)
    curve = [
        [e["name"], p["step"], _fmt(p["tokens"]), percent(p["mean"], p["mean_stderr"])]
        for e in data["extractors"]
        for p in e.get("curve") or []
    ]
    if curve:
        lines += ["## Scores over training", ""]
        lines += _markdown_table(["extractor", "step", "training tokens", "mean score (%)"], curve)
    header, rows = benchmark_rows(data)
    if rows:
        lines += ["## Final scores per benchmark (%)", ""] + _markdown_table(header, rows)
    lines += ["## Corpus and extraction", ""]
    table = []
    for e in data["extractors"]:
        corpus, quality, loss = e["corpus"] or {}, e["extraction"] or {}, e["loss"] or []
        rate = corpus.get("dedup_rate")
        table.append(
            [
                e["name"],
                e.get("text_format") or "–",
                corpus.get("documents_in", "–"),
                corpus.get("documents_out", "–"),
                corpus.get("tokens_out", "–"),
                "–" if rate is None else f"{100 * rate:.2f}%",
                "–" if quality.get("rouge5_f1") is None else f"{quality['rouge5_f1']:.4f}",
                f"{loss[-1]['loss']:.4f}" if loss else "–",
            ]
        )
    lines += _markdown_table(
        ["extractor", "text", "docs in", "docs out", "tokens out", "dedup rate", "ROUGE-5 F1", "final loss"],
        table,
    )
    lines += controls_markdown(data)
    lines += ["## What each extractor asked of the LM", "", LM_COST_NOTE, ""]
    lines += _markdown_table(LM_COST_HEADER, lm_cost_rows(data))
    return "\n".join(lines)
