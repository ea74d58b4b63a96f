"""Fixtures for the extraction-benchmark tests (the shared dev data and tiny hand-written data files) and for
the ablation report's tests (the inputs of a three-extractor ablation: :func:`write_report_fixture`)."""

from __future__ import annotations

import json
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

# The checkout lives next to ``shared/`` (…/main and …/shared); DRIPPER_SHARED_DATA points elsewhere.
DEFAULT_SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def shared_data_dir() -> Path:
    return Path(os.environ.get("DRIPPER_SHARED_DATA", DEFAULT_SHARED_DATA))


@pytest.fixture(scope="session")
def dev_data() -> Path:
    """``dev.jsonl.gz`` from the shared data folder; the test is skipped when it is absent."""
    path = shared_data_dir() / "dev.jsonl.gz"
    if not path.is_file():
        pytest.skip(f"{path} not found (set DRIPPER_SHARED_DATA to the folder holding dev.jsonl.gz)")
    return path


ARTICLE_TEXT = (
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch. "
    "Nobody expected the fox to come back the next morning with three friends."
)

ARTICLE_HTML = f"""<html><head><title>Fox news</title></head><body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/about">About us</a></li></ul></nav>
<article><h1>The fox returns</h1>
<p>{ARTICLE_TEXT}</p>
<p>Second paragraph with <a href="https://example.com/more">a link</a> and an <img src="x.png" alt="image">
picture, long enough to be kept by every heuristic extractor that looks at text density.</p>
</article>
<footer>Copyright 2024 Example Media. All rights reserved.</footer>
</body></html>"""


def webmainbench_records() -> list[dict]:
    """Four WebMainBench-schema records covering the reader's edge cases.

    1. ``groundtruth_content`` present: it wins over ``convert_main_content``.
    2. ``convert_main_content`` followed by ``groundtruth_content: null`` (the toolkit's key-order pitfall):
       the ground truth must still be ``convert_main_content``.
    3. Only ``convert_main_content``.
    4. Neither: no ground truth.
    All carry annotation artefacts in the HTML.
    """
    html = (
        '<html><body><div data-anno-uid="a1" class="main"><marked-text data-anno-uid=\'b2\'>'
        f"{ARTICLE_TEXT}</marked-text><marked-tail>tail</marked-tail>"
        "<p data-anno-uid=x3>para <marked-inline>inline</marked-inline></p></div></body></html>"
    )
    meta = {
        "language": "en",
        "style": "Article",
        "level": "simple",
        "table": [],
        "code": ["inline"],
        "equation": [],
    }
    return [
        {
            "track_id": "t-1",
            "url": "https://example.com/1",
            "html": html,
            "main_html": None,
            "convert_main_content": "converted one",
            "groundtruth_content": "# Calibrated\n\n" + ARTICLE_TEXT,
            "meta": meta,
        },
        {
            "track_id": "t-2",
            "url": "https://example.com/2",
            "html": html,
            "convert_main_content": ARTICLE_TEXT,
            "groundtruth_content": None,
            "meta": {**meta, "level": "hard", "style": "Forum_or_Article_with_commentsection"},
        },
        {
            "track_id": "t-3",
            "url": None,
            "html": html,
            "convert_main_content": ARTICLE_TEXT,
            "meta": {**meta, "language": "zh", "level": "mid", "table": ["data", "layout"]},
        },
        {"track_id": "t-4", "url": None, "html": html, "meta": {}},
    ]


@pytest.fixture
def webmainbench_file(tmp_path: Path) -> Path:
    path = tmp_path / "wmb.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in webmainbench_records()), encoding="utf-8")
    return path


def dev_records() -> list[dict]:
    """Two dev-format records: a full-text page and a snippet page."""
    return [
        {
            "id": "p-full",
            "url": "https://example.com/fox",
            "html": ARTICLE_HTML,
            "ground_truth_text": "# The fox returns\n\n" + ARTICLE_TEXT,
            "ground_truth_format": "markdown(html2text of expected.html)",
            "language": "en",
            "source": "unit",
            "title": "Fox news",
        },
        {
            "id": "p-snip",
            "url": None,
            "html": ARTICLE_HTML,
            "ground_truth_text": None,
            "ground_truth_format": "snippets(with/without)",
            "with_snippets": ["The quick brown fox", "three friends"],
            "without_snippets": ["All rights reserved"],
            "language": "en",
            "source": "unit",
            "page_type": "article",
        },
    ]


