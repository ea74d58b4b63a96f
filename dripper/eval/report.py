"""The extractor ablation report: what was run, the benchmark scores per extractor with their standard
errors and over training, pairwise comparisons against noise, corpus size, extraction quality::

    python -m dripper.eval.report --manifest ablation.yaml --html report.html --markdown report.md

The manifest (YAML or JSON; paths relative to it)::

    title: Dripper vs Trafilatura, CC-MAIN-2025-13 sample
    run: {crawl: CC-MAIN-2025-13, warc_files: 4, model: tiny, train_steps: 20, suite: local, tokenizer: …}
    extraction: runs/extraction.json          # `python -m dripper.eval.extraction --out` summary (labelled set)
    lm_pages_per_second: 3.08                 # one GPU's LM pages/s, for GPU-hours per million pages
    extractors:
      - name: dripper                         # label in the report (the extractor spec's name)
        labeler: cpu                          # optional; spec: {…} (the extractor spec) likewise
        run_summary: runs/dripper/_run_summary.json         # its extract run (pages and tokens to the LM)
        refine_summary: runs/dripper/refine/_summary.json   # this extractor's own refinement run
        tokens_summary: runs/dripper/tokens/_summary.json   # its Megatron tokens (documents, tokens)
        extraction_row: "dripper:dripper/md"  # its row in the extraction summary (default: refine_extractor)
        train_run: runs/dripper/pretrain/tiny # run folder with train_log.jsonl (or the file itself)
        scores: runs/dripper/scores.json      # `python -m dripper.eval.lm_suite --out` summary (final model)
        checkpoint_scores: [runs/dripper/eval/iter_0000010.json, …]   # one summary per checkpoint
      - name: trafilatura
        ...
    # Or one refinement run over several extractors, split by the rows' extractor name:
    #   refine_summaries: [runs/refine/refine/_summary.json]   (top level)
    #   refine_extractor: "dripper:cpu"                         (per extractor; default: name)

Every section is optional per extractor: what is missing is reported as missing, not invented; files the
manifest names that do not exist are listed (``missing_inputs``) under "What was run".

Refinement summary (``refine/_summary.json`` of ``dripper.refine``): the report reads ``steps``, a list
in pipeline order of ``{"step", "docs_in", "docs_out", "tokens_in", "tokens_out", "dropped": {reason: n},
"by_extractor": {extractor: {"docs_in", "docs_out", "tokens_in", "tokens_out"}}}``, and ``token_unit``.
The dedup rate is the share of the documents entering the first dedup step (:data:`DEDUP_STEPS`) that the
dedup steps removed.

Seeds: an extractor may list ``runs: [{seed, train_run, scores, checkpoint_scores}, …]`` (one per seed)
instead of one run's fields; its scores are the mean over seeds with their spread.

Noise (:mod:`dripper.eval.noise`): every score carries lm-eval's standard error; a mean over benchmarks
carries ``sqrt(sum se_i^2) / n``. Two extractors' means are compared by their difference over
``sqrt(se_a^2 + se_b^2 + sd_a^2/n_a + sd_b^2/n_b)``, item and seed noise (:func:`compare`): within one is
noise, beyond two beyond noise. The early signal (each checkpoint's loss on a held-out reference text,
:mod:`dripper.eval.reference`) is read by the same rule. A rule of thumb, not a significance test.

Rendering (HTML with plots, Markdown) is :mod:`dripper.eval.report_html`'s.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

DEDUP_STEPS = ("url_dedup", "exact_dedup", "minhash", "dedup", "near_dedup")
COUNT_KEYS = ("docs_in", "docs_out", "tokens_in", "tokens_out")


@dataclass(slots=True)
class RunInputs:
    """One training run of an arm (one seed): its folder and its scores."""

    seed: int | None = None
    train_run: Path | None = None
    scores: Path | None = None
    checkpoint_scores: list[Path] = field(default_factory=list)


@dataclass(slots=True)
class ExtractorInputs:
    name: str
    labeler: str | None = None
    spec: dict[str, Any] | None = None
    run_summary: Path | None = None
    refine_extractor: str | None = None
    refine_summary: Path | None = None
    tokens_summary: Path | None = None
    extraction_row: str | None = None
    train_run: Path | None = None
    scores: Path | None = None
    checkpoint_scores: list[Path] = field(default_factory=list)
    #: One per seed; a manifest entry without ``runs`` is one run (``train_run``, ``scores``, …).
    runs: list[RunInputs] = field(default_factory=list)


@dataclass(slots=True)
class ReportInputs:
    extractors: list[ExtractorInputs]
    title: str = "Extractor ablation"
    run: dict[str, Any] = field(default_factory=dict)
    refine_summaries: list[Path] = field(default_factory=list)
    extraction: Path | None = None
    lm_pages_per_second: float | None = None


def load_manifest(path: Path | str) -> ReportInputs:
    """Read an ablation manifest (YAML or JSON); relative paths are taken from the manifest's folder."""
    import yaml

    path = Path(path)
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a manifest is a mapping (title, run, extractors, ...)")
    base = path.parent

    def resolve(value: str | None) -> Path | None:
        return None if value is None else (base / value).resolve()

    extractors = []
    names = set()
    for entry in data.get("extractors") or []:
        if "name" not in entry:
            raise ValueError(f"{path}: every extractor needs a name")
        if entry["name"] in names:
            raise ValueError(f"{path}: extractor name {entry['name']!r} is listed twice")
        names.add(entry["name"])
        runs = [
            RunInputs(
                seed=run.get("seed"),
                train_run=resolve(run.get("train_run")),
                scores=resolve(run.get("scores")),
                checkpoint_scores=[resolve(p) for p in run.get("checkpoint_scores") or []],
            )
            for run in entry.get("runs") or []
        ]
        if runs and any(entry.get(key) for key in ("train_run", "scores", "checkpoint_scores")):
            raise ValueError(
                f"{path}: {entry['name']}: give runs or train_run/scores/checkpoint_scores, not both"
            )
        extractors.append(
            ExtractorInputs(
                name=entry["name"],
                labeler=entry.get("labeler"),
                spec=entry.get("spec"),
                run_summary=resolve(entry.get("run_summary")),
                refine_extractor=entry.get("refine_extractor"),
                refine_summary=resolve(entry.get("refine_summary")),
                tokens_summary=resolve(entry.get("tokens_summary")),
                extraction_row=entry.get("extraction_row"),
                train_run=resolve(entry.get("train_run")),
                scores=resolve(entry.get("scores")),
                checkpoint_scores=[resolve(p) for p in entry.get("checkpoint_scores") or []],
                runs=runs,
            )
        )
    if not extractors:
        raise ValueError(f"{path}: no extractors listed")
    return ReportInputs(
        extractors=extractors,
        title=data.get("title", "Extractor ablation"),
        run=dict(data.get("run") or {}),
        refine_summaries=[resolve(p) for p in data.get("refine_summaries") or []],
        extraction=resolve(data.get("extraction")),
        lm_pages_per_second=data.get("lm_pages_per_second"),
    )


