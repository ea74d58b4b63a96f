"""Where a platform run keeps its files, and reading/writing the small JSON files the DAGs keep there.

:class:`RunStorageHook` is the operators' interface to the storage root (a local folder or ``s3://…``), with
credentials from an Airflow connection (:mod:`dripper.airflow.storage`). Its layout::

    {storage_root}/crawls/_known_crawls.json                       crawls seen by cc_snapshot_refresh
    {storage_root}/crawls/{crawl_id}/warc_manifest.json.gz          a crawl's WARC listing when it was found
    {storage_root}/runs/{crawl_id}/{selection}/                     one WARC selection ("n4-seed0")
        _selection.json                                             the selected files and their shard plan
        simplified/ , _run_summary.json                             the simplify stage
        extractors/{extractor}/                                     one extractor's corpus from that selection
            extracted/ corpus/ tokens/ refine/                      extract, refine, tokenize
            _run_summary.json , _build_summary.json                 stage roll-up, the whole build
    {storage_root}/ablations/{crawl_id}/{selection}/{name}/         pretrain/, eval/, report/ per ablation
    {storage_root}/extraction_benchmark/{name}/                     summary.json, report.txt, pages.jsonl

Names are derived from the parameters that change the data, so a rerun with the same parameters resumes the
same folders (finished shards are skipped) and different parameters never mix.
"""

from __future__ import annotations

import posixpath
from typing import Any

from dripper.airflow.storage import DEFAULT_AWS_CONN_ID, storage_options_for
from dripper.config.extractor import slug

__all__ = ["RunStorageHook", "slug"]


def __getattr__(name: str) -> Any:
    if name == "selection_key":  # a selection's folder name: dripper.stages.selection's, loaded on use
        from dripper.stages.selection import selection_key

        return selection_key
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RunStorageHook:
    """The storage root of the platform's runs, opened with the connection ``aws_conn_id`` (S3 only).

    Args:
        storage_root: A local folder (absolute) or an fsspec URL (``s3://bucket/prefix``).
        aws_conn_id: The Airflow connection with S3 credentials; ignored for local roots.
    """

    def __init__(self, storage_root: str, aws_conn_id: str | None = DEFAULT_AWS_CONN_ID) -> None:
        text = str(storage_root).rstrip("/")
        if "://" not in text and not text.startswith("/"):
            raise ValueError(
                f"storage_root {storage_root!r} must be an absolute path or a URL (s3://bucket/prefix): "
                "task processes do not share a working directory"
            )
        self.storage_root = text
        self.aws_conn_id = aws_conn_id
        self._options: dict[str, Any] | None = None
        self._options_loaded = False

    @property
    def storage_options(self) -> dict[str, Any] | None:
        """fsspec options of the root (read from the connection once)."""
        if not self._options_loaded:
            self._options = storage_options_for(self.storage_root, self.aws_conn_id)
            self._options_loaded = True
        return self._options

    # -- layout ----------------------------------------------------------------------------------------

    def path(self, *parts: str) -> str:
        from dripper.io.storage import join_path

        return join_path(self.storage_root, *parts)

    def known_crawls_path(self) -> str:
        return self.path("crawls", "_known_crawls.json")

    def crawl_manifest_path(self, crawl_id: str) -> str:
        return self.path("crawls", slug(crawl_id, 80), "warc_manifest.json.gz")

    def selection_root(self, crawl_id: str, selection: str) -> str:
        return self.path("runs", slug(crawl_id, 80), selection)

    @staticmethod
    def extractor_root(selection_root: str, extractor: str) -> str:
        """``{selection_root}/extractors/{extractor}`` (``dripper.layout``, as the CLI writes it)."""
        from dripper.layout import RunLayout

        return RunLayout(selection_root).extractor(extractor).root

    # -- files -----------------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        from dripper.io.storage import filesystem_for

        fs, fs_path = filesystem_for(path, self.storage_options)
        fs.invalidate_cache(posixpath.dirname(fs_path))
        return fs.exists(fs_path)

    def read_json(self, path: str, default: Any = None) -> Any:
        """The JSON document at ``path`` (gzip for ``.gz``), or ``default`` (:mod:`dripper.io.json_files`)."""
        from dripper.io.json_files import read_json

        return read_json(path, self.storage_options, default)

    def write_json(self, path: str, document: Any) -> str:
        """Write ``document`` as JSON in one step (:func:`dripper.io.json_files.write_json`)."""
        from dripper.io.json_files import write_json

        return write_json(path, document, self.storage_options)
