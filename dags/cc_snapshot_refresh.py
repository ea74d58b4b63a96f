"""cc_snapshot_refresh: find Common Crawl crawls not seen before and start a corpus build for each.

Weekly by default. Lists the crawls of the crawl index (``collinfo.json``: Common Crawl's in production,
``data/sample/collinfo.json`` locally), compares them with the crawls recorded under
``{storage_root}/crawls/_known_crawls.json``, writes each new crawl's WARC listing to
``{storage_root}/crawls/{crawl}/warc_manifest.json.gz`` and emits the ``cc_crawl_manifest`` asset, which
starts ``corpus_build`` for that crawl. At most ``max_new_crawls`` crawls are published per run (newest
first); the others count as known, so a first run does not start a build for every crawl since 2008.

    find_new_crawls → write_manifest (mapped over the new crawls) → record_known_crawls
"""

from __future__ import annotations

from datetime import datetime

from _common import CRAWL_MANIFEST_ASSET, DEFAULT_ARGS, STORAGE, env, templated, xcom
from _params import cc_snapshot_refresh_params
from airflow.sdk import DAG

from dripper.airflow.stages import (
    FindNewCrawlsOperator,
    RecordKnownCrawlsOperator,
    WriteCrawlManifestOperator,
)

with DAG(
    dag_id="cc_snapshot_refresh",
    description="Find new Common Crawl crawls, write their WARC manifests, start their corpus builds",
    schedule=env("DRIPPER_REFRESH_SCHEDULE", "@weekly"),
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=cc_snapshot_refresh_params(),
    render_template_as_native_obj=True,
    tags=["dripper", "common-crawl"],
    doc_md=__doc__,
) as dag:
    find = FindNewCrawlsOperator(
        task_id="find_new_crawls",
        **templated("crawl_index", "max_new_crawls"),
        **STORAGE,
    )
    manifests = WriteCrawlManifestOperator.partial(
        task_id="write_manifest",
        **templated("crawl_base"),
        outlets=[CRAWL_MANIFEST_ASSET],
        **STORAGE,
    ).expand(crawl_id=find.output)
    record = RecordKnownCrawlsOperator(
        task_id="record_known_crawls",
        listed=xcom("find_new_crawls", "listed", key="crawls"),
        published=xcom("find_new_crawls", "publish", key="crawls"),
        trigger_rule="none_failed",
        **STORAGE,
    )
    find >> manifests >> record
