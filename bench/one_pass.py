"""The split's intermediate and the one pass: bytes written to ``simplified/`` per byte of ``.warc.gz`` read,
and CPU-seconds of a corpus build's extraction, two passes against one, in one run on the same WARC files.

    .venv/bin/python bench/one_pass.py [--input SPEC ...] [--extractor cpu] [--workers 0]

Default input: the bundled sample snapshot's 4 WARC files (``snapshot:CC-MAIN-SAMPLE@data/sample``, 196
HTML pages). Printed:

- bytes: the ``simplified/`` shards of the ``full`` layout (every shard before the slim one: the page, the
  mapping view and the blocks) and of the ``slim`` layout (the default), each ÷ the ``.warc.gz`` bytes
  read, with the slim shards' compressed bytes per column, and what the slim shards would weigh with a
  digest in place of ``simplified_html`` (the alternative the layout did not take);
- CPU-seconds (this process and its children, ``resource.getrusage``) of what ``corpus_build`` runs from
  the selected WARC files to ``extractors/{name}/extracted/``: two passes with the full layout (before),
  two passes with the slim layout, and one pass (``run_extractor_one_pass``, no intermediate), with the
  ratios; every arm's extracted Markdown is checked equal to the one pass's.

``--workers 0`` (the default) runs every shard in this process, so the CPU time is the work alone;
``--workers N`` runs each stage on a Dask LocalCluster of N processes (their CPU time is counted once
they exit, with the cluster's start-up).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dripper.config.extract import ExtractStageConfig  # noqa: E402
from dripper.config.simplify import SimplifyStageConfig  # noqa: E402
from dripper.io.storage import filesystem_for  # noqa: E402

DEFAULT_INPUT = f"snapshot:CC-MAIN-SAMPLE@{REPO / 'data' / 'sample'}"


def _cpu_seconds() -> float:
    """User + system CPU time of this process and of its children that have exited."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _stage_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in (root / "simplified").glob("part-*.parquet"))


def _column_bytes(root: Path) -> dict[str, int]:
    """Compressed bytes per column over a stage's shards (parquet column-chunk sizes)."""
    import pyarrow.parquet as pq

    sizes: dict[str, int] = {}
    for path in sorted((root / "simplified").glob("part-*.parquet")):
        meta = pq.ParquetFile(path).metadata
        for group in range(meta.num_row_groups):
            for column in range(meta.num_columns):
                chunk = meta.row_group(group).column(column)
                name = chunk.path_in_schema.split(".")[0]
                sizes[name] = sizes.get(name, 0) + chunk.total_compressed_size
    return dict(sorted(sizes.items(), key=lambda item: -item[1]))


