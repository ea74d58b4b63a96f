import json
from pathlib import Path

import pytest

from dripper.io.snapshots import (
    COMMONCRAWL_HTTPS,
    COMMONCRAWL_S3,
    list_crawls,
    parse_collinfo,
    read_warc_paths,
    resolve_base,
    select_snapshot_warcs,
    select_warc_paths,
    warc_urls,
)

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
PATHS = [
    f"crawl-data/CC-MAIN-2025-13/segments/174200{i // 10:04d}.{i % 10}/warc/CC-MAIN-20250315-{i:05d}.warc.gz"
    for i in range(200)
]


def test_parse_collinfo_sorts_newest_first():
    collinfo = json.dumps(
        [
            {
                "id": "CC-MAIN-2024-51",
                "name": "December 2024 Index",
                "cdx-api": "https://x/CC-MAIN-2024-51-index",
            },
            {"id": "CC-MAIN-2025-13", "name": "March 2025 Index"},
            {"id": "CC-MAIN-2013-20", "name": "Summer 2013 Index"},
            {"id": "CC-MAIN-2025-05", "name": "January 2025 Index"},
            {"id": "CC-MAIN-SAMPLE", "name": "sample"},
        ]
    )
    crawls = parse_collinfo(collinfo)
    assert [c.id for c in crawls] == [
        "CC-MAIN-2025-13",
        "CC-MAIN-2025-05",
        "CC-MAIN-2024-51",
        "CC-MAIN-2013-20",
        "CC-MAIN-SAMPLE",
    ]
    assert crawls[2].name == "December 2024 Index"
    assert dict(crawls[2].extra)["cdx-api"].endswith("CC-MAIN-2024-51-index")
    assert parse_collinfo(collinfo.encode()) == crawls


@pytest.mark.parametrize(
    "bad", ['{"id": "CC-MAIN-2025-13"}', "[1, 2]", '[{"name": "no id"}]', '[{"id": ""}]']
)
def test_parse_collinfo_rejects_malformed_input(bad):
    with pytest.raises(ValueError, match="collinfo"):
        parse_collinfo(bad)


def test_sample_snapshot_is_listed_and_readable():
    crawls = list_crawls(str(SAMPLE / "collinfo.json"))
    assert [c.id for c in crawls] == ["CC-MAIN-SAMPLE"]
    paths = read_warc_paths(str(SAMPLE), "CC-MAIN-SAMPLE")
    assert len(paths) == 4
    assert all(p.startswith("crawl-data/CC-MAIN-SAMPLE/segments/") and p.endswith(".warc.gz") for p in paths)
    assert all((SAMPLE / p).is_file() for p in paths)


def test_unknown_crawl_says_what_to_check():
    with pytest.raises(FileNotFoundError, match="CC-MAIN-1999-01"):
        read_warc_paths(str(SAMPLE), "CC-MAIN-1999-01")


def test_selection_is_deterministic_and_seeded():
    first = select_warc_paths(PATHS, count=10, seed=7)
    assert first == select_warc_paths(list(reversed(PATHS)), count=10, seed=7)  # input order is irrelevant
    assert len(first) == len(set(first)) == 10
    assert set(first) <= set(PATHS)
    assert select_warc_paths(PATHS, count=10, seed=8) != first


def test_selection_is_stable_when_count_grows():
    small = select_warc_paths(PATHS, count=5, seed=3)
    large = select_warc_paths(PATHS, count=50, seed=3)
    assert large[:5] == small
    assert select_warc_paths(PATHS, seed=3)[:50] == large


def test_selection_by_fraction():
    assert len(select_warc_paths(PATHS, fraction=0.1, seed=1)) == 20
    assert len(select_warc_paths(PATHS, fraction=0.001, seed=1)) == 1  # rounds up: never empty
    assert select_warc_paths(PATHS, fraction=0.05, seed=1) == select_warc_paths(PATHS, count=10, seed=1)
    assert sorted(select_warc_paths(PATHS, fraction=1.0)) == sorted(PATHS)


def test_selection_known_answer():
    # Pinned: a change of the ranking would silently renumber the shards of every resumed run.
    assert select_warc_paths([f"p{i}" for i in range(10)], count=3, seed=0) == ["p9", "p2", "p1"]


@pytest.mark.parametrize(
    "kwargs",
    [{"count": 1, "fraction": 0.5}, {"count": -1}, {"fraction": 0.0}, {"fraction": 1.5}],
)
def test_selection_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        select_warc_paths(PATHS, **kwargs)


def test_count_larger_than_listing_and_duplicates():
    assert sorted(select_warc_paths(["a", "b", "a"], count=10)) == ["a", "b"]
    assert select_warc_paths(PATHS, count=0) == []


def test_urls_for_each_kind_of_base():
    path = PATHS[0]
    assert warc_urls("s3", [path]) == [COMMONCRAWL_S3 + path]
    assert warc_urls("https", [path]) == [COMMONCRAWL_HTTPS + path]
    assert warc_urls("https://data.commoncrawl.org", [path]) == [COMMONCRAWL_HTTPS + path]
    assert warc_urls("s3://my-mirror/cc/", [path]) == [f"s3://my-mirror/cc/{path}"]
    assert warc_urls("/data/cc", [path]) == [f"/data/cc/{path}"]
    assert resolve_base("~/cc").startswith("/")


def test_select_snapshot_warcs_on_the_sample():
    urls = select_snapshot_warcs("CC-MAIN-SAMPLE", str(SAMPLE), count=2, seed=0)
    assert len(urls) == 2
    assert all(Path(u).is_file() for u in urls)
    assert urls == select_snapshot_warcs("CC-MAIN-SAMPLE", str(SAMPLE), count=2, seed=0)
    assert select_snapshot_warcs("CC-MAIN-SAMPLE", str(SAMPLE), count=4, seed=0)[:2] == urls