@pytest.fixture
def fake_core(monkeypatch):
    """Install a fake ``dripper.pipeline`` recording its calls; the real types module is used."""
    from dripper.types import ExtractResult

    calls: list[dict] = []

    def extract_batch(pages, labeler="oracle", fallback="trafilatura"):
        calls.append(
            {"ids": [p.doc_id for p in pages], "gts": [p.ground_truth for p in pages], "labeler": labeler}
        )
        if any("crash" in p.html for p in pages):
            raise RuntimeError("batch crashed")
        return [
            ExtractResult(
                doc_id=p.doc_id,
                url=p.url,
                markdown=f"# MD {p.doc_id}",
                main_html=f"<h1>HTML {p.doc_id}</h1><p><a href='/x'>link text</a></p>",
                labels=[True],
                extractor=f"dripper:{labeler}",
                fallback_reason="parse_error" if "fallback" in p.html else None,
            )
            for p in pages
        ]

    module = types.ModuleType("dripper.pipeline")
    module.extract_batch = extract_batch
    monkeypatch.setitem(sys.modules, "dripper.pipeline", module)
    # `from dripper import pipeline` reads the package attribute first once the real module was imported.
    import dripper

    monkeypatch.setattr(dripper, "pipeline", module, raising=False)
    return calls


# -- the ablation report's fixture inputs (tests/eval/test_report.py and test_report_browser.py) ----------

#: A long path without spaces, as a tokens summary names it: it must wrap, never widen a table.
REPORT_TOKENIZER = (
    "/srv/models/qwen3-0.6b-base/snapshots/0123456789abcdef0123456789abcdef01234567/tokenizer.json"
)
#: Each task's standard error: a mean over the 13 tasks then carries sqrt(13 se^2) / 13 = 0.01.
TASK_STDERR = 0.01 * 13**0.5
#: Training checkpoints evaluated (8 sequences of 64 tokens a step).
CHECKPOINT_STEPS = (10, 20, 30)
TOKENS_PER_STEP = 8 * 64


@dataclass(frozen=True)
class FixtureExtractor:
    name: str
    labeler: str
    refine_key: str  # its rows' extractor name in the refinement and extraction summaries
    shift: float  # added to every benchmark score: the final means differ by these shifts
    own_refine: bool = False  # its own refinement run (else rows of the shared one)
    spec: dict | None = None


REPORT_EXTRACTORS = (
    FixtureExtractor("dripper", "cpu", "dripper:cpu", 0.03),
    FixtureExtractor(
        "dripper-vllm",
        "vllm",
        "dripper:vllm",
        0.01,
        own_refine=True,
        spec={
            "name": "dripper-vllm",
            "labeler": "vllm",
            "options": {"model": "/models/dripper-v1.1", "answer_format": "compact"},
            "fallback": "trafilatura",
            "fallback_on_empty": True,
        },
    ),
    FixtureExtractor("trafilatura", "trafilatura", "trafilatura", 0.0),
)

#: Per extractor and step: (docs_in, docs_out, tokens_in, tokens_out).
REPORT_CORPUS = {
    "dripper:cpu": [(100, 98, 50000, 49000), (98, 90, 49000, 46000), (90, 80, 46000, 41000),
                    (80, 72, 41000, 37000), (72, 72, 37000, 37100)],
    "dripper:vllm": [(100, 99, 52000, 51000), (99, 92, 51000, 48000), (92, 83, 48000, 43000),
                     (83, 75, 43000, 39000), (75, 75, 39000, 39150)],
    "trafilatura": [(100, 95, 45000, 44000), (95, 85, 44000, 40000), (85, 70, 40000, 33000),
                    (70, 56, 33000, 27000), (56, 56, 27000, 27080)],
}  # fmt: skip
REFINE_STEPS = ("input", "language", "gopher", "minhash", "tokenize")
REFINE_DROPS = ({"empty_text": 7}, {"not_en": 18}, {"gopher_rep": 25}, {"near_duplicate": 22}, {})


def _refine_row(step: int, keys: list[str]) -> dict:
    names = ("docs_in", "docs_out", "tokens_in", "tokens_out")
    by = {key: dict(zip(names, REPORT_CORPUS[key][step], strict=True)) for key in keys}
    total = {k: sum(v[k] for v in by.values()) for k in names}
    return {"step": REFINE_STEPS[step], **total, "dropped": REFINE_DROPS[step], "by_extractor": by}


def refine_summary(keys: list[str]) -> dict:
    """A refinement run over ``keys`` (extractor names), in dripper.refine's _summary.json shape."""
    return {"token_unit": "tokens", "steps": [_refine_row(i, keys) for i in range(len(REFINE_STEPS))]}


def extraction_summary() -> dict:
    """An ``dripper.eval.extraction`` summary: the three extractors' rows and a baseline outside the ablation."""

    def stats(f1: float) -> dict:
        return {"pages": 60, "rouge5_f1": f1, "rouge5_f1_norm": f1 + 0.02, "snippet_precision": 0.9,
                "snippet_recall": 0.8, "snippet_f1": 0.85, "errors": 0, "full_text_pages": 60}  # fmt: skip

    rows = {"dripper:cpu": 0.8123, "dripper:vllm": 0.8311, "trafilatura": 0.6358, "resiliparse": 0.6012}
    return {"rows": {row: {"all": stats(f1), "groups": {}} for row, f1 in rows.items()}}


