"""What the stage operators share: the storage root and its connection, Dask arguments, running worker
processes from a task, and the XCom form of a stage report."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseOperator

from dripper.airflow.hooks import RunStorageHook
from dripper.airflow.storage import DEFAULT_AWS_CONN_ID

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
    """``stage_config``: a task's rendered values as its stage's typed config."""

    def stage_config(self, config: type[Any], **values: Any) -> Any:
        """``config`` (a stage config class) from this task's rendered values, validated by pydantic.

        A value the config refuses fails the task at once (a retry cannot fix it) with the message the CLI
        gives for the same value. ``None`` (an empty form field, rendered natively) leaves the config's
        default.
        """
        from airflow.sdk.exceptions import AirflowFailException

        from dripper.config.settings import StageConfigError

        given = {name: value for name, value in values.items() if value is not None}
        try:
            return config.parse(given)
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
    """A stage on Dask: the scheduler at ``dask_scheduler``, else a LocalCluster of ``workers`` processes
    started by the task (the stage config's ``workers``; ``0``: in the task's process)."""

    def __init__(self, *, dask_scheduler: Any = None, workers: Any = None, force: Any = False, **kwargs):
        super().__init__(**kwargs)
        self.dask_scheduler = dask_scheduler
        self.workers = workers
        self.force = force