# ----------------------------------------------------------------------------------------------- collecting


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
    """The overall figures of one row of an ``dripper.eval.extraction`` summary."""
    if not summary:
        return None
    data = summary.get("rows", {}).get(row)
    return dict(data["all"]) if data else None


def lm_cost(
    run_summary: dict[str, Any] | None, spec: dict[str, Any] | None, pages_per_second: float | None
) -> dict[str, Any] | None:
    """What an extractor asked of an LM: the share of its pages and of their prompt tokens the LM labelled,
    and GPU-hours per million pages.

    A cascade's shares are its run's ``route:*`` counters (prompt tokens estimated alike for every page);
    an LM labeler alone takes every page, a CPU one none. GPU-hours per million pages assume LM time in
    proportion to prompt tokens: ``token share × 10⁶ / (pages_per_second × 3600)``, ``pages_per_second``
    being one GPU's rate on the average page (the user's figure); ``measured_pages_per_second`` is the rate
    of this run's own LM step over the pages it took (on whatever hardware ran it).
    """
    spec = spec or {}
    route = spec.get("route")
    labeler = (route or {}).get("labeler") or spec.get("labeler")
    if labeler is None:
        return None
    from dripper.config.extractor import labeler_is_lm

    extracted = ((run_summary or {}).get("stages") or {}).get("extracted") or {}
    counters = extracted.get("counters") or {}
    cost: dict[str, Any] = {"lm": labeler if (route or labeler_is_lm(labeler)) else None}
    if route:
        pages = extracted.get("pages_out") or counters.get("route:pages_scored")
        routed = counters.get("route:pages_routed")
        tokens = counters.get("route:prompt_tokens_estimate")
        if not pages or routed is None:
            return {**cost, "missing": "no cascade counters in the extract run's summary"}
        cost["page_share"] = routed / pages
        cost["token_share"] = (
            counters.get("route:routed_prompt_tokens_estimate", 0) / tokens if tokens else None
        )
        if routed and counters.get("route_seconds"):
            cost["measured_pages_per_second"] = routed / counters["route_seconds"]
    elif cost["lm"]:
        cost["page_share"] = cost["token_share"] = 1.0
    else:
        cost["page_share"] = cost["token_share"] = 0.0
    share = cost.get("token_share")
    if share is None:
        share = cost["page_share"]
    if pages_per_second:
        cost["pages_per_second"] = pages_per_second
        cost["gpu_hours_per_million_pages"] = share * 1e6 / (pages_per_second * 3600)
    return cost