def suite_scores(shift: float, step: int | None = None, stderr: float | None = TASK_STDERR) -> dict:
    """An ``dripper.eval.lm_suite`` summary of the paper13 suite, made by its own ``summarize`` from lm-eval-shaped
    results: task i scores 0.30 + shift + 0.004 i with standard error ``stderr`` ("N/A" when None)."""
    from dripper.eval.lm_suite import load_suite, summarize

    suite = load_suite("paper13")
    results = {
        "results": {
            t.task: {
                t.result_key: 0.3 + shift + 0.004 * i,
                f"{t.metric}_stderr,{t.filter}": "N/A" if stderr is None else stderr,
            }
            for i, t in enumerate(suite.tasks)
        },
        "n-samples": {t.task: {"original": 10, "effective": 10} for t in suite.tasks},
    }
    summary = summarize(suite, results)
    if step is not None:
        summary.update(step=step, tokens=step * TOKENS_PER_STEP, model=f"eval/iter_{step:07d}")
    return summary


def checkpoint_shift(extractor: FixtureExtractor, step: int) -> float:
    """Scores rise over training; the last checkpoint is the final model."""
    return extractor.shift - 0.01 * (CHECKPOINT_STEPS[-1] - step) / 10


def train_log_lines(index: int) -> list[str]:
    losses = [6.0 - 0.1 * step - 0.05 * index for step in range(CHECKPOINT_STEPS[-1])]
    lines = [
        json.dumps({"step": s + 1, "loss": loss, "tokens": (s + 1) * TOKENS_PER_STEP})
        for s, loss in enumerate(losses)
    ]
    lines.insert(
        5, json.dumps({"step": 8, "loss": 99.0, "tokens": 0})
    )  # re-logged after a resume: superseded
    return lines


RUN_DESCRIPTION = {
    "crawl": "CC-MAIN-2025-13",
    "warc_files": 4,
    "model": "tiny",
    "train_steps": CHECKPOINT_STEPS[-1],
    "eval_every": 10,
    "suite": "paper13",
    "tokenizer": REPORT_TOKENIZER,
}


def write_report_fixture(root: Path) -> Path:
    """The inputs of a three-extractor ablation under ``root`` and its manifest (returned).

    ``dripper`` and ``trafilatura`` share one refinement run, ``dripper-vllm`` has its own; each has a tokens
    summary, a training log, three checkpoint score files (listed newest first) and final scores.
    """
    import yaml

    root.mkdir(parents=True, exist_ok=True)
    shared = [e.refine_key for e in REPORT_EXTRACTORS if not e.own_refine]
    (root / "refine_summary.json").write_text(json.dumps(refine_summary(shared)))
    (root / "extraction.json").write_text(json.dumps(extraction_summary()))
    entries = []
    for index, extractor in enumerate(REPORT_EXTRACTORS):
        run = root / "runs" / extractor.name
        (run / "eval").mkdir(parents=True)
        (run / "train_log.jsonl").write_text("\n".join(train_log_lines(index)) + "\n")
        checkpoints = []
        for step in CHECKPOINT_STEPS:
            path = run / "eval" / f"iter_{step:07d}.json"
            scores = suite_scores(checkpoint_shift(extractor, step), step)
            # The early signal: loss on the held-out reference, falling over training, lower for better arms.
            scores.update(reference_loss=5.0 - step / 100 - 2 * extractor.shift, reference_loss_stderr=0.02)
            path.write_text(json.dumps(scores))
            checkpoints.append(f"runs/{extractor.name}/eval/{path.name}")
        (run / "scores.json").write_text((run / "eval" / f"iter_{CHECKPOINT_STEPS[-1]:07d}.json").read_text())
        documents, tokens = REPORT_CORPUS[extractor.refine_key][-1][1::2]
        (run / "tokens_summary.json").write_text(
            json.dumps(
                {
                    "tokenizer": REPORT_TOKENIZER,
                    "eos_token": "<|endoftext|>",
                    "parts": [],
                    "documents": documents,
                    "tokens": tokens,
                }
            )  # fmt: skip
        )
        entry = {
            "name": extractor.name,
            "labeler": extractor.labeler,
            "refine_extractor": extractor.refine_key,
            "tokens_summary": f"runs/{extractor.name}/tokens_summary.json",
            "train_run": f"runs/{extractor.name}",
            "scores": f"runs/{extractor.name}/scores.json",
            "checkpoint_scores": checkpoints[::-1],  # the report orders them by training tokens
        }
        if extractor.spec:
            entry["spec"] = extractor.spec
        if extractor.own_refine:
            own = run / "refine" / "_summary.json"
            own.parent.mkdir()
            own.write_text(json.dumps(refine_summary([extractor.refine_key])))
            entry["refine_summary"] = f"runs/{extractor.name}/refine/_summary.json"
        entries.append(entry)
    manifest = root / "ablation.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "title": "Dripper vs Trafilatura (fixture)",
                "run": RUN_DESCRIPTION,
                "refine_summaries": ["refine_summary.json"],
                "extraction": "extraction.json",
                "extractors": entries,
            },
            sort_keys=False,
        )
    )
    return manifest


@pytest.fixture
def report_manifest(tmp_path: Path) -> Path:
    """The fixture ablation's manifest (three extractors, every input present)."""
    return write_report_fixture(tmp_path / "ablation")
