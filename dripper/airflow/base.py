"""What the stage operators share: the stage config, the storage root and its connection, Dask arguments,
running worker processes from a task, and the XCom form of a stage report."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, ClassVar

from airflow.sdk import BaseOperator

from dripper.airflow.hooks import RunStorageHook
from dripper.airflow.storage import DEFAULT_AWS_CONN_ID
from dripper.config.settings import StageConfig, StageConfigError

__all__ = [
    "DaskStageOperator",
    "StageConfigMixin",
    "StorageOperator",
    "spawn_without_airflow_main",
    "stage_report_dict",
    "utc_now",
]

SELECTION_FILE = "_selection.json"
#: XCom key of the select task's summary (its return value is the list of batches).
SELECTION_XCOM_KEY = "selection"
BUILD_SUMMARY_FILE = "_build_summary.json"


@contextmanager
def spawn_without_airflow_main() -> Iterator[None]:
    """Let a stage start worker processes (Dask's LocalCluster, datatrove's local executor) from a task.

    multiprocessing's ``spawn`` re-imports the parent's ``__main__`` in every child: in a task that is the
    ``airflow`` command, whose import fails there (task processes get no metadata database). The children
    need only the stage's own modules, so ``__main__`` is kept from them while the stage runs.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__") if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.update(saved)
        if "__spec__" not in saved:
            main.__dict__.pop("__spec__", None)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def stage_report_dict(report: Any) -> dict[str, Any]:
    """The XCom form of a ``StageReport`` (:func:`dripper.runs.corpus.stage_report_dict`)."""
    from dripper.runs.corpus import stage_report_dict

    return stage_report_dict(report)


class StageConfigMixin:
    """A task that runs one stage takes that stage's config as one argument, ``config``: a
    :class:`~dripper.config.settings.StageConfig`, or its values by field name, as a DAG renders them from its
    form (:meth:`~dripper.config.settings.StageConfig.form_templates`). ``config_class`` names the stage's
    config; :meth:`stage_config` validates in the task."""

    #: The stage's config class (``dripper.config``).
    config_class: ClassVar[type[StageConfig]]

    @staticmethod
    def config_values(config: Any) -> Any:
        """What ``config`` holds as a template field: a config's values as JSON (the fields it was given),
        anything else as given (a mapping of values or templates, a template, an XCom reference)."""
        if isinstance(config, StageConfig):
            return config.model_dump(mode="json", exclude_unset=True)
        return config

    def stage_config(self, **values: Any) -> StageConfig:
        """The stage's config from the rendered ``config`` and ``values`` (the task's own), validated.

        A value the config refuses fails the task at once (a retry cannot fix it) with the message the CLI
        gives for the same value. ``None`` (an empty form field, rendered natively) leaves the config's
        default.
        """
        from airflow.sdk.exceptions import AirflowFailException

        config = getattr(self, "config", None) or {}
        if not isinstance(config, Mapping):
            raise AirflowFailException(
                f"{self.config_class.stage} config: expected a mapping of field: value, got {config!r}"
            )
        given = {name: value for name, value in {**config, **values}.items() if value is not None}
        try:
            return self.config_class.parse(given)
        except StageConfigError as error:
            raise AirflowFailException(str(error)) from None


class StorageOperator(StageConfigMixin, BaseOperator):
    """Base of the operators that read or write under a storage root with ``aws_conn_id``'s credentials."""

    ui_color = "#e8f1fb"

    def __init__(self, *, storage_root: str | None = None, aws_conn_id: str = DEFAULT_AWS_CONN_ID, **kwargs):
        super().__init__(**kwargs)
        self.storage_root = storage_root
        self.aws_conn_id = aws_conn_id

    def hook(self, root: str | None = None) -> RunStorageHook:
        return RunStorageHook(root or self.storage_root, self.aws_conn_id)


class DaskStageOperator(StorageOperator):
    """A stage on Dask: the scheduler at ``dask_scheduler``, else a LocalCluster of the stage config's
    ``workers`` processes started by the task (``0``: in the task's process)."""

    def __init__(self, *, config: Any = None, dask_scheduler: Any = None, force: Any = False, **kwargs):
        super().__init__(**kwargs)
        self.config = self.config_values(config)
        self.dask_scheduler = dask_scheduler
        self.force = force
