"""The ablation's positive control: an arm that keeps the whole page (every block labelled main content,
boilerplate included) against ``cpu`` on the same WARC files, each trained on the same token budget with
two seeds. The early signal (loss on held-out clean main content) should come out worse for the whole-page
arm, and the report should read the difference as beyond noise.

    .venv/bin/python bench/positive_control.py --out /tmp/control [--train-tokens 10240] [--seeds 1 2]
    .venv/bin/python bench/positive_control.py --out /tmp/control --pages DEV/dev_hard.jsonl.gz \\
        --train-tokens 1000000 --global-batch-size 32 --warmup-steps 20

Runs ``dripper run`` simplify, extract, refine, tokenize, pretrain, evaluate (``local`` suite) and report,
then prints and writes (``--results``) the reference-loss comparison the report made. Its crawl is either
2 of the sample's 4 WARC files (the other two's labelled pages are the held-out reference), or, with
``--pages`` (labelled page files in the development sets' format), WARC files written from a seeded half of
those pages (English, at most ``--page-limit``) whose other half's ground truth is the reference text. The
figures in docs/ablation.md come from this script.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import random
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dripper.labelers.base import BlockLabeler, LabelRequest, Labels  # noqa: E402


class WholePageLabeler(BlockLabeler):
    """Every block main content: the page's whole text, navigation and footers included."""

    name = "whole_page"

    def label_batch(self, requests: Sequence[LabelRequest]) -> list[Labels]:
        return [Labels(main=[True] * request.simplified.n_blocks) for request in requests]


def whole_page() -> WholePageLabeler:
    """The ``module:factory`` of the control arm (``bench.positive_control:whole_page``)."""
    return WholePageLabeler()


#: Pages per WARC file written from ``--pages`` (one simplify shard each).
PAGES_PER_WARC = 200


