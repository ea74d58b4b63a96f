"""The extractor ablation report: one self-contained HTML file with plots, and a Markdown summary table.

For each extractor of an ablation it shows corpus statistics (documents and tokens after each refinement
step, drop reasons, dedup rate), extraction quality on a labelled set, the training loss curve and the
benchmark scores per task and category (the paper's Table 5 shape)::

    python -m eval.report --manifest ablation.yaml --html report.html --markdown report.md

The manifest (YAML or JSON; paths relative to it)::

    title: Dripper vs Trafilatura, CC-MAIN-2025-13 sample
    extraction: runs/extraction.json          # `python -m eval.extraction --out` summary (labelled set)
    extractors:
      - name: dripper                         # label in the report
        refine_summary: runs/dripper/refined/refine/_summary.json   # this extractor's own refinement run
        extraction_row: "dripper:cpu"         # its row in the extraction summary (default: refine_extractor)
        train_run: runs/dripper/train         # run folder with train_log.jsonl (or the file itself)
        scores: runs/dripper/scores.json      # `python -m eval.lm_suite --out` summary
      - name: trafilatura
        ...
    # Or one refinement run over several extractors, split by the rows' extractor name:
    #   refine_summaries: [runs/refine/refine/_summary.json]   (top level)
    #   refine_extractor: "dripper:cpu"                         (per extractor; default: name)

Every section is optional per extractor: what is missing is reported as missing, not invented.

Refinement summary (``refine/_summary.json`` of ``dripper_core.refine``): the report reads ``steps``, a list
in pipeline order of ``{"step", "docs_in", "docs_out", "tokens_in", "tokens_out", "dropped": {reason: n},
"by_extractor": {extractor: {"docs_in", "docs_out", "tokens_in", "tokens_out"}}}``, and ``token_unit``.
An extractor with a ``refine_summary`` of its own gets that run's totals; otherwise its rows come from the
shared runs' ``by_extractor``, where drop reasons (per step and per run) are attributed to it only when the
run holds no other extractor. The dedup rate is the share of the
documents entering the first dedup step (:data:`DEDUP_STEPS`) that the dedup steps removed.

The HTML embeds each figure as a PNG and, beside it, the plotted numbers as JSON
(``<script type="application/json" class="figure-data" data-figure="...">``), so tests and readers can
check a figure against the run's outputs.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEDUP_STEPS = ("url_dedup", "exact_dedup", "minhash", "dedup", "near_dedup")


@dataclass(slots=True)
class ExtractorInputs:
    name: str
    refine_extractor: str | None = None
    refine_summary: Path | None = None
    extraction_row: str | None = None
    train_run: Path | None = None
    scores: Path | None = None


@dataclass(slots=True)
class ReportInputs:
    extractors: list[ExtractorInputs]
    title: str = "Extractor ablation"
    refine_summaries: list[Path] = field(default_factory=list)
    extraction: Path | None = None


def load_manifest(path: Path | str) -> ReportInputs:
    """Read an ablation manifest (YAML or JSON); relative paths are taken from the manifest's folder."""
    import yaml

    path = Path(path)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    base = path.parent

    def resolve(value: str | None) -> Path | None:
        return None if value is None else (base / value).resolve()

    extractors = []
    for entry in data.get("extractors") or []:
        if "name" not in entry:
            raise ValueError(f"{path}: every extractor needs a name")
        extractors.append(
            ExtractorInputs(
                name=entry["name"],
                refine_extractor=entry.get("refine_extractor"),
                refine_summary=resolve(entry.get("refine_summary")),
                extraction_row=entry.get("extraction_row"),
                train_run=resolve(entry.get("train_run")),
                scores=resolve(entry.get("scores")),
            )
        )
    if not extractors:
        raise ValueError(f"{path}: no extractors listed")
    return ReportInputs(
        extractors=extractors,
        title=data.get("title", "Extractor ablation"),
        refine_summaries=[resolve(p) for p in data.get("refine_summaries") or []],
        extraction=resolve(data.get("extraction")),
    )


# ----------------------------------------------------------------------------------------------- collecting


COUNT_KEYS = ("docs_in", "docs_out", "tokens_in", "tokens_out")