def text_format(refine_summary: dict[str, Any] | None, spec: dict[str, Any]) -> str:
    """What the arm's documents were: ``markdown`` or ``text``, as its refinement read them (its summary),
    else as its spec's ``output`` says (or its labeler's default)."""
    if refine_summary and refine_summary.get("text_format") in ("markdown", "text"):
        return refine_summary["text_format"]
    from dripper.config.extractor import default_output

    return spec.get("output") or default_output(str(spec.get("labeler") or ""))


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
            records[int(record["step"])] = record  # a resumed run re-logs steps past its checkpoint
    return [records[step] for step in sorted(records)]


def _read_json(path: Path | None) -> dict[str, Any] | None:
    if path is None or not Path(path).exists():
        return None
    return json.loads(Path(path).read_text(encoding="utf-8"))


def score_curve(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The mean score (and per category) of each evaluated checkpoint, ordered by training tokens."""
    points = []
    for path in paths:
        summary = _read_json(path)
        if summary is None:
            continue
        points.append(
            {
                "step": summary.get("step"),
                "tokens": summary.get("tokens"),
                "mean": summary["mean"],
                "mean_stderr": summary.get("mean_stderr"),
                "categories": summary.get("categories") or {},
                "categories_stderr": summary.get("categories_stderr") or {},
                "reference_loss": summary.get("reference_loss"),
                "reference_loss_stderr": summary.get("reference_loss_stderr"),
                "source": str(path),
            }
        )
    return sorted(points, key=lambda p: (p["tokens"] is None, p["tokens"] or 0, p["step"] or 0))


def compare(
    a: float, a_stderr: float | None, b: float, b_stderr: float | None, **seeds: Any
) -> dict[str, Any]:
    """``a - b`` against its noise (:func:`dripper.eval.noise.compare`: item SEs, and the seed spreads given
    as ``a_seed_sd``/``a_seeds``/``b_seed_sd``/``b_seeds``).

    ``verdict``: ``"> 2 SE"``, ``"> 1 SE"`` or ``"within 1 SE"`` (noise), or ``"no standard error"``.
    """
    from dripper.eval.noise import compare as read_difference

    return read_difference(a, a_stderr, b, b_stderr, **seeds)


def _seeds(scores: dict[str, Any], sd: float | None) -> dict[str, Any]:
    return {"seed_sd": sd, "seeds": int(scores.get("seeds") or 1)}


def _pair(first: dict[str, Any], second: dict[str, Any], a_value, a_se, a_sd, b_value, b_se, b_sd, **kw):
    n_a, n_b = int(first.get("seeds") or 1), int(second.get("seeds") or 1)
    return compare(
        a_value, a_se, b_value, b_se, a_seed_sd=a_sd, a_seeds=n_a, b_seed_sd=b_sd, b_seeds=n_b, **kw
    )


def comparisons(extractors: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pair of extractors with final scores: the mean and each category (and the reference loss, the
    early signal, where both have it), compared by :func:`compare` against item and seed noise."""
    scored = [e for e in extractors if e["scores"]]
    rows = []
    for first, second in combinations(scored, 2):
        a, b = first["scores"], second["scores"]
        row = {
            "a": first["name"],
            "b": second["name"],
            "mean": _pair(
                a,
                b,
                a["mean"],
                a.get("mean_stderr"),
                a.get("mean_seed_sd"),
                b["mean"],
                b.get("mean_stderr"),
                b.get("mean_seed_sd"),
            ),  # fmt: skip
            "categories": {},
        }
        for category, value in (a.get("categories") or {}).items():
            if category in (b.get("categories") or {}):
                row["categories"][category] = _pair(
                    a, b,
                    value, (a.get("categories_stderr") or {}).get(category),
                    (a.get("categories_seed_sd") or {}).get(category),
                    b["categories"][category], (b.get("categories_stderr") or {}).get(category),
                    (b.get("categories_seed_sd") or {}).get(category),
                )  # fmt: skip
        if a.get("reference_loss") is not None and b.get("reference_loss") is not None:
            row["reference_loss"] = _pair(
                a, b, a["reference_loss"], a.get("reference_loss_stderr"), a.get("reference_loss_seed_sd"),
                b["reference_loss"], b.get("reference_loss_stderr"), b.get("reference_loss_seed_sd"),
                lower_is_better=True,
            )  # fmt: skip
        rows.append(row)
    return rows


def run_budget(
    runs: Sequence[dict[str, Any]], tokens_summary: dict[str, Any] | None, max_epochs: float
) -> dict[str, Any] | None:
    """An arm's token budget: its corpus tokens, the unique tokens it trained on (its corpus, or the cut of
    ``equalize_corpora``), the training tokens and steps, and epochs = training tokens / unique tokens,
    ``flagged`` above ``max_epochs``. From the runs' ``run.json`` (``data``), else the tokens summary and
    the training log."""
    if not runs:
        return None
    info = runs[0].get("run_info") or {}
    data = info.get("data") or {}
    train = info.get("train") or {}
    loss = runs[0].get("loss") or []
    corpus = data.get("corpus_tokens") or (tokens_summary or {}).get("tokens")
    unique = data.get("tokens") or corpus
    train_tokens = data.get("train_tokens") or (loss[-1].get("tokens") if loss else None)
    epochs = train_tokens / unique if train_tokens and unique else None
    return {
        "corpus_tokens": corpus,
        "unique_tokens": unique,
        "cut": bool(data.get("prefix")),
        "train_tokens": train_tokens,
        "train_steps": train.get("train_steps") or (loss[-1].get("step") if loss else None),
        "budget_tokens": train.get("train_tokens"),
        "global_batch_size": train.get("global_batch_size"),
        "epochs": epochs,
        "max_epochs": max_epochs,
        "flagged": bool(epochs is not None and epochs > max_epochs),
    }


def missing_inputs(inputs: ReportInputs, item: ExtractorInputs | None = None) -> list[str]:
    """The files the manifest names (for ``item``, else at the top level) that do not exist."""
    if item is None:
        named = [*inputs.refine_summaries, inputs.extraction]
    else:
        named = [item.refine_summary, item.tokens_summary]
        for run in arm_runs(item):
            named += [run.scores, *run.checkpoint_scores]
            if run.train_run is not None:
                named.append(run.train_run / "train_log.jsonl" if run.train_run.is_dir() else run.train_run)
    return [str(path) for path in named if path is not None and not Path(path).exists()]


def arm_runs(item: ExtractorInputs) -> list[RunInputs]:
    """An arm's training runs: its ``runs``, or the one run of its top-level fields (none without any)."""
    if item.runs:
        return list(item.runs)
    if item.train_run is None and item.scores is None and not item.checkpoint_scores:
        return []
    return [RunInputs(None, item.train_run, item.scores, list(item.checkpoint_scores))]


def _run_info(run: Path | None) -> dict[str, Any]:
    """A training run's ``run.json`` (its config and data), or ``{}``."""
    if run is None:
        return {}
    return _read_json((run if run.is_dir() else run.parent) / "run.json") or {}


def collect_runs(item: ExtractorInputs) -> list[dict[str, Any]]:
    """Each seed's run of an arm: its seed, training log, config, final scores and checkpoint points."""
    runs = []
    for run in arm_runs(item):
        info = _run_info(run.train_run)
        runs.append(
            {
                "seed": run.seed if run.seed is not None else (info.get("train") or {}).get("seed"),
                "train_run": str(run.train_run) if run.train_run else None,
                "run_info": info,
                "loss": training_curve(run.train_run),
                "scores": _read_json(run.scores),
                "curve": score_curve(run.checkpoint_scores),
            }
        )
    return runs


def collect(inputs: ReportInputs) -> dict[str, Any]:
    """Everything the report shows, as plain data (also embedded in the HTML)."""
    from dripper.config.pretrain import PretrainStageConfig
    from dripper.eval.noise import aggregate_curve, aggregate_scores
    from dripper.eval.report_controls import baseline_settings

    summaries = [_read_json(p) or {} for p in inputs.refine_summaries]
    extraction = _read_json(inputs.extraction)
    try:
        max_epochs = float(inputs.run.get("max_epochs") or PretrainStageConfig.default("max_epochs"))
    except (TypeError, ValueError):
        max_epochs = float(PretrainStageConfig.default("max_epochs"))
    extractors = []
    for item in inputs.extractors:
        refine_key = item.refine_extractor or item.name
        own = _read_json(item.refine_summary)
        corpus = run_corpus_stats(own) if own is not None else corpus_stats(summaries, refine_key)
        tokens = _read_json(item.tokens_summary)
        runs = collect_runs(item)
        extractors.append(
            {
                "name": item.name,
                "labeler": item.labeler,
                "spec": item.spec,
                "refine_extractor": refine_key,
                "corpus": corpus,
                "tokens": (
                    {key: tokens.get(key) for key in ("documents", "tokens", "tokenizer")} if tokens else None
                ),
                "extraction": extraction_quality(extraction, item.extraction_row or refine_key),
                "lm_cost": lm_cost(
                    _read_json(item.run_summary),
                    item.spec or ({"labeler": item.labeler} if item.labeler else None),
                    inputs.lm_pages_per_second,
                ),
                "extraction_row": item.extraction_row or refine_key,
                "loss": runs[0]["loss"] if runs else None,
                "scores": aggregate_scores([r["scores"] for r in runs if r["scores"]]),
                "curve": aggregate_curve([r["curve"] for r in runs if r["curve"]]),
                "runs": [{k: v for k, v in r.items() if k != "run_info"} for r in runs],
                "seeds": [r["seed"] for r in runs],
                "budget": run_budget(runs, tokens, max_epochs),
                "missing_inputs": missing_inputs(inputs, item),
                "baseline": baseline_settings(item.spec or {"labeler": item.labeler}),
                "decontamination": (own or {}).get("decontamination"),
                "text_format": text_format(own, item.spec or {"labeler": item.labeler}),
            }
        )
    all_rows = {row: data["all"] for row, data in (extraction or {}).get("rows", {}).items()}
    return {
        "title": inputs.title,
        "run": inputs.run,
        "extractors": extractors,
        "extraction_rows": all_rows,
        "comparisons": comparisons(extractors),
        "settings": suite_settings(extractors),
        "missing_inputs": missing_inputs(inputs),
    }


def suite_settings(extractors: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each benchmark's setting (task, shots, metric, filter) and its cited source, from the suite file the
    scores name (``[]`` when it is not at hand)."""
    from dripper.eval.lm_suite import load_suite

    suite = next((e["scores"].get("suite") for e in extractors if e["scores"]), None)
    try:
        tasks = load_suite(suite).tasks if suite else ()
    except (FileNotFoundError, ValueError):
        return []
    return [
        {
            "name": t.name,
            "task": t.task,
            "num_fewshot": t.num_fewshot,
            "metric": t.metric,
            "filter": t.filter,
            "source": t.source or "not stated in the suite file",
        }  # fmt: skip
        for t in tasks
    ]


def write_report(
    inputs: ReportInputs, html_path: Path | str, markdown_path: Path | str | None = None
) -> dict[str, Any]:
    """Collect, plot and write the HTML (and Markdown) report; returns the collected data."""
    from dripper.eval.report_html import figures, render_html, render_markdown

    data = collect(inputs)
    Path(html_path).parent.mkdir(parents=True, exist_ok=True)
    Path(html_path).write_text(render_html(data, figures(data)), encoding="utf-8")
    if markdown_path:
        Path(markdown_path).write_text(render_markdown(data), encoding="utf-8")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dripper.eval.report", description=__doc__.split("\n")[0])
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
