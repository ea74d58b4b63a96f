"""The evaluate stage's config: the benchmark suite and where it runs."""

from __future__ import annotations

from dripper.config.report import SAMPLE_PAGES
from dripper.config.settings import StageConfig, setting


class EvaluateStageConfig(StageConfig):
    """Every exported checkpoint scored on a benchmark suite (lm-eval).

    Attributes:
        suite: Suite name in ``dripper/eval/suites`` or a suite file.
        device: Evaluation device.
        limit: Documents per benchmark (empty: all).
        fixtures: A fixture manifest: local files standing in for Hub datasets.
        arguments: More ``python -m dripper.eval.lm_suite`` flags (Airflow).
        reference_text: A held-out text no arm trains on, for each checkpoint's reference loss (the early
            signal); empty: the ground truth of ``reference_pages`` not in the run's WARC files.
        reference_pages: Labelled pages whose ground truth is the default reference (by URL and content
            hash, a page in the run's WARC files is left out).
    """

    stage = "evaluate"
    form_prefix = "eval_"
    form_section = "Pretraining and evaluation"

    suite: str = setting(
        "local",
        "Suite name in dripper/eval/suites or a suite file: local (embedded, offline) or paper13 (the paper's 13 "
        "benchmarks; their data must be in the Hugging Face cache, checked before any WARC is read)",
        title="Benchmark suite",
        env="DRIPPER_EVAL_SUITE",
        min_length=1,
    )
    device: str = setting(
        "cpu", "Evaluation device (cpu, cuda, cuda:1…)", title="Evaluation device", min_length=1
    )
    limit: int | None = setting(
        None, "Score at most this many documents per task (empty: all)", title="Documents per benchmark", ge=1
    )
    fixtures: str | None = setting(
        None, "Fixture manifest: local files standing in for Hub datasets", title="Benchmark fixtures"
    )
    arguments: list[str] = setting(
        [],
        'More `python -m dripper.eval.lm_suite` flags, e.g. ["--batch-size", "8"]',
        title="More evaluation options",
        cli=False,
    )
    reference_text: str | None = setting(
        None,
        "Held-out text no arm trains on (plain text, or JSONL with a text field): each checkpoint's loss on it "
        "is the report's early signal (empty: the ground truth of the reference pages not in the run's WARCs)",
        title="Reference text",
    )
    reference_pages: list[str] = setting(
        [SAMPLE_PAGES],
        "Labelled pages (JSONL(.gz)) whose ground truth is the default reference text; a page whose URL or "
        "HTML hash is in the run's WARC files is left out",
        title="Reference pages",
    )
