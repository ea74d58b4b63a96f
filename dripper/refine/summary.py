"""The audit trail of a refinement run: what each step took in, let out and dropped, per extractor.

Three records, all under ``{output_root}/refine/``:

- ``excluded/{step}/part-NNNNN.jsonl.gz``: every dropped document (text, id, metadata with
  ``filter_reason``), written by datatrove's exclusion writers as the filters run;
- ``stats/{phase}.json``: datatrove's per-step statistics of each pass, merged over its tasks (from the
  per-task ``logs/{phase}/stats/NNNNN.json``, so a resumed run counts the tasks of earlier invocations too);
- ``_summary.json``: the roll-up (:func:`summarize_refine`), with, for every step in order (the user's
  steps included), documents and tokens in and out, drops by reason and seconds, overall and per extractor
  (the extracted rows' ``extractor``: ``dripper:<labeler>``, ``fineweb``, the fallback's name, ``none``),
  and, with ``decontaminate``, ``decontamination``: per benchmark of the suite its items, n-grams and the
  documents removed (or cut, in spans mode).

The per-extractor counts come from :class:`AuditPoint` steps that the pipeline puts after its reader and
after every step: each counts the documents and tokens passing through it by extractor, in datatrove's
stats. Tokens are counted with the run's tokenizer (``tokenize.tokenizer``) when there is one, else as
whitespace-separated words (``token_unit`` says which); they exclude the end-of-document token the
Megatron files add.
"""

from __future__ import annotations

import json
import logging
import posixpath
import zlib
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.writers.jsonl import JsonlWriter

from dripper.io.storage import filesystem_for, join_path

__all__ = [
    "PLAN_NAME",
    "SUMMARY_NAME",
    "AuditPoint",
    "ExclusionWriter",
    "count_tokens",
    "document_tokens",
    "merged_phase_stats",
    "summarize_refine",
]

log = logging.getLogger(__name__)

PLAN_NAME = "plan.json"
SUMMARY_NAME = "_summary.json"
UNKNOWN_EXTRACTOR = "unknown"
#: Drop reason of steps whose datatrove stats give none.
DEFAULT_REASONS = {"url_dedup": "duplicate_url", "minhash": "near_duplicate", "input": "empty_text"}


#: Steps whose datatrove timer also runs while the steps after them work (ExactDedupFilter times around its
#: ``yield``) or while the steps before them read (MinhashDedupSignature times its whole loop).
_INCLUSIVE_DOWNSTREAM = {("filter", "step:url_dedup")}
_INCLUSIVE_UPSTREAM = {("minhash_signatures", "step:minhash")}


def _fingerprint(text: str) -> str:
    return f"{len(text)}:{zlib.crc32(text.encode('utf-8', 'surrogatepass'))}"


def count_tokens(docs: list[Any], tokenizer: str | None) -> list[int]:
    """Token counts of ``docs``, cached in ``metadata["token_count"]`` until a document's text changes
    (checked by length and CRC-32); uncached texts are encoded together (``encode_batch`` uses threads)."""
    from dripper.refine.steps import whitespace_token_count

    counts: list[int | None] = []
    stale: list[int] = []
    fingerprints = []
    for i, doc in enumerate(docs):
        fingerprint = _fingerprint(doc.text)
        fingerprints.append(fingerprint)
        metadata = doc.metadata
        if metadata.get("_tokens_of") == fingerprint and "token_count" in metadata:
            counts.append(int(metadata["token_count"]))
        else:
            counts.append(None)
            stale.append(i)
    if stale:
        if tokenizer:
            from dripper.refine.tokenize import load_tokenizer_file

            encoded = load_tokenizer_file(tokenizer).encode_batch(
                [docs[i].text for i in stale], add_special_tokens=False
            )
            fresh = [len(encoding.ids) for encoding in encoded]
        else:
            fresh = [whitespace_token_count(docs[i].text) for i in stale]
        for i, count in zip(stale, fresh, strict=True):
            counts[i] = count
            docs[i].metadata["token_count"] = count
            docs[i].metadata["_tokens_of"] = fingerprints[i]
    return [int(c) for c in counts]


def document_tokens(doc: Any, tokenizer: str | None) -> int:
    """One document's token count (see :func:`count_tokens`)."""
    return count_tokens([doc], tokenizer)[0]


