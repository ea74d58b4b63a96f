"""S3 credentials for the stages: an Airflow connection (``aws_default``) turned into fsspec storage options.

DAG files never hold credentials: operators name a connection id, and this module reads the connection when
the task runs. The connection has the shape the Amazon provider uses (the provider itself is not needed):

- ``login`` / ``password``: the access key id and secret (or ``extra.aws_access_key_id`` /
  ``extra.aws_secret_access_key``); ``extra.aws_session_token`` for temporary credentials;
- ``extra.endpoint_url`` (or ``extra.service_config.s3.endpoint_url``, or the connection's ``host``): an
  S3-compatible store such as MinIO;
- ``extra.region_name``; ``extra.profile_name`` for a named botocore profile.

The result is what s3fs takes: ``key``, ``secret``, ``token``, ``profile``, ``endpoint_url`` (moved into
``client_kwargs`` by :mod:`dripper.io.storage`), ``client_kwargs.region_name``. Without the
connection, botocore's own chain applies (environment, instance profile). Common Crawl's public bucket is
always read anonymously, never with these credentials.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = [
    "DEFAULT_AWS_CONN_ID",
    "aws_environment",
    "input_storage_options",
    "storage_options_for",
    "storage_options_from_connection",
]

log = logging.getLogger(__name__)

DEFAULT_AWS_CONN_ID = "aws_default"
_COMMONCRAWL_PREFIXES = ("s3://commoncrawl/", "s3a://commoncrawl/", "s3n://commoncrawl/")


def storage_options_from_connection(connection: Any) -> dict[str, Any]:
    """fsspec/s3fs options from an Airflow ``Connection`` (anything with ``login``, ``password``, ``host``
    and ``extra_dejson``). Empty fields are left out."""
    extra = dict(getattr(connection, "extra_dejson", None) or {})
    options: dict[str, Any] = {}
    key = getattr(connection, "login", None) or extra.get("aws_access_key_id")
    secret = getattr(connection, "password", None) or extra.get("aws_secret_access_key")
    if key:
        options["key"] = key
    if secret:
        options["secret"] = secret
    if extra.get("aws_session_token"):
        options["token"] = extra["aws_session_token"]
    if extra.get("profile_name"):
        options["profile"] = extra["profile_name"]
    s3_service = (extra.get("service_config") or {}).get("s3") or {}
    endpoint = (
        extra.get("endpoint_url") or s3_service.get("endpoint_url") or getattr(connection, "host", None)
    )
    if endpoint:
        options["endpoint_url"] = endpoint
    if extra.get("region_name"):
        options["client_kwargs"] = {"region_name": extra["region_name"]}
    return options


#: s3fs option → the botocore environment variable that carries it to a process started elsewhere.
_AWS_VARIABLES = {
    "key": "AWS_ACCESS_KEY_ID",
    "secret": "AWS_SECRET_ACCESS_KEY",
    "token": "AWS_SESSION_TOKEN",
    "profile": "AWS_PROFILE",
    "endpoint_url": "AWS_ENDPOINT_URL_S3",
}


def aws_environment(storage_options: dict[str, Any] | None) -> dict[str, str]:
    """The same credentials as environment variables, for a process that only has botocore's chain
    (datatrove's Slurm jobs open their pickled pipeline with the environment's credentials: ``sbatch``
    passes the submitting process's environment on, so nothing is written to the job script)."""
    options = dict(storage_options or {})
    client = options.get("client_kwargs") or {}
    env = {name: str(options[key]) for key, name in _AWS_VARIABLES.items() if options.get(key)}
    if "AWS_ENDPOINT_URL_S3" not in env and client.get("endpoint_url"):
        env["AWS_ENDPOINT_URL_S3"] = str(client["endpoint_url"])
    if client.get("region_name"):
        env["AWS_DEFAULT_REGION"] = str(client["region_name"])
    return env


def _is_s3(path: str) -> bool:
    return str(path).split("://", 1)[0].lower() in ("s3", "s3a", "s3n") if "://" in str(path) else False


def storage_options_for(path: str, conn_id: str | None = DEFAULT_AWS_CONN_ID) -> dict[str, Any] | None:
    """Storage options for a run root: the connection's for ``s3://`` paths, ``None`` for anything else.

    A connection id that is not defined is not an error: the environment's credentials (botocore's chain,
    ``AWS_ENDPOINT_URL_S3``) apply, and a warning says so.
    """
    if not conn_id or not _is_s3(path):
        return None
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        connection = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        log.warning(
            "connection %r is not defined: %s is opened with the environment's AWS credentials", conn_id, path
        )
        return None
    return storage_options_from_connection(connection)


def input_storage_options(path: str, conn_id: str | None = DEFAULT_AWS_CONN_ID) -> dict[str, Any] | None:
    """Storage options for input WARC files: none for Common Crawl's public bucket (read anonymously, and
    a private endpoint must not apply to it), the connection's for other ``s3://`` inputs."""
    if str(path).lower().startswith(_COMMONCRAWL_PREFIXES) or str(path).lower() in ("s3", "https", "http"):
        return None
    return storage_options_for(path, conn_id)
