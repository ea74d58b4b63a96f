"""Refinement speed: documents/s per core through every step, on the sample snapshot's corpus.

Usage: ``.venv/bin/python bench/refine.py [--input ROOT] [--work DIR] [--tokenizer PATH] [--rounds R]``
(datatrove logs every task to stderr: add ``2>/dev/null`` for the results alone).

The corpus: ``{ROOT}/extracted/`` when ``--input`` is given, else the bundled sample snapshot's 196 WARC
pages extracted once with the ``trafilatura`` labeler into ``{work}/sample/extracted/`` (reused by later
runs). The run: every step (URL dedup, language, Gopher ×2, C4, FineWeb, MinHash, PII, Megatron tokens),
one task in this process (one core), ``--rounds`` times into fresh output folders. The first round pays
the one-off costs (spaCy import, py3langid and tokenizer loading); later rounds show the steady state.

Prints, per round, documents/s per core by wall clock and by CPU time (the machine may be shared: CPU time
is the steadier figure), and, for the last round, each step's share of the time datatrove's step timers
measured (reading, writing and the audit counters included as their own lines).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

QWEN = REPO / ".cache" / "models" / "qwen-tokenizer"


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def extract_sample(root: Path) -> Path:
    """``{root}/extracted/``: the sample's WARC pages through the trafilatura labeler, one shard per file."""
    import pyarrow as pa

    from dripper.io.warc import iter_warc_pages
    from dripper.pipeline import extract_batch
    from dripper.stages.extract import extracted_schema
    from dripper.stages.shards import ShardStats, list_done_shards, run_shard

    sample = REPO / "data" / "sample"
    warcs = sorted(glob.glob(str(sample / "crawl-data" / "*" / "segments" / "*" / "warc" / "*.warc.gz")))
    if len(list_done_shards(str(root / "extracted"))) == len(warcs):
        return root
    print(f"extracting the sample's {len(warcs)} WARC files once into {root} …", flush=True)
    for index, warc in enumerate(warcs):

        def compute(warc=warc):
            pages = [p.to_page() for p in iter_warc_pages(warc, warc_name=os.path.relpath(warc, sample))]
            results = extract_batch(pages, labeler="trafilatura")
            rows = [
                {
                    "doc_id": r.doc_id,
                    "url": r.url,
                    "markdown": r.markdown,
                    "extractor": r.extractor,
                    "fallback_reason": r.fallback_reason,
                    "stats": json.dumps({"n_blocks": r.stats.get("n_blocks")}),
                    **{
                        k: p.metadata.get(k)
                        for k in ("warc_file", "warc_offset", "fetch_date", "payload_digest")
                    },
                }
                for p, r in zip(pages, results, strict=True)
            ]
            schema = extracted_schema()
            table = pa.Table.from_pylist(
                [{c: row.get(c) for c in schema.names} for row in rows], schema=schema
            )
            return table, ShardStats(rows_in=len(rows), rows_out=len(rows))

        run_shard(str(root / "extracted"), index, compute)
    return root


def tiny_tokenizer(folder: Path) -> str:
    """A byte-level BPE trained on the sample's ground truth (when the Qwen tokenizer is not built)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from tests.conftest import SAMPLE_PAGES, read_records

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4000,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([r["ground_truth_text"] for r in read_records(SAMPLE_PAGES)], trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    return str(folder)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", type=Path, help="a run root holding extracted/ (default: the sample)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "dripper-bench-refine")
    parser.add_argument("--tokenizer", help="tokenizer.json or its folder (default: Qwen's under .cache/)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    from dripper.refine import STEP_ORDER, RefineConfig, TokenizeConfig, run_refine

    input_root = args.input or extract_sample(args.work / "sample")
    tokenizer = args.tokenizer or (str(QWEN) if (QWEN / "tokenizer.json").exists() else None)
    tokenizer = tokenizer or tiny_tokenizer(args.work / "tiny-tokenizer")
    config = RefineConfig(steps=STEP_ORDER, tasks=1, workers=1, tokenize=TokenizeConfig(tokenizer=tokenizer))
    print(f"input: {input_root}/extracted; tokenizer: {tokenizer}; steps: {', '.join(config.steps)}; 1 task")

    summary: dict = {}
    for round_index in range(1, args.rounds + 1):
        output = args.work / f"out-{round_index}"
        shutil.rmtree(output, ignore_errors=True)
        wall, cpu = time.perf_counter(), cpu_seconds()
        summary = run_refine(str(input_root), str(output), config)
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        docs = summary["documents_in"]
        label = "cold" if round_index == 1 else "warm"
        print(
            f"round {round_index} ({label}): {docs} documents in, {summary['documents_out']} out, "
            f"{wall:6.1f} s wall, {cpu:6.1f} s CPU -> {docs / wall:6.2f} docs/s per core (wall), "
            f"{docs / cpu:6.2f} docs/s per CPU-second"
        )

    timing = summary["timing_seconds"]
    total = sum(timing.values())
    print(f"\nshare of the step timers' {total:.1f} s (last round):")
    for step, seconds in sorted(timing.items(), key=lambda item: -item[1]):
        print(f"  {step:18s} {seconds:7.2f} s  {100 * seconds / total:5.1f} %")
    print("\ndocuments and tokens per step (all extractors):")
    for row in summary["steps"]:
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(row["dropped"].items())) or "-"
        print(
            f"  {row['step']:18s} {row['docs_in']:5d} -> {row['docs_out']:5d} docs  "
            f"{row['tokens_in']:9d} -> {row['tokens_out']:9d} tokens  dropped: {dropped}"
        )
    return 0


if __name__ == "__main__":  # datatrove's workers are spawned: keep the guard
    raise SystemExit(main())