class AuditPoint(PipelineStep):
    """Count documents and tokens by extractor (``docs/<extractor>``, ``tokens/<extractor>``) as they pass.

    Documents pass in batches of ``batch_size`` (tokens are counted a batch at a time), in order.

    Args:
        step: The step this point follows (``input`` after the reader).
        tokenizer: ``tokenizer.json`` counting the tokens, or ``None`` for whitespace words.
        batch_size: Documents counted together.
    """

    type = "🧾 - AUDIT"

    def __init__(self, step: str, tokenizer: str | None = None, batch_size: int = 64) -> None:
        self.name = f"after {step}"
        super().__init__()
        self.step = step
        self.tokenizer = tokenizer
        self.batch_size = batch_size

    def run(self, data: Any, rank: int = 0, world_size: int = 1) -> Any:
        from datatrove.utils.batching import batched

        for batch in batched(data or [], self.batch_size):
            with self.track_time("batch"):
                for doc, tokens in zip(batch, count_tokens(batch, self.tokenizer), strict=True):
                    extractor = doc.metadata.get("extractor") or UNKNOWN_EXTRACTOR
                    self.stat_update(f"docs/{extractor}")
                    self.stat_update(f"tokens/{extractor}", value=tokens)
            yield from batch


def _public_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if not k.startswith("_")}


def _excluded_record(writer: Any, document: Any) -> dict[str, Any]:
    return {"id": document.id, "text": document.text, "metadata": _public_metadata(document.metadata)}


class ExclusionWriter(JsonlWriter):
    """Dropped documents of one step, with ``filter_step`` and ``filter_reason`` in their metadata."""

    name = "🗑 Exclusions"

    def __init__(self, output_folder: Any, step: str, default_reason: str | None = None) -> None:
        super().__init__(output_folder, output_filename="part-${rank}.jsonl.gz", adapter=_excluded_record)
        self.step = step
        self.default_reason = default_reason or step

    def write(self, document: Any, rank: int = 0, **kwargs: Any) -> None:
        document.metadata["filter_step"] = self.step
        document.metadata.setdefault("filter_reason", self.default_reason)
        super().write(document, rank, **kwargs)


# -- merging datatrove's stats -----------------------------------------------------------------------------


def merged_phase_stats(logging_dir: str, storage_options: dict[str, Any] | None = None) -> list[dict] | None:
    """datatrove's per-task stats of one pass (``{logging_dir}/stats/*.json``) summed; ``None`` if none."""
    fs, path = filesystem_for(logging_dir, storage_options)
    return _merged_stats(fs, path)


def _merged_stats(fs: Any, path: str) -> list[dict] | None:
    from datatrove.utils.stats import PipelineStats

    stats_dir = posixpath.join(path.rstrip("/"), "stats")
    fs.invalidate_cache(stats_dir)
    try:
        files = sorted(n for n in fs.ls(stats_dir, detail=False) if n.endswith(".json"))
    except FileNotFoundError:
        return None
    if not files:
        return None
    merged = PipelineStats()
    for name in files:
        with fs.open(name, "r") as f:
            merged = merged + PipelineStats.from_json(json.load(f))
    return json.loads(merged.to_json())


def _totals(stat: dict | None) -> dict[str, float]:
    if not stat:
        return {}
    return {
        key: value.get("total", 0) if isinstance(value, dict) else value
        for key, value in stat["stats"].items()
    }


def _seconds(stat: dict | None) -> float:
    timing = stat["time_stats"] if stat else 0.0
    return float(timing.get("total", 0.0) if isinstance(timing, dict) else timing)


def _by_prefix(totals: dict[str, float], prefix: str) -> Counter:
    return Counter({k[len(prefix) :]: int(v) for k, v in totals.items() if k.startswith(prefix)})


# -- the roll-up ------------------------------------------------------------------------------------------


def _row(step: str, docs_in: Counter, docs_out: Counter, tok_in: Counter, tok_out: Counter) -> dict:
    extractors = sorted(set(docs_in) | set(docs_out))
    return {
        "step": step,
        "docs_in": sum(docs_in.values()),
        "docs_out": sum(docs_out.values()),
        "tokens_in": sum(tok_in.values()),
        "tokens_out": sum(tok_out.values()),
        "by_extractor": {
            e: {
                "docs_in": docs_in[e],
                "docs_out": docs_out[e],
                "tokens_in": tok_in[e],
                "tokens_out": tok_out[e],
            }
            for e in extractors
        },
    }


