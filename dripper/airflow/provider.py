"""The Airflow provider entry point: what ``airflow providers list`` shows for this distribution.

Registered in ``pyproject.toml`` under the ``apache_airflow_provider`` entry-point group, as provider
packages are. Importing this module imports nothing of Airflow's, so listing providers stays cheap.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["DISTRIBUTION", "get_provider_info"]

DISTRIBUTION = "dripper-platform"
"""The distribution's name: Airflow checks that a provider's ``package-name`` is the one it came in."""


def get_provider_info() -> dict:
    """The provider's description in Airflow's provider-info format."""
    try:
        installed = version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a source tree that was never installed
        installed = "0.0.0"
    return {
        "package-name": DISTRIBUTION,
        "name": "Dripper",
        "description": "Common Crawl to LLM pretraining corpora with an LM-based main-content extractor: "
        "the stage operators, the run-storage hook and the Slurm trigger.",
        "versions": [installed],
        "integrations": [
            {
                "integration-name": "Dripper",
                "external-doc-url": "https://arxiv.org/abs/2511.23119",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "Dripper",
                "python-modules": [
                    "dripper.airflow.stages",
                    "dripper.airflow.snapshots",
                    "dripper.airflow.corpus",
                    "dripper.airflow.jobs",
                ],
            }
        ],
        "hooks": [{"integration-name": "Dripper", "python-modules": ["dripper.airflow.hooks"]}],
        "triggers": [{"integration-name": "Dripper", "python-modules": ["dripper.airflow.slurm"]}],
    }
