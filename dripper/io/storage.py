"""A thin fsspec layer: one way to open local paths, ``s3://`` and ``https://`` alike.

- Local paths (and ``file://``) need nothing beyond fsspec.
- ``s3://commoncrawl/…`` is read anonymously (Common Crawl's public bucket) unless credentials are given.
- Other ``s3://`` buckets use s3fs with ``endpoint_url``/``key``/``secret``/``token`` from
  ``storage_options``, else from the environment (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` for the
  endpoint; botocore's usual ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/profiles for credentials).
- ``https://`` (e.g. ``https://data.commoncrawl.org/``) uses fsspec's HTTP filesystem (needs aiohttp).

Reads stream: files are opened, not downloaded whole.
"""

from __future__ import annotations

import os
import posixpath
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

__all__ = [
    "COMMONCRAWL_BUCKET",
    "filesystem_for",
    "is_local",
    "join_path",
    "open_url",
    "protocol_of",
    "publish_bytes",
    "require_fsspec",
]

COMMONCRAWL_BUCKET = "commoncrawl"
_INSTALL_HINT = (
    "install the data-plane extra: pip install 'dripper-platform[dataplane]' (or: pip install {pkg})"
)


def require_fsspec() -> Any:
    """Import and return :mod:`fsspec`, or raise an ``ImportError`` that says how to install it."""
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"fsspec is needed to open remote or local data paths; {_INSTALL_HINT.format(pkg='fsspec')}"
        ) from exc
    return fsspec


def protocol_of(path: str | os.PathLike[str]) -> str:
    """``"s3"``, ``"https"``, ``"file"``, … for a path or URL (plain paths are ``"file"``)."""
    text = os.fspath(path)
    if "://" not in text:
        return "file"
    protocol = text.split("://", 1)[0].lower()
    return {"s3a": "s3", "s3n": "s3", "local": "file"}.get(protocol, protocol)


def is_local(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is on the local filesystem."""
    return protocol_of(path) == "file"


def join_path(base: str | os.PathLike[str], *parts: str) -> str:
    """Join URL or path parts with ``/`` (``join_path("s3://b/run", "pages", "part-00000.parquet")``)."""
    text = os.fspath(base)
    for part in parts:
        part = part.lstrip("/")
        text = part if not text else (text if text.endswith("/") else text + "/") + part
    return text


def _s3_options(path: str, storage_options: dict[str, Any]) -> dict[str, Any]:
    options = dict(storage_options)
    bucket = path.split("://", 1)[1].split("/", 1)[0]
    has_credentials = any(key in options for key in ("key", "secret", "token", "profile", "anon"))
    if bucket == COMMONCRAWL_BUCKET and not has_credentials:
        # The public dataset bucket is readable without credentials; signing would need some.
        options["anon"] = True
    endpoint = options.pop("endpoint_url", None)
    if endpoint is None and bucket != COMMONCRAWL_BUCKET:
        # An endpoint from the environment points at the user's own store, never at the public bucket;
        # an explicit one (a mirror, a test server) applies to any bucket.
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        client_kwargs = dict(options.get("client_kwargs") or {})
        client_kwargs.setdefault("endpoint_url", endpoint)
        options["client_kwargs"] = client_kwargs
    return options


def filesystem_for(
    path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> tuple[AbstractFileSystem, str]:
    """The fsspec filesystem for ``path`` and the path as that filesystem names it.

    Args:
        path: A local path, ``file://``, ``s3://bucket/key``, ``https://host/path``, or any fsspec URL.
        storage_options: Passed to the filesystem (``endpoint_url``, ``key``, ``secret``, ``anon``, …).

    Returns:
        ``(fs, fs_path)``; ``fs_path`` has no protocol for object stores and is absolute for local paths.
    """
    fsspec = require_fsspec()
    text = os.fspath(path)
    protocol = protocol_of(text)
    options = dict(storage_options or {})
    if protocol == "file":
        text = os.path.abspath(os.path.expanduser(text.split("://", 1)[1] if "://" in text else text))
    elif protocol == "s3":
        options = _s3_options(text, options)
        text = "s3://" + text.split("://", 1)[1]
        _require_package("s3fs", "s3://")
    elif protocol in ("http", "https"):
        _require_package("aiohttp", f"{protocol}://")
    fs, fs_path = fsspec.core.url_to_fs(text, **options)
    return fs, fs_path


def publish_bytes(fs: Any, fs_path: str, data: bytes, local: bool, tmp_path: str | None = None) -> None:
    """Write ``data`` to ``fs_path`` so that a reader sees the old file or the whole new one.

    Local filesystems: written to ``tmp_path`` (default: beside the target) and renamed into place; object
    stores: one PUT under the final name (an upload becomes visible only when complete).
    """
    if not local:
        with fs.open(fs_path, "wb") as f:
            f.write(data)
        return
    import uuid

    tmp = tmp_path or f"{fs_path}.{uuid.uuid4().hex}.tmp"
    with fs.open(tmp, "wb") as f:
        f.write(data)
    fs.mv(tmp, fs_path)


def _require_package(module: str, what: str) -> None:
    try:
        __import__(module)
    except ImportError as exc:
        raise ImportError(
            f"{module} is needed to open {what} paths; {_INSTALL_HINT.format(pkg=module)}"
        ) from exc


def open_url(
    path: str | os.PathLike[str],
    mode: str = "rb",
    storage_options: dict[str, Any] | None = None,
    **open_kwargs: Any,
) -> IO[Any]:
    """Open ``path`` (any protocol :func:`filesystem_for` knows) as a streaming file object.

    Use it as a context manager. Extra keyword arguments go to ``fs.open`` (``block_size``,
    ``cache_type``, ``compression``, ``encoding``, …). Nothing is downloaded up front: object-store and
    HTTP files fetch ranges as they are read.
    """
    fs, fs_path = filesystem_for(path, storage_options)
    if "w" in mode and is_local(path):
        fs.makedirs(posixpath.dirname(fs_path) or ".", exist_ok=True)
    return fs.open(fs_path, mode, **open_kwargs)