def _drops(step: str, stats: list[dict]) -> Counter:
    """Drops by reason from a step's datatrove stats (``dropped_<reason>``; the rest as the default)."""
    reasons: Counter = Counter()
    total = 0
    for stat in stats:
        totals = _totals(stat)
        total += int(totals.get("dropped", 0))
        for key, value in totals.items():
            if key.startswith("dropped_"):
                reasons[key.removeprefix("dropped_")] += int(value)
    if total > sum(reasons.values()):
        reasons[DEFAULT_REASONS.get(step, "dropped")] += total - sum(reasons.values())
    return +reasons


def build_summary(plan: dict[str, Any], phase_stats: dict[str, list[dict] | None]) -> dict[str, Any]:
    """The audit roll-up from the run's plan and the merged stats of each pass."""
    roles: dict[str, list[dict]] = {}
    seconds: Counter = Counter()
    for phase in plan["phases"]:
        stats = phase_stats.get(phase["name"]) or []
        position_seconds = [_seconds(stat) for stat in stats]
        for i, role in enumerate(phase["roles"][: len(stats)]):
            if (phase["name"], role) in _INCLUSIVE_DOWNSTREAM:
                position_seconds[i] = max(position_seconds[i] - sum(position_seconds[i + 1 :]), 0.0)
            elif (phase["name"], role) in _INCLUSIVE_UPSTREAM:
                position_seconds[i] = max(position_seconds[i] - sum(position_seconds[:i]), 0.0)
        for role, stat, spent in zip(phase["roles"], stats, position_seconds, strict=False):
            roles.setdefault(role, []).append(stat)
            kind, _, step = role.partition(":")
            seconds[step if kind == "step" else kind] += spent

    def audit(step: str) -> tuple[Counter, Counter]:
        totals = _totals((roles.get(f"audit:{step}") or [None])[0])
        return _by_prefix(totals, "docs/"), _by_prefix(totals, "tokens/")

    reader = _totals((roles.get("read:input") or [None])[0])
    rows_in = _by_prefix(reader, "rows/")
    input_docs, input_tokens = audit("input")
    steps_rows = [_row("input", rows_in, input_docs, input_tokens, input_tokens)]
    steps_rows[0]["dropped"] = dict(_drops("input", roles.get("read:input", [])))
    steps_rows[0]["seconds"] = round(seconds["read"], 3)
    prev_docs, prev_tokens = input_docs, input_tokens
    for step in plan["steps"]:
        if step == "tokenize":
            totals = _totals((roles.get("step:tokenize") or [None])[0])
            docs_out, tok_out = _by_prefix(totals, "docs/"), _by_prefix(totals, "tokens/")
        else:
            docs_out, tok_out = audit(step)
        row = _row(step, prev_docs, docs_out, prev_tokens, tok_out)
        row["dropped"] = dict(_drops(step, roles.get(f"step:{step}", [])))
        row["seconds"] = round(seconds[step], 3)
        row["balanced"] = row["docs_in"] == row["docs_out"] + sum(row["dropped"].values())
        steps_rows.append(row)
        if step != "tokenize":
            prev_docs, prev_tokens = docs_out, tok_out
    steps_rows[0]["balanced"] = steps_rows[0]["docs_in"] == steps_rows[0]["docs_out"] + sum(
        steps_rows[0]["dropped"].values()
    )
    by_extractor: dict[str, list[dict]] = {}
    for row in steps_rows:
        for extractor, counts in row["by_extractor"].items():
            by_extractor.setdefault(extractor, []).append({"step": row["step"], **counts})
    final = steps_rows[-2] if steps_rows[-1]["step"] == "tokenize" else steps_rows[-1]
    timing = {k: round(v, 3) for k, v in sorted(seconds.items()) if v}
    extra = {}
    if plan.get("decontamination") and "decontaminate" in plan["steps"]:
        extra["decontamination"] = _decontamination(
            plan["decontamination"], roles.get("step:decontaminate", [])
        )
    return {
        "steps": steps_rows,
        "by_extractor": by_extractor,
        "documents_in": steps_rows[0]["docs_in"],
        "documents_out": final["docs_out"],
        "tokens_in": steps_rows[0]["tokens_in"],
        "tokens_out": final["tokens_out"],
        "dropped": {row["step"]: row["dropped"] for row in steps_rows if row.get("dropped")},
        "balanced": all(row["balanced"] for row in steps_rows),
        "timing_seconds": timing,
        **extra,
    }