def run_corpus_stats(summary: dict[str, Any], extractor: str | None = None) -> dict[str, Any] | None:
    """Per-step documents/tokens, drop reasons and dedup rate from one refinement summary.

    With ``extractor``, that extractor's rows of a run shared by several (``by_extractor``); without, the
    whole run (an ablation refines each extractor's pages in a run of its own, where fallback pages may
    carry another extractor name: they belong to the corpus all the same). ``None`` when the extractor has
    no rows in the run.
    """
    steps = summary.get("steps") or []
    if extractor is None:
        rows = [(step, step) for step in steps]
        exclusive = True
    else:
        rows = [(step, step.get("by_extractor", {}).get(extractor)) for step in steps]
        if not any(counts for _, counts in rows):
            return None
        exclusive = {name for step in steps for name in step.get("by_extractor", {})} == {extractor}
    table = [
        {"step": step["step"], **{k: int((counts or {}).get(k, 0)) for k in COUNT_KEYS}}
        for step, counts in rows
    ]
    if not table:
        return None
    dedup = [row for row in table if row["step"] in DEDUP_STEPS]
    dedup_rate = None
    if dedup and dedup[0]["docs_in"]:
        dedup_rate = sum(row["docs_in"] - row["docs_out"] for row in dedup) / dedup[0]["docs_in"]
    kept = [row for row in table if row["step"] != "tokenize"] or table
    return {
        "steps": table,
        "documents_in": table[0]["docs_in"],
        "documents_out": kept[-1]["docs_out"],
        "tokens_in": table[0]["tokens_in"],
        "tokens_out": kept[-1]["tokens_out"],
        "dedup_rate": dedup_rate,
        "drop_reasons": {step["step"]: dict(step["dropped"]) for step in steps if step.get("dropped")},
        "drop_reasons_scope": "extractor" if exclusive else "run (all extractors)",
        "token_unit": summary.get("token_unit") or "tokens",
    }


def corpus_stats(summaries: Sequence[dict[str, Any]], extractor: str) -> dict[str, Any] | None:
    """``extractor``'s statistics from the first of several shared refinement summaries that has it."""
    for summary in summaries:
        stats = run_corpus_stats(summary, extractor)
        if stats is not None:
            return stats
    return None


def extraction_quality(summary: dict[str, Any] | None, row: str) -> dict[str, Any] | None:
    """The overall figures of one row of an ``eval.extraction`` summary."""
    if not summary:
        return None
    data = summary.get("rows", {}).get(row)
    return dict(data["all"]) if data else None


