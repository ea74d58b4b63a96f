"""S3 credentials come from the Airflow connection ``aws_default``, as fsspec storage options; checked
against a real S3 server (moto on 127.0.0.1)."""

from __future__ import annotations

import json
import uuid

import pytest

from dripper.airflow.hooks import RunStorageHook
from dripper.airflow.storage import (
    input_storage_options,
    storage_options_for,
    storage_options_from_connection,
)


def _connection(**fields):
    from airflow.sdk import Connection

    return Connection(conn_id="aws_default", conn_type="aws", **fields)


def test_options_from_a_connection_with_keys_endpoint_and_region():
    connection = _connection(
        login="AKIDEXAMPLE",
        password="wJalrXUtnFEMI/K7MDENG",
        extra=json.dumps({"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"}),
    )
    assert storage_options_from_connection(connection) == {
        "key": "AKIDEXAMPLE",
        "secret": "wJalrXUtnFEMI/K7MDENG",
        "endpoint_url": "http://127.0.0.1:9000",
        "client_kwargs": {"region_name": "eu-west-1"},
    }


def test_options_from_the_amazon_providers_other_spellings():
    connection = _connection(
        extra=json.dumps(
            {
                "aws_access_key_id": "AKID",
                "aws_secret_access_key": "SECRET",
                "aws_session_token": "TOKEN",
                "service_config": {"s3": {"endpoint_url": "https://minio.internal:9000"}},
                "profile_name": "research",
            }
        )
    )
    assert storage_options_from_connection(connection) == {
        "key": "AKID",
        "secret": "SECRET",
        "token": "TOKEN",
        "profile": "research",
        "endpoint_url": "https://minio.internal:9000",
    }
    assert storage_options_from_connection(_connection(host="http://store:9000")) == {
        "endpoint_url": "http://store:9000"
    }
    assert storage_options_from_connection(_connection()) == {}


def test_connection_is_read_for_s3_roots_only(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DEFAULT",
        json.dumps(
            {"conn_type": "aws", "login": "AKID", "password": "SECRET", "extra": {"region_name": "eu-west-1"}}
        ),
    )
    assert storage_options_for("s3://bucket/runs") == {
        "key": "AKID",
        "secret": "SECRET",
        "client_kwargs": {"region_name": "eu-west-1"},
    }
    assert storage_options_for("/data/runs") is None
    assert storage_options_for("https://data.commoncrawl.org/") is None
    assert storage_options_for("s3://bucket/runs", conn_id=None) is None
    # Common Crawl's public bucket is read anonymously: the store's credentials and endpoint stay out of it
    assert input_storage_options("s3://commoncrawl/crawl-data/CC-MAIN-2025-13/x.warc.gz") is None
    assert input_storage_options("s3") is None
    assert input_storage_options("s3://my-mirror/crawl-data/x.warc.gz")["key"] == "AKID"


def test_a_missing_connection_falls_back_to_the_environment(monkeypatch, caplog):
    monkeypatch.delenv("AIRFLOW_CONN_AWS_DEFAULT", raising=False)
    assert storage_options_for("s3://bucket/runs", conn_id="no_such_connection") is None


def test_storage_root_must_be_absolute_or_a_url():
    with pytest.raises(ValueError, match="absolute path or a URL"):
        RunStorageHook("out/runs")
    assert RunStorageHook("s3://bucket/runs/").storage_root == "s3://bucket/runs"


def test_state_files_on_s3_with_the_connections_credentials(moto_server, s3_filesystem, monkeypatch):
    """The refresh DAG's state and manifests go to an s3:// storage root with aws_default's credentials
    (the session's moto server, tests/conftest.py)."""
    from dripper.airflow.stages import FindNewCrawlsOperator, WriteCrawlManifestOperator
    from tests.airflow.test_stages import FakeContext
    from tests.dags import SAMPLE

    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    extra = {"endpoint_url": moto_server, "region_name": "eu-west-1"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DEFAULT",
        json.dumps({"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra}),
    )
    bucket = f"dripper-airflow-{uuid.uuid4().hex[:8]}"
    fs = s3_filesystem
    fs.mkdir(bucket, region_name="eu-west-1")
    root = f"s3://{bucket}/runs"

    hook = RunStorageHook(root)
    hook.write_json(f"{root}/probe.json.gz", {"hello": "s3"})
    assert hook.read_json(f"{root}/probe.json.gz") == {"hello": "s3"}
    assert hook.read_json(f"{root}/absent.json", "default") == "default"

    context = FakeContext()
    found = FindNewCrawlsOperator(
        task_id="find", crawl_index=str(SAMPLE / "collinfo.json"), storage_root=root
    ).execute(context)
    assert found == ["CC-MAIN-SAMPLE"]
    WriteCrawlManifestOperator(
        task_id="manifest", crawl_id="CC-MAIN-SAMPLE", crawl_base=str(SAMPLE), storage_root=root
    ).execute(context)
    assert fs.exists(f"{bucket}/runs/crawls/CC-MAIN-SAMPLE/warc_manifest.json.gz")


def test_the_connections_credentials_as_environment_variables():
    from dripper.airflow.storage import aws_environment, storage_options_from_connection

    extra = {"endpoint_url": "http://store:9000", "region_name": "eu-west-1", "aws_session_token": "t"}
    options = storage_options_from_connection(_connection(login="AK", password="SK", extra=json.dumps(extra)))
    assert aws_environment(options) == {
        "AWS_ACCESS_KEY_ID": "AK",
        "AWS_SECRET_ACCESS_KEY": "SK",
        "AWS_SESSION_TOKEN": "t",
        "AWS_ENDPOINT_URL_S3": "http://store:9000",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    assert aws_environment(None) == {}