def _decontamination(index: dict[str, Any], stats: list[dict]) -> dict[str, Any]:
    """What the ``decontaminate`` step removed per benchmark (its stats) beside what it matched against (the
    index manifest: items and n-grams per benchmark, benchmarks left out for want of data)."""
    totals: Counter = Counter()
    for stat in stats:
        totals.update({key: int(value) for key, value in _totals(stat).items()})
    removed = _by_prefix(totals, "contaminated_")
    cut = _by_prefix(totals, "spans_")
    benchmarks = {
        name: {**counts, "documents_removed": removed[name], "documents_cut": cut[name]}
        for name, counts in index.get("benchmarks", {}).items()
    }
    return {
        "suite": index.get("suite"),
        "n": index.get("n"),
        "mode": index.get("mode"),
        "benchmarks": benchmarks,
        "unavailable": index.get("unavailable") or {},
        "documents_removed": sum(row["documents_removed"] for row in benchmarks.values()),
        "documents_cut": sum(row["documents_cut"] for row in benchmarks.values()),
        "lines_removed": int(totals.get("lines_removed", 0)),
    }


def _list_files(fs: Any, path: str, suffix: str) -> list[str]:
    try:
        return sorted(n for n in fs.find(path) if n.endswith(suffix))
    except FileNotFoundError:
        return []


def summarize_refine(
    output_root: str,
    storage_options: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Merge the stats of every pass, roll the audit trail up and write ``refine/_summary.json``.

    Runs at the end of :func:`~dripper.refine.pipeline.run_refine`; call it yourself after Slurm or Ray
    jobs submitted without waiting have finished. Returns the summary.
    """
    from dripper.refine.tokenize import write_tokens_summary

    fs, root = filesystem_for(str(output_root), storage_options)
    root = root.rstrip("/")
    refine_dir = posixpath.join(root, "refine")
    with fs.open(posixpath.join(refine_dir, PLAN_NAME), "r") as f:
        plan = json.load(f)
    phase_stats: dict[str, list[dict] | None] = {}
    incomplete = []
    for phase in plan["phases"]:
        logging_dir = posixpath.join(refine_dir, "logs", phase["name"])
        phase_stats[phase["name"]] = _merged_stats(fs, logging_dir)
        try:
            done = len(fs.ls(posixpath.join(logging_dir, "completions"), detail=False))
        except FileNotFoundError:
            done = 0
        phase["completed_tasks"] = done
        if done < phase["tasks"]:
            incomplete.append(f"{phase['name']} ({done}/{phase['tasks']} tasks)")
        if phase_stats[phase["name"]] is not None:
            fs.makedirs(posixpath.join(refine_dir, "stats"), exist_ok=True)
            with fs.open(posixpath.join(refine_dir, "stats", f"{phase['name']}.json"), "w") as f:
                f.write(json.dumps(phase_stats[phase["name"]], indent=1) + "\n")
    summary: dict[str, Any] = {
        "output_root": str(output_root),
        "input_root": plan.get("input_root"),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "complete": not incomplete,
        "incomplete_phases": incomplete,
        "token_unit": plan.get("token_unit"),
        # the documents' text: markdown or plain text (a plan from before the choice: Markdown)
        "text_format": (plan.get("config") or {}).get("text_format", "markdown"),
        **build_summary(plan, phase_stats),
        "phases": [
            {k: phase[k] for k in ("name", "tasks", "completed_tasks") if k in phase}
            for phase in plan["phases"]
        ],
        "exclusions": {
            step: files
            for step in ["input", *plan["steps"]]
            if (
                files := [
                    n.removeprefix(root + "/")
                    for n in _list_files(fs, posixpath.join(refine_dir, "excluded", step), ".gz")
                ]
            )
        },
        "corpus": {
            "format": plan.get("output_format"),
            "files": [
                n.removeprefix(root + "/")
                for n in _list_files(fs, posixpath.join(root, "corpus"), plan["corpus_suffix"])
            ],
        },
        "config": plan.get("config"),
        **(extra or {}),
    }
    if "tokenize" in plan["steps"] and plan.get("tokenizer_info"):
        summary["tokens"] = write_tokens_summary(
            join_path(str(output_root), "tokens"), plan["tokenizer_info"], storage_options
        )
    if incomplete:
        log.warning("refine: incomplete passes: %s; rerun to finish them", ", ".join(incomplete))
    elif not summary["balanced"]:
        log.warning(
            "refine: a step's documents do not add up (docs_in != docs_out + dropped): see %s", refine_dir
        )
    with fs.open(posixpath.join(refine_dir, SUMMARY_NAME), "w") as f:
        f.write(json.dumps(summary, indent=1) + "\n")
    return summary