def training_curve(run: Path | None) -> list[dict[str, Any]] | None:
    if run is None:
        return None
    path = run / "train_log.jsonl" if run.is_dir() else run
    if not path.exists():
        return None
    records: dict[int, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            records[int(record["step"])] = (
                record  # a resumed run re-logs steps past its checkpoint: keep the last
            )
    return [records[step] for step in sorted(records)]


def collect(inputs: ReportInputs) -> dict[str, Any]:
    """Everything the report shows, as plain data (also embedded in the HTML)."""
    summaries = [json.loads(Path(p).read_text(encoding="utf-8")) for p in inputs.refine_summaries]
    extraction = json.loads(inputs.extraction.read_text(encoding="utf-8")) if inputs.extraction else None
    extractors = []
    for item in inputs.extractors:
        refine_key = item.refine_extractor or item.name
        if item.refine_summary is not None:
            own = json.loads(Path(item.refine_summary).read_text(encoding="utf-8"))
            corpus = run_corpus_stats(own)
        else:
            corpus = corpus_stats(summaries, refine_key)
        curve = training_curve(item.train_run)
        scores = (
            json.loads(item.scores.read_text(encoding="utf-8"))
            if item.scores and item.scores.exists()
            else None
        )
        extractors.append(
            {
                "name": item.name,
                "refine_extractor": refine_key,
                "corpus": corpus,
                "extraction": extraction_quality(extraction, item.extraction_row or refine_key),
                "extraction_row": item.extraction_row or refine_key,
                "loss": curve,
                "scores": scores,
            }
        )
    all_rows = {row: data["all"] for row, data in (extraction or {}).get("rows", {}).items()}
    return {"title": inputs.title, "extractors": extractors, "extraction_rows": all_rows}


# ----------------------------------------------------------------------------------------------- figures


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def figures(data: dict[str, Any]) -> list[dict[str, Any]]:
    """``[{"id", "title", "png" (base64), "data" (the plotted numbers)}]`` for the sections with data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []

    with_corpus = [e for e in data["extractors"] if e["corpus"]]
    if with_corpus:
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
        plotted = {}
        for e in with_corpus:
            steps = [row["step"] for row in e["corpus"]["steps"]]
            docs = [row["docs_out"] for row in e["corpus"]["steps"]]
            tokens = [row["tokens_out"] for row in e["corpus"]["steps"]]
            axes[0].plot(steps, docs, marker="o", label=e["name"])
            axes[1].plot(steps, tokens, marker="o", label=e["name"])
            plotted[e["name"]] = {"steps": steps, "docs_out": docs, "tokens_out": tokens}
        axes[0].set_title("documents after each step")
        axes[1].set_title(f"{with_corpus[0]['corpus']['token_unit']} after each step")
        for ax in axes:
            ax.tick_params(axis="x", rotation=30)
            ax.legend()
        out.append({"id": "corpus", "title": "Corpus through refinement", "png": _png(fig), "data": plotted})

    rows = data["extraction_rows"]
    if rows:
        labels = list(rows)
        values = [rows[r].get("rouge5_f1") or 0.0 for r in labels]
        fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(labels) + 2), 3.5))
        highlight = {e["extraction_row"] for e in data["extractors"]}
        ax.bar(labels, values, color=["tab:blue" if r in highlight else "tab:gray" for r in labels])
        ax.set_ylabel("ROUGE-5 F1")
        ax.set_ylim(0, 1)
        ax.tick_params(axis="x", rotation=30)
        out.append(
            {
                "id": "extraction",
                "title": "Extraction quality",
                "png": _png(fig),
                "data": dict(zip(labels, values, strict=True)),
            }
        )

    with_loss = [e for e in data["extractors"] if e["loss"]]
    if with_loss:
        fig, ax = plt.subplots(figsize=(7, 3.8))
        plotted = {}
        for e in with_loss:
            tokens = [r.get("tokens", r["step"]) for r in e["loss"]]
            losses = [r["loss"] for r in e["loss"]]
            ax.plot(tokens, losses, label=e["name"])
            plotted[e["name"]] = {"step": [r["step"] for r in e["loss"]], "tokens": tokens, "loss": losses}
        ax.set_xlabel("training tokens")
        ax.set_ylabel("loss")
        ax.legend()
        out.append({"id": "loss", "title": "Training loss", "png": _png(fig), "data": plotted})

    with_scores = [e for e in data["extractors"] if e["scores"]]
    if with_scores:
        tasks = list(with_scores[0]["scores"]["tasks"])
        fig, ax = plt.subplots(figsize=(max(7, 0.8 * len(tasks) + 2), 3.8))
        width = 0.8 / len(with_scores)
        plotted = {}
        for i, e in enumerate(with_scores):
            values = [100 * e["scores"]["tasks"][t]["score"] for t in tasks]
            ax.bar([x + i * width for x in range(len(tasks))], values, width=width, label=e["name"])
            plotted[e["name"]] = dict(zip(tasks, values, strict=True))
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(tasks))], tasks, rotation=35, ha="right")
        ax.set_ylabel("score (%)")
        ax.legend()
        out.append({"id": "scores", "title": "Benchmark scores", "png": _png(fig), "data": plotted})
    return out


# ----------------------------------------------------------------------------------------------- rendering


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return html.escape(str(value))


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], css: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def scores_table_rows(data: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """Header and rows (percent) of the Table-5-shaped benchmark table."""
    with_scores = [e for e in data["extractors"] if e["scores"]]
    if not with_scores:
        return [], []
    first = with_scores[0]["scores"]
    categories = list(first["categories"])
    labels = _category_labels(first.get("suite"))
    tasks = [t for c in categories for t, row in first["tasks"].items() if row["category"] == c]
    header = ["extractor", *tasks, *(f"{labels.get(c, c)} avg" for c in categories), "average"]
    rows = []
    for e in with_scores:
        s = e["scores"]
        values = (
            [s["tasks"][t]["score"] for t in tasks] + [s["categories"][c] for c in categories] + [s["mean"]]
        )
        rows.append([e["name"], *(f"{100 * v:.2f}" for v in values)])
    return header, rows


def _category_labels(suite_name: str | None) -> dict[str, str]:
    """Category labels of the suite the scores came from, when its file is at hand."""
    from eval.lm_suite import load_suite

    try:
        return load_suite(suite_name).categories if suite_name else {}
    except (FileNotFoundError, ValueError):
        return {}


def render_html(data: dict[str, Any], figs: list[dict[str, Any]]) -> str:
    """The self-contained HTML page (inline CSS, PNGs as data URIs, plotted numbers as JSON)."""
    sections = [f"<h1>{html.escape(data['title'])}</h1>"]
    by_id = {f["id"]: f for f in figs}

    def figure(fig_id: str) -> str:
        fig = by_id.get(fig_id)
        if not fig:
            return ""
        payload = json.dumps(fig["data"]).replace("</", "<\\/")
        return (
            f'<figure id="fig-{fig_id}"><img alt="{html.escape(fig["title"])}" src="data:image/png;base64,{fig["png"]}">'
            f"<figcaption>{html.escape(fig['title'])}</figcaption></figure>"
            f'<script type="application/json" class="figure-data" data-figure="{fig_id}">{payload}</script>'
        )

    sections.append('<section id="corpus"><h2>Corpus statistics</h2>')
    for e in data["extractors"]:
        corpus = e["corpus"]
        sections.append(
            f"<h3>{html.escape(e['name'])} <small>({html.escape(e['refine_extractor'])})</small></h3>"
        )
        if not corpus:
            sections.append("<p class='missing'>no refinement summary for this extractor</p>")
            continue
        unit = corpus["token_unit"]
        sections.append(
            _table(
                ["step", "documents in", "documents out", f"{unit} in", f"{unit} out"],
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
    sections.append(figure("corpus") + "</section>")

    sections.append('<section id="extraction"><h2>Extraction quality (labelled set)</h2>')
    if data["extraction_rows"]:
        columns = [
            "pages",
            "rouge5_f1",
            "rouge5_f1_norm",
            "snippet_precision",
            "snippet_recall",
            "snippet_f1",
            "errors",
        ]
        rows = [[row, *(stats.get(c) for c in columns)] for row, stats in data["extraction_rows"].items()]
        sections.append(_table(["extractor", *columns], rows, "extraction"))
    else:
        sections.append("<p class='missing'>no extraction benchmark summary given</p>")
    sections.append(figure("extraction") + "</section>")

    sections.append('<section id="training"><h2>Training loss</h2>')
    loss_rows = []
    for e in data["extractors"]:
        if e["loss"]:
            last = e["loss"][-1]
            loss_rows.append(
                [e["name"], last["step"], last.get("tokens"), e["loss"][0]["loss"], last["loss"]]
            )
    if loss_rows:
        sections.append(
            _table(["extractor", "steps", "tokens", "first loss", "final loss"], loss_rows, "training")
        )
    else:
        sections.append("<p class='missing'>no training log given</p>")
    sections.append(figure("loss") + "</section>")

    sections.append('<section id="scores"><h2>Benchmark scores (%)</h2>')
    header, rows = scores_table_rows(data)
    sections.append(
        _table(header, rows, "scores") if rows else "<p class='missing'>no benchmark scores given</p>"
    )
    sections.append(figure("scores") + "</section>")
    payload = json.dumps(data, default=str).replace("</", "<\\/")
    sections.append(f'<script type="application/json" id="report-data">{payload}</script>')
    style = (
        "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}img{max-width:100%}.missing{color:#a00}"
    )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(data['title'])}</title>"
        f"<style>{style}</style></head><body>{''.join(sections)}</body></html>\n"
    )


def render_markdown(data: dict[str, Any]) -> str:
    """A Markdown summary: the Table-5-shaped scores table, then corpus and extraction figures per extractor."""
    lines = [f"# {data['title']}", ""]
    header, rows = scores_table_rows(data)
    if rows:
        lines += [
            "## Benchmark scores (%)",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" + "---:|" * (len(header) - 1),
        ]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        lines.append("")
    lines += [
        "## Corpus and extraction",
        "",
        "| extractor | docs in | docs out | tokens out | dedup rate | ROUGE-5 F1 | final loss |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for e in data["extractors"]:
        corpus, quality, loss = e["corpus"] or {}, e["extraction"] or {}, e["loss"] or []
        rate = corpus.get("dedup_rate")
        cells = [
            e["name"],
            corpus.get("documents_in", "–"),
            corpus.get("documents_out", "–"),
            corpus.get("tokens_out", "–"),
            "–" if rate is None else f"{100 * rate:.2f}%",
            "–" if quality.get("rouge5_f1") is None else f"{quality['rouge5_f1']:.4f}",
            f"{loss[-1]['loss']:.4f}" if loss else "–",
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(
    inputs: ReportInputs, html_path: Path | str, markdown_path: Path | str | None = None
) -> dict[str, Any]:
    """Collect, plot and write the HTML (and Markdown) report; returns the collected data."""
    data = collect(inputs)
    Path(html_path).parent.mkdir(parents=True, exist_ok=True)
    Path(html_path).write_text(render_html(data, figures(data)), encoding="utf-8")
    if markdown_path:
        Path(markdown_path).write_text(render_markdown(data), encoding="utf-8")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.report", description=__doc__.split("\n")[0])
    parser.add_argument("--manifest", type=Path, required=True, help="ablation manifest (YAML or JSON)")
    parser.add_argument("--html", type=Path, required=True, help="write the HTML report here")
    parser.add_argument("--markdown", type=Path, default=None, help="write the Markdown summary here")
    args = parser.parse_args(argv)
    try:
        write_report(load_manifest(args.manifest), args.html, args.markdown)
    except (FileNotFoundError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.html}" + (f" and {args.markdown}" if args.markdown else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
