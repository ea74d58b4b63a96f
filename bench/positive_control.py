"""The ablation's positive control: an arm that keeps the whole page (every block labelled main content,
boilerplate included) against ``cpu`` on the same WARC files, each trained on the same token budget with
two seeds. The early signal (loss on held-out clean main content) should come out worse for the whole-page
arm, and the report should read the difference as beyond noise.

    .venv/bin/python bench/positive_control.py --out /tmp/control [--train-tokens 10240] [--seeds 1 2]

Runs ``dripper run`` simplify (2 of the sample's 4 WARC files, so the other two's labelled pages are the
held-out reference), extract, refine, tokenize, pretrain, evaluate (``local`` suite) and report, then prints
and writes (``--results``) the reference-loss comparison the report made. The figures in docs/ablation.md
come from this script.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from collections.abc import Sequence
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
    args = parser.parse_args(argv)

    from scripts.airflow_demo import sample_tokenizer

    started = time.perf_counter()
    tokenizer = sample_tokenizer(args.out / "tokenizer", vocab_size=600)
    root = str(args.out / "run")
    sample = REPO / "data" / "sample"
    _dripper("simplify", "--input", f"snapshot:CC-MAIN-SAMPLE@{sample}", "--warc-count", "2", "--output", root,
             "--workers", "0", "--quiet")  # fmt: skip
    arms = {
        "cpu": "cpu",
        "whole": json.dumps({"name": "whole", "labeler": "bench.positive_control:whole_page"}),
    }
    for name, spec in arms.items():
        _dripper("extract", "--input", root, "--extractor", spec, "--workers", "0", "--quiet")
        _dripper("refine", "--input", root, "--extractor", name, "--tasks", "1", "--workers", "1", "--quiet")
        _dripper("tokenize", "--input", root, "--extractor", name, "--tokenizer", tokenizer, "--quiet")
    seeds = [str(seed) for seed in args.seeds]
    _dripper("pretrain", "--input", root, "--extractor", *arms, "--tokenizer", tokenizer, "--train-tokens",
             str(args.train_tokens), "--seeds", *seeds, "--eval-every", str(args.eval_every), "--device", "cpu",
             "--quiet")  # fmt: skip
    _dripper("evaluate", "--input", root, "--extractor", *arms, "--suite", "local", "--limit", "8", "--quiet")
    report = _dripper("report", "--input", root, "--extractor", *arms, "--name", "control", "--labelled-limit",
                      "4", "--quiet")  # fmt: skip
    page = Path(report["html"]).read_text(encoding="utf-8")
    start = page.index('id="report-data">') + len('id="report-data">')
    data = json.loads(page[start : page.index("</script>", start)])
    (pair,) = data["comparisons"]
    result = {
        "train_tokens": args.train_tokens,
        "seeds": args.seeds,
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
