"""The report stage's config: the ablation's name and the labelled pages its extraction section scores."""

from __future__ import annotations

from pathlib import Path

from dripper.config.settings import StageConfig, setting

#: The bundled sample's labelled pages.
SAMPLE_PAGES = str(Path(__file__).resolve().parents[2] / "data" / "sample" / "pages.jsonl.gz")


class ReportStageConfig(StageConfig):
    """The ablation report over several extractors of a run root.

    Attributes:
        name: The ablation's folder under ``ablations/`` (empty: the run id in Airflow, the extractors'
            names on the command line).
        labelled_pages: Labelled page files for the extraction-quality section.
        labelled_limit: Labelled pages per file (empty: all).
        lm_pages_per_second: One GPU's LM pages/s on the average page, for each extractor's GPU-hours per
            million pages (default: the paper's figure for Dripper-0.6B on one A100).
    """

    stage = "report"
    form_prefix = "report_"
    form_section = "Pretraining and evaluation"

    name: str | None = setting(
        None,
        "The ablation's folder name under ablations/ (empty: the run id in Airflow, the extractors' names "
        "on the command line)",
        title="Ablation name",
        pattern=r"^[A-Za-z0-9._-]+$",
    )
    labelled_pages: list[str] = setting(
        [SAMPLE_PAGES],
        "Pages with ground truth for the report's extraction-quality section (JSONL(.gz), local paths)",
        title="Labelled pages",
        env="DRIPPER_BENCHMARK_DATA",
    )
    labelled_limit: int | None = setting(
        None,
        "Score at most this many labelled pages per file (empty: all)",
        title="Labelled pages per file",
        ge=1,
    )
    lm_pages_per_second: float = setting(
        3.08,
        "One GPU's LM pages/s on the average page, for the report's GPU-hours per million pages (default: "
        "the Dripper paper's 3.08 on one A100; put your own measured figure)",
        title="LM pages per second (one GPU)",
        gt=0,
    )
