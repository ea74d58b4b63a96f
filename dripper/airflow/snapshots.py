"""Common Crawl snapshots: find new crawls and write their WARC manifests (``cc_snapshot_refresh``), and
select the WARC files of a corpus build (``corpus_build``'s first task)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from dripper.airflow.base import (
    SELECTION_FILE,
    SELECTION_XCOM_KEY,
    StorageOperator,
    utc_now,
)
from dripper.airflow.storage import input_storage_options
from dripper.config.simplify import SimplifyStageConfig

# -- cc_snapshot_refresh -----------------------------------------------------------------------------------


class FindNewCrawlsOperator(StorageOperator):
    """List the crawls of ``crawl_index`` (a ``collinfo.json`` URL or path) and find those not in the
    known-crawls state under ``storage_root``.

    Returns the crawl ids to publish (what the manifest task is mapped over): at most ``max_new_crawls``
    of the new ones, newest first. Pushes ``{"listed": [...], "new": [...], "publish": [...]}`` as XCom key
    ``crawls``. The other new crawls count as known once the run succeeds: a first run starts one build,
    not one per crawl in Common Crawl's history.
    """

    template_fields: Sequence[str] = ("crawl_index", "storage_root", "aws_conn_id", "max_new_crawls")

    def __init__(self, *, crawl_index: str, max_new_crawls: int = 1, **kwargs):
        super().__init__(**kwargs)
        self.crawl_index = crawl_index
        self.max_new_crawls = max_new_crawls

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper.io.snapshots import list_crawls
        from dripper.stages.selection import new_crawls

        hook = self.hook()
        crawls = list_crawls(self.crawl_index, input_storage_options(self.crawl_index, self.aws_conn_id))
        known = (hook.read_json(hook.known_crawls_path(), {}) or {}).get("crawls", {})
        listed = [crawl.id for crawl in crawls]
        new, publish = new_crawls(listed, known, self.max_new_crawls)
        self.log.info(
            "%d crawls listed in %s, %d known before, %d new; publishing %s",
            len(listed),
            self.crawl_index,
            len(known),
            len(new),
            publish or "none",
        )
        context["ti"].xcom_push(key="crawls", value={"listed": listed, "new": new, "publish": publish})
        return publish


class WriteCrawlManifestOperator(StorageOperator):
    """Write a crawl's WARC listing to ``{storage_root}/crawls/{crawl_id}/warc_manifest.json.gz`` and emit
    the manifest asset (event extra: ``crawl_id``, ``crawl_base``, ``manifest``, ``warc_files``).

    The manifest keeps the listing's relative paths and the base, so a build selects from it exactly as
    from ``snapshot:{crawl_id}@{crawl_base}``.
    """

    template_fields: Sequence[str] = ("crawl_id", "crawl_base", "storage_root", "aws_conn_id")

    def __init__(self, *, crawl_id: str, crawl_base: str = "s3", **kwargs):
        super().__init__(**kwargs)
        self.crawl_id = crawl_id
        self.crawl_base = crawl_base

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper.io.snapshots import read_warc_paths, resolve_base

        hook = self.hook()
        base = resolve_base(self.crawl_base)
        paths = read_warc_paths(base, self.crawl_id, input_storage_options(base, self.aws_conn_id))
        manifest_path = hook.crawl_manifest_path(self.crawl_id)
        hook.write_json(
            manifest_path,
            {
                "crawl_id": self.crawl_id,
                "crawl_base": base,
                "warc_files": len(paths),
                "paths": paths,
                "written_at": utc_now(),
            },
        )
        extra = {
            "crawl_id": self.crawl_id,
            "crawl_base": base,
            "manifest": manifest_path,
            "warc_files": len(paths),
        }
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = extra
        self.log.info("%s: %d WARC files listed in %s", self.crawl_id, len(paths), manifest_path)
        return extra


class RecordKnownCrawlsOperator(StorageOperator):
    """Add ``listed`` crawls to the known-crawls state (``published`` ones with the run that published
    them), so the next refresh only looks at crawls that appear later."""

    template_fields: Sequence[str] = ("listed", "published", "storage_root", "aws_conn_id")

    def __init__(self, *, listed: Any, published: Any = (), **kwargs):
        super().__init__(**kwargs)
        self.listed = listed
        self.published = published

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper.stages.selection import record_known_crawls

        hook = self.hook()
        path = hook.known_crawls_path()
        state, added = record_known_crawls(hook.read_json(path, {}), self.listed, self.published,
                                           context["run_id"], hook.crawl_manifest_path, utc_now())  # fmt: skip
        hook.write_json(path, state)
        return {"state": path, "known": len(state["crawls"]), "added": added}


# -- corpus_build ------------------------------------------------------------------------------------------


def _triggering_crawl(context: Any) -> dict[str, Any] | None:
    """The newest manifest event (``crawl_id`` in its extra) that triggered this run, if any."""
    events = context.get("triggering_asset_events") or {}
    found = []
    for asset in events:
        for event in events[asset]:
            extra = dict(getattr(event, "extra", None) or {})
            if extra.get("crawl_id"):
                found.append((getattr(event, "timestamp", None) or datetime.min.replace(tzinfo=UTC), extra))
    if not found:
        return None
    found.sort(key=lambda item: item[0])
    return found[-1][1] | {"events": len(found)}


class SelectWarcsOperator(StorageOperator):
    """Pick a crawl's WARC files deterministically and plan the simplify shards and their batches.

    The crawl is ``crawl_id`` under ``crawl_base``, or, for a run started by a manifest asset event, the
    event's crawl and base. The file list comes from the crawl's manifest under the storage root when there
    is one, else from the crawl's listing (``crawl-data/{crawl_id}/warc.paths.gz`` under the base). Writes
    ``{selection_root}/_selection.json`` (the files and the shard plan). Returns the batches, one per
    simplify task (``[{"batch": i, "first_shard": s, "shards": n, "selection_root": …}, ...]``: what the
    simplify task is mapped over), and pushes XCom key ``selection``::

        {"crawl_id", "crawl_base", "selection", "selection_root", "warc_files", "shards", "batches"}

    ``config``: the simplify stage's (:class:`~dripper.config.simplify.SimplifyStageConfig`), of which the
    selection reads ``warc_count`` or ``warc_fraction``, ``seed`` and ``warcs_per_shard``. A selection root
    planned from other files is refused, never mixed.
    """

    template_fields: Sequence[str] = (
        "crawl_id", "crawl_base", "config", "warcs_per_task", "storage_root", "aws_conn_id",
    )  # fmt: skip
    config_class = SimplifyStageConfig

    def __init__(
        self,
        *,
        crawl_id: str,
        crawl_base: str = "s3",
        config: Any = None,
        warcs_per_task: Any = 2,
        from_asset_event: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.crawl_id = crawl_id
        self.crawl_base = crawl_base
        self.config = self.config_values(config)
        self.warcs_per_task = warcs_per_task
        self.from_asset_event = from_asset_event

    def _crawl(self, context: Any) -> tuple[str, str]:
        crawl_id, crawl_base = str(self.crawl_id), str(self.crawl_base)
        if self.from_asset_event:
            event = _triggering_crawl(context)
            if event is not None:
                if event["events"] > 1:
                    self.log.warning(
                        "%d new-crawl events triggered this run; building the newest, %s (trigger the "
                        "others from the form)",
                        event["events"],
                        event["crawl_id"],
                    )
                crawl_id, crawl_base = event["crawl_id"], event.get("crawl_base") or crawl_base
                self.log.info("crawl %s from the asset event (manifest %s)", crawl_id, event.get("manifest"))
        return crawl_id, crawl_base

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from dripper.io.snapshots import read_warc_paths, resolve_base
        from dripper.stages.selection import WholeCrawlNotAsked, plan_selection

        config = self.stage_config()  # a bad value fails here, before any listing is read
        hook = self.hook()
        crawl_id, crawl_base = self._crawl(context)
        base = resolve_base(crawl_base)
        # The listing as the refresh recorded it, else the crawl's own (same relative paths either way).
        manifest = hook.read_json(hook.crawl_manifest_path(crawl_id))
        if manifest is not None:
            entries = manifest["paths"]
            self.log.info(
                "%s: %d WARC files from %s", crawl_id, len(entries), hook.crawl_manifest_path(crawl_id)
            )
        else:
            entries = read_warc_paths(base, crawl_id, input_storage_options(base, self.aws_conn_id))
            self.log.info("%s: %d WARC files listed under %s", crawl_id, len(entries), base)
        try:
            selected = plan_selection(
                crawl_id, base, entries, config, warcs_per_task=int(self.warcs_per_task)
            )
        except WholeCrawlNotAsked as error:
            raise AirflowFailException(str(error)) from None  # a retry cannot fix it
        plan, root = selected["plan"], hook.selection_root(crawl_id, selected["key"])
        files, shards = plan["warc_files"], plan["shards"]
        batches = [{**batch, "selection_root": root} for batch in selected["batches"]]
        path = f"{root}/{SELECTION_FILE}"
        previous = hook.read_json(path)
        if previous is not None and previous.get("shards") != shards:
            raise ValueError(
                f"{root} was planned from other WARC files ({previous.get('crawl_base')}); its shards would "
                "mix two selections. Use the same crawl location, or another storage root"
            )
        hook.write_json(path, {**plan, "planned_at": (previous or {}).get("planned_at") or utc_now()})
        self.log.info(
            "%d WARC files → %d shards in %d simplify tasks → %s", len(files), len(shards), len(batches), root
        )
        summary = {
            "crawl_id": crawl_id,
            "crawl_base": base,
            "selection": selected["key"],
            "selection_root": root,
            "warc_files": len(files),
            "shards": len(shards),
            "batches": len(batches),
        }
        context["ti"].xcom_push(key=SELECTION_XCOM_KEY, value=summary)
        return batches
