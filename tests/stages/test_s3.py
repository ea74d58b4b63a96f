"""The data plane against ``s3://`` on a real S3 server (moto, on 127.0.0.1): WARCs read from a bucket laid
out like Common Crawl, shards and markers written to a bucket, by Dask worker processes."""

from __future__ import annotations

import json
import subprocess
import sys

from dripper.config.simplify import SimplifyStageConfig
from dripper.io.storage import filesystem_for
from dripper.stages.extract import extract_stage
from dripper.stages.shards import ShardWriter, list_done_shards
from dripper.stages.simplify import resolve_warc_inputs, simplify_stage

from .conftest import LONG_BLOCKS, REPO, SAMPLE_PAGES, LongBlocks, comparable, read_stage, subprocess_env


def test_both_stages_on_s3_equal_the_local_run(reference_run, s3_bucket, s3_options):
    snapshot = f"snapshot:CC-MAIN-SAMPLE@s3://{s3_bucket}/sample"
    inputs = resolve_warc_inputs(snapshot, storage_options=s3_options)
    assert len(inputs) == 4 and all(url.startswith(f"s3://{s3_bucket}/sample/crawl-data/") for url in inputs)
    root = f"s3://{s3_bucket}/runs/one"

    report = simplify_stage(
        snapshot, root, SimplifyStageConfig(workers=2), storage_options=s3_options, progress=False
    )
    assert (report.written, report.failed) == (4, {})
    assert report.summary["pages_out"] == SAMPLE_PAGES
    extracted = extract_stage(root, labeler=LongBlocks(), storage_options=s3_options, progress=False)
    assert (extracted.written, extracted.failed) == (4, {})

    # Same pages, same content as the local run; only where the WARCs were read from differs.
    for stage in ("simplified", "extracted"):
        on_s3 = comparable(read_stage(root, stage, s3_options), drop=("warc_file",))
        local = comparable(reference_run[stage], drop=("warc_file",))
        assert on_s3 == local, stage
    rows = read_stage(root, "simplified", s3_options)
    assert {row["warc_file"] for row in rows} == set(inputs)

    # Layout: parts, markers and summaries; nothing staged under _tmp on an object store.
    fs, path = filesystem_for(root, s3_options)
    fs.invalidate_cache()
    names = sorted(p.removeprefix(f"{path}/") for p in fs.find(path))
    assert names == sorted(
        ["_run_summary.json", "simplified/_summary.json", "extracted/_summary.json"]
        + [f"{stage}/part-{i:05d}.{ext}" for stage in ("simplified", "extracted") for i in range(4)
           for ext in ("parquet", "done.json")]
    )  # fmt: skip
    with fs.open(f"{path}/_run_summary.json", "rb") as f:
        summary = json.loads(f.read())
    assert summary["stages"]["extracted"]["pages_out"] == SAMPLE_PAGES
    assert summary["stages"]["simplified"]["dropped"]["not_response"] == 415
    assert summary["stage_runs"]["simplified"]["workers"] == 2  # a 2-process LocalCluster
    assert summary["stage_runs"]["extracted"]["labeler"] == "long-blocks"

    # A rerun finds every marker and does nothing.
    again = simplify_stage(
        snapshot, root, SimplifyStageConfig(workers=0), storage_options=s3_options, progress=False
    )
    assert (again.written, again.skipped) == (0, 4)


def test_cli_on_s3_with_a_listing_and_storage_options(reference_run, s3_bucket, s3_options, tmp_path):
    """``dripper run simplify|extract`` in a subprocess: a warc.paths.gz on S3, --storage-option flags."""
    root = f"s3://{s3_bucket}/runs/cli"
    flags = [
        f"--storage-option=endpoint_url={s3_options['endpoint_url']}",
        "--storage-option=key=testing",
        "--storage-option=secret=testing",
        "--storage-option=client_kwargs.region_name=eu-west-1",
    ]
    listing = f"s3://{s3_bucket}/sample/crawl-data/CC-MAIN-SAMPLE/warc.paths.gz"
    commands = [
        [
            "run",
            "simplify",
            "--input",
            listing,
            "--output",
            root,
            "--workers",
            "0",
            "--warc-count",
            "2",
            *flags,
        ],
        ["run", "extract", "--input", root, "--output", root, "--labeler", LONG_BLOCKS, *flags],
    ]
    for command in commands:
        done = subprocess.run(
            [sys.executable, "-m", "dripper.cli", *command],
            cwd=REPO,
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        report = json.loads(done.stdout)
        assert (report["written"], report["failed"]) == (2, {})
        assert "shards" in done.stderr  # progress as log lines when stderr is not a terminal
    assert list_done_shards(f"{root}/extracted", s3_options) == [0, 1]
    writer = ShardWriter(root, "simplified", s3_options)
    chosen = [writer.read_marker(i)["inputs"][0].rsplit("/", 1)[-1] for i in (0, 1)]
    expected = {
        k: v
        for k, v in comparable(reference_run["extracted"], drop=("warc_file",)).items()
        if any(
            row["doc_id"] == k and row["warc_file"].endswith(tuple(chosen))
            for row in reference_run["extracted"]
        )
    }
    assert comparable(read_stage(root, "extracted", s3_options), drop=("warc_file",)) == expected
