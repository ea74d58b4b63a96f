import pytest

from dripper.io.storage import filesystem_for, is_local, join_path, open_url, protocol_of


@pytest.mark.parametrize(
    ("path", "protocol"),
    [
        ("/data/x.warc.gz", "file"),
        ("relative/x", "file"),
        ("file:///data/x", "file"),
        ("s3://commoncrawl/crawl-data/x", "s3"),
        ("s3a://bucket/x", "s3"),
        ("https://data.commoncrawl.org/x", "https"),
        ("memory://run/x", "memory"),
    ],
)
def test_protocol_of(path, protocol):
    assert protocol_of(path) == protocol
    assert is_local(path) == (protocol == "file")


def test_join_path():
    assert join_path("s3://b/run", "pages", "part-00000.parquet") == "s3://b/run/pages/part-00000.parquet"
    assert join_path("s3://b/run/", "/pages") == "s3://b/run/pages"
    assert join_path("/tmp/run", "a/b") == "/tmp/run/a/b"


def test_local_roundtrip_creates_folders(tmp_path):
    target = tmp_path / "deep" / "er" / "file.txt"
    with open_url(str(target), "wb") as f:
        f.write(b"hello")
    with open_url(f"file://{target}", "rb") as f:
        assert f.read() == b"hello"
    fs, path = filesystem_for(str(target))
    assert path == str(target)
    assert fs.exists(path)


def test_commoncrawl_bucket_is_anonymous(monkeypatch):
    pytest.importorskip("s3fs")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    fs, path = filesystem_for("s3://commoncrawl/crawl-data/CC-MAIN-2025-13/warc.paths.gz")
    assert path == "commoncrawl/crawl-data/CC-MAIN-2025-13/warc.paths.gz"
    assert fs.anon is True
    assert "endpoint_url" not in (fs.client_kwargs or {})  # the public bucket is always AWS's


def test_other_buckets_take_endpoint_and_credentials(monkeypatch):
    pytest.importorskip("s3fs")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9000")
    fs, _ = filesystem_for("s3://runs/r1", {"key": "k", "secret": "s"})
    assert fs.client_kwargs["endpoint_url"] == "http://127.0.0.1:9000"
    assert (fs.key, fs.secret, fs.anon) == ("k", "s", False)
    fs2, _ = filesystem_for("s3://runs/r2", {"endpoint_url": "http://127.0.0.1:9001", "anon": True})
    assert fs2.client_kwargs["endpoint_url"] == "http://127.0.0.1:9001"
    # credentials given for the commoncrawl bucket are used, not replaced by anon
    fs3, _ = filesystem_for("s3://commoncrawl/x", {"key": "k", "secret": "s"})
    assert fs3.anon is False
    # an explicit endpoint (a mirror or a test server) applies to the commoncrawl bucket too
    fs4, _ = filesystem_for("s3://commoncrawl/y", {"endpoint_url": "http://127.0.0.1:9002"})
    assert (fs4.client_kwargs["endpoint_url"], fs4.anon) == ("http://127.0.0.1:9002", True)


def test_https_filesystem_is_built_without_network():
    pytest.importorskip("aiohttp")
    fs, path = filesystem_for("https://data.commoncrawl.org/crawl-data/x")
    assert "http" in fs.protocol
    assert path == "https://data.commoncrawl.org/crawl-data/x"