def _digest_variant_bytes(root: Path, out: Path) -> int:
    """The slim shards rewritten with a SHA-1 of ``simplified_html`` in its place (zstd, as the stage)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for path in sorted((root / "simplified").glob("part-*.parquet")):
        table = pq.read_table(path)
        digests = [
            None if text is None else hashlib.sha1(text.encode()).hexdigest()
            for text in table.column("simplified_html").to_pylist()
        ]
        index = table.schema.get_field_index("simplified_html")
        table = table.set_column(index, "simplified_sha1", pa.array(digests, pa.string()))
        target = out / path.name
        pq.write_table(table, target, compression="zstd")
        total += target.stat().st_size
    return total


def _markdown(folder: str) -> dict[str, str]:
    """Markdown by doc_id of an extractor folder's finished shards."""
    import pyarrow.parquet as pq

    from dripper.stages.shards import done_shard_paths

    markdown = {}
    for path in done_shard_paths(f"{folder}/extracted"):
        table = pq.read_table(path, columns=["doc_id", "markdown"])
        markdown.update(
            zip(table.column("doc_id").to_pylist(), table.column("markdown").to_pylist(), strict=True)
        )
    return markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", nargs="+", default=[DEFAULT_INPUT])
    parser.add_argument("--extractor", default="cpu")
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args(argv)

    import logging

    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    logging.getLogger("dripper.io.warc").setLevel(logging.ERROR)  # the sample's corrupt member, each pass

    from dripper.stages.extractor import run_extractor, run_extractor_one_pass
    from dripper.stages.simplify import (
        ShardFormat,
        plan_simplify_shards,
        resolve_warc_inputs,
        simplify_stage,
    )

    warc_files = resolve_warc_inputs(args.input)
    warc_bytes = 0
    for url in warc_files:
        fs, path = filesystem_for(url)
        warc_bytes += fs.size(path)
    simplify = SimplifyStageConfig(workers=args.workers)
    extract = ExtractStageConfig(extractor=args.extractor, workers=args.workers)
    shards = list(enumerate(plan_simplify_shards(warc_files)))
    with tempfile.TemporaryDirectory(prefix="bench-one-pass-") as tmp:
        roots = {name: Path(tmp, name) for name in ("full", "slim", "one")}
        cpu: dict[str, float] = {}
        for layout in ("full", "slim"):
            root = roots[layout]
            started = _cpu_seconds()
            simplify_stage(
                warc_files, str(root), simplify, shard_format=ShardFormat(layout=layout), progress=False
            )
            run_extractor(str(root), extract, progress=False)
            cpu[layout] = _cpu_seconds() - started
        started = _cpu_seconds()
        run_extractor_one_pass(str(roots["one"]), shards, extract, simplify, progress=False)
        cpu["one"] = _cpu_seconds() - started

        folder = f"extractors/{extract.extractor.name}"
        reference = _markdown(str(roots["one"] / folder))
        same = {name: _markdown(str(root / folder)) == reference for name, root in roots.items()}
        full_bytes, slim_bytes = _stage_bytes(roots["full"]), _stage_bytes(roots["slim"])
        digest_bytes = _digest_variant_bytes(roots["slim"], Path(tmp, "digest"))
        columns = _column_bytes(roots["slim"])
        one_pass_files = sorted(p.name for p in roots["one"].iterdir())

    mb = 1e6
    print(f"inputs: {len(warc_files)} WARC files, {warc_bytes / mb:.2f} MB of .warc.gz, {len(reference)} pages; "
          f"extractor {extract.extractor.name}, workers {args.workers}")  # fmt: skip
    print("\nbytes written to simplified/ per byte of .warc.gz read")
    print(f"  full layout (before)       {full_bytes / mb:6.2f} MB  {full_bytes / warc_bytes:5.2f}x")
    print(f"  slim layout                {slim_bytes / mb:6.2f} MB  {slim_bytes / warc_bytes:5.2f}x   "
          f"({slim_bytes / full_bytes:.3f} of the full layout)")  # fmt: skip
    print(f"  slim, digest for the input {digest_bytes / mb:6.2f} MB  {digest_bytes / warc_bytes:5.2f}x   "
          "(not taken)")  # fmt: skip
    print(f"  one pass                   no simplified/ folder (run root holds: {', '.join(one_pass_files)})")
    print("  slim layout per column (compressed): " + ", ".join(
        f"{name} {size / mb:.3f} MB" for name, size in columns.items() if size >= 1000
    ))  # fmt: skip
    print("\nCPU-seconds, WARC files → extracted/ (process and children)")
    print(f"  two passes, full layout (before)  {cpu['full']:7.2f}")
    print(f"  two passes, slim layout           {cpu['slim']:7.2f}   {cpu['slim'] / cpu['full']:.2f}x before")
    print(f"  one pass                          {cpu['one']:7.2f}   {cpu['one'] / cpu['full']:.2f}x before, "
          f"{cpu['one'] / cpu['slim']:.2f}x two slim passes")  # fmt: skip
    print(f"\nsame Markdown as the one pass: {json.dumps(same)}")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
