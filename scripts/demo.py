"""`make demo`: extract the bundled sample pages end to end on this machine (no GPU, no network).

Writes ``out/demo/extracted.jsonl`` (one record per page) and prints a summary with the extraction score
against the sample's ground truth. (The Airflow corpus build joins the demo when the DAGs land.)
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dripper.cli import read_pages, result_record  # noqa: E402
from dripper.pipeline import DEFAULT_LABELER, Extractor  # noqa: E402


def main() -> int:
    sample = REPO / "data" / "sample" / "pages.jsonl.gz"
    out_dir = REPO / "out" / "demo"
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / "extracted.jsonl"
    pages = list(read_pages(sample))
    extractor = Extractor(DEFAULT_LABELER)
    started = time.perf_counter()
    results = extractor.extract_batch(pages)
    elapsed = time.perf_counter() - started
    with output.open("w", encoding="utf-8") as handle:
        for result in results:
            handle.write(json.dumps(result_record(result, "json"), ensure_ascii=False) + "\n")
    summary = {
        "pages": len(results),
        "labeler": DEFAULT_LABELER,
        "pages_per_second": round(len(results) / elapsed, 1),
        "by_extractor": dict(Counter(result.extractor for result in results)),
        "fallback_reasons": dict(
            Counter((r.fallback_reason or "").split(":")[0] for r in results if r.fallback_reason)
        ),
    }
    try:
        from dripper.eval.metrics import normalize_markdown, rouge_n

        truth = {page.doc_id: page.ground_truth for page in pages}
        scored = [
            (
                rouge_n(r.markdown, truth[r.doc_id]).f1,
                rouge_n(normalize_markdown(r.markdown), normalize_markdown(truth[r.doc_id])).f1,
            )
            for r in results
            if truth.get(r.doc_id)
        ]
        summary["rouge5_f1_raw"] = round(sum(raw for raw, _ in scored) / len(scored), 3)
        summary["rouge5_f1_normalised"] = round(sum(norm for _, norm in scored) / len(scored), 3)
    except ImportError:  # the eval extra is not installed
        pass
    print(json.dumps(summary, indent=2))
    print(f"\nOutput: {output}")
    first = next((r for r in results if r.markdown), None)
    if first is not None:
        print(f"\nFirst page ({first.doc_id}), first lines of its Markdown:\n")
        print("\n".join(first.markdown.splitlines()[:12]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
