"""The small JSON files of a run (selections, crawl manifests, summaries), local or on an object store.

:func:`write_json` writes in one step: a temporary name renamed into place on local disks (object stores
publish an upload only when it is complete), so a reader never sees half a file. ``.gz`` paths are gzip.
Only the standard library is imported at module load.
"""

from __future__ import annotations

import gzip
import json
import posixpath
from typing import Any

__all__ = ["read_json", "write_json"]


def read_json(path: str, storage_options: dict[str, Any] | None = None, default: Any = None) -> Any:
    """The JSON document at ``path`` (gzip when it ends in ``.gz``), or ``default`` when absent."""
    from dripper.io.storage import open_url

    try:
        with open_url(path, "rb", storage_options) as f:
            data = f.read()
    except FileNotFoundError:
        return default
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    return json.loads(data)


def write_json(path: str, document: Any, storage_options: dict[str, Any] | None = None) -> str:
    """Write ``document`` as JSON (sorted keys, gzip for ``.gz``) in one step; returns ``path``."""
    from dripper.io.storage import filesystem_for, is_local, publish_bytes

    data = (json.dumps(document, indent=1, sort_keys=True, default=str) + "\n").encode()
    if path.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    fs, fs_path = filesystem_for(path, storage_options)
    fs.makedirs(posixpath.dirname(fs_path), exist_ok=True)
    publish_bytes(fs, fs_path, data, is_local(path))
    return path