def _labelled(path: Path) -> Iterator[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        yield from (json.loads(line) for line in lines if line.strip())


def write_crawl(pages: Sequence[Path], out: Path, limit: int, reference_limit: int, seed: int) -> dict:
    """WARC files (``PAGES_PER_WARC`` pages each, one request/response/metadata capture per page) from a
    seeded half of the English, non-duplicate labelled pages of ``pages`` (at most ``limit`` in all), and
    the other half's ground truth (at most ``reference_limit`` pages) as a JSONL reference text."""
    from scripts.make_sample import WarcFileBuilder

    rng = random.Random(seed)
    usable = [
        r
        for path in pages
        for r in _labelled(path)
        if r.get("language") == "en"
        and r.get("url")
        and r.get("html")
        and r.get("ground_truth_text")
        and not r.get("duplicate_of")
    ]
    rng.shuffle(usable)
    usable = usable[:limit]
    crawl, held = usable[::2], usable[1::2][:reference_limit]
    folder = out / "crawl"
    folder.mkdir(parents=True, exist_ok=True)
    for n, start in enumerate(range(0, len(crawl), PAGES_PER_WARC)):
        builder = WarcFileBuilder(f"control-{n:05d}.warc.gz", rng, datetime(2025, 3, 14, tzinfo=UTC))
        builder.warcinfo()
        for record in crawl[start : start + PAGES_PER_WARC]:
            builder.capture(record["url"], record["html"].encode("utf-8"), meta={"id": record["id"]})
        (folder / builder.name).write_bytes(builder.data())
    reference = out / "reference.jsonl"
    with reference.open("w", encoding="utf-8") as lines:
        lines.writelines(json.dumps({"text": r["ground_truth_text"]}) + "\n" for r in held)
    kinds = sorted({r.get("page_type") or "?" for r in crawl})
    return {"crawl": str(folder), "reference": str(reference), "pages": len(crawl), "reference_pages": len(held),
            "page_types": kinds}  # fmt: skip


def _dripper(*argv: str) -> dict:
    from dripper.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["run", *argv])
    text = out.getvalue()
    if code:
        raise SystemExit(f"dripper run {' '.join(argv)} failed ({code}):\n{text[-2000:]}")
    return json.loads(text[text.rfind("\n{") + 1 :])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--train-tokens", type=int, default=10240)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--results", type=Path, default=None, help="write the comparison here (JSON)")
    parser.add_argument(
        "--pages",
        type=Path,
        nargs="+",
        default=None,
        help="labelled page files to build the crawl and the reference from (default: the sample)",
    )
    parser.add_argument(
        "--page-limit", type=int, default=1200, help="pages taken from --pages (half crawled)"
    )
    parser.add_argument("--reference-limit", type=int, default=300, help="held-out pages in the reference")
    parser.add_argument("--vocab-size", type=int, default=600, help="the tokenizer's (a BPE on the sample)")
    parser.add_argument(
        "--global-batch-size", type=int, default=4, help="sequences per step (one micro batch)"
    )
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument(
        "--refine-steps",
        default=None,
        help="refinement steps of both arms, comma-separated (default: the refine stage's)",
    )
    args = parser.parse_args(argv)
    missing = [str(path) for path in args.pages or [] if not path.is_file()]
    if missing:
        parser.error(
            f"--pages: no such file {', '.join(missing)} (the development sets' folder, DEV/dev_hard.jsonl.gz)"
        )

    from scripts.airflow_demo import sample_tokenizer

    started = time.perf_counter()
    tokenizer = sample_tokenizer(args.out / f"tokenizer-{args.vocab_size}", vocab_size=args.vocab_size)
    root = str(args.out / "run")
    crawl: dict = {"crawl": "2 of the sample's 4 WARC files"}
    if args.pages:
        crawl = write_crawl(args.pages, args.out, args.page_limit, args.reference_limit, seed=args.seeds[0])
        inputs, reference = [crawl["crawl"]], ["--reference-text", crawl["reference"]]
    else:
        inputs, reference = [f"snapshot:CC-MAIN-SAMPLE@{REPO / 'data' / 'sample'}", "--warc-count", "2"], []
    _dripper("simplify", "--input", *inputs, "--output", root, "--workers", "0", "--quiet")
    arms = {
        "cpu": "cpu",
        "whole": json.dumps({"name": "whole", "labeler": "bench.positive_control:whole_page"}),
    }
    for name, spec in arms.items():
        _dripper("extract", "--input", root, "--extractor", spec, "--workers", "0", "--quiet")
        steps = ["--steps", args.refine_steps] if args.refine_steps else []
        _dripper(
            "refine",
            "--input",
            root,
            "--extractor",
            name,
            "--tasks",
            "1",
            "--workers",
            "1",
            *steps,
            "--quiet",
        )
        _dripper("tokenize", "--input", root, "--extractor", name, "--tokenizer", tokenizer, "--quiet")
    seeds = [str(seed) for seed in args.seeds]
    batch = str(args.global_batch_size)
    _dripper("pretrain", "--input", root, "--extractor", *arms, "--tokenizer", tokenizer, "--train-tokens",
             str(args.train_tokens), "--seeds", *seeds, "--eval-every", str(args.eval_every), "--device", "cpu",
             "--quiet", "--", "--global-batch-size", batch, "--micro-batch-size", batch, "--lr", str(args.lr),
             "--min-lr", str(args.lr / 10), "--warmup-steps", str(args.warmup_steps))  # fmt: skip
    _dripper("evaluate", "--input", root, "--extractor", *arms, "--suite", "local", "--limit", "8", *reference,
             "--quiet")  # fmt: skip
    report = _dripper("report", "--input", root, "--extractor", *arms, "--name", "control", "--labelled-limit",
                      "4", "--quiet")  # fmt: skip
    page = Path(report["html"]).read_text(encoding="utf-8")
    start = page.index('id="report-data">') + len('id="report-data">')
    data = json.loads(page[start : page.index("</script>", start)])
    (pair,) = data["comparisons"]
    result = {
        "train_tokens": args.train_tokens,
        "seeds": args.seeds,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "results", "pages")},
        "data": crawl,
        "arms": {
            e["name"]: {
                "reference_loss": e["scores"]["reference_loss"],
                "reference_loss_seed_sd": e["scores"].get("reference_loss_seed_sd"),
                "reference_loss_stderr": e["scores"].get("reference_loss_stderr"),
                "per_seed": [r["scores"]["reference_loss"] for r in e["runs"]],
                "budget": e["budget"],
                "mean_score": e["scores"]["mean"],
            }
            for e in data["extractors"]
        },
        "comparison": {"pair": f"{pair['a']} - {pair['b']}", **pair["reference_loss"]},
        "report": report["html"],
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result, indent=1))
    if args.results:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
