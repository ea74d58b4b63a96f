"""The ablation's early signal: each checkpoint's loss on a held-out reference text that no arm trains on.

A model trained on boilerplate predicts clean main content worse long before benchmark scores move. The
default reference is the ground truth (main content) of labelled pages that are not in the run's WARC
files: a page is left out when its URL, or its content hash (the ``WARC-Payload-Digest`` its HTML would
have, sent as UTF-8), is one of the selection's simplified pages (``{selection}/simplified/``), so no arm's
corpus can hold it under either. Any text file a user names serves
instead (plain text: one document; JSONL(.gz): a ``text`` or ``ground_truth_text`` field per line).

The loss: each document tokenized with the checkpoint's own tokenizer (the run's) and an end-of-document
token, concatenated, cut into windows of the model's context length; the mean per-token cross-entropy over
all predicted tokens, with the standard error of the window losses (``std / sqrt(windows)``).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["held_out_reference", "read_reference", "reference_loss", "reference_for_run"]

#: Where the default reference of a selection is written: ``{selection}/reference/``.
REFERENCE_FOLDER = "reference"


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def _jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with _open_text(path) as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def payload_digest(html: str) -> str:
    """A page's ``WARC-Payload-Digest`` were it served as UTF-8: ``sha1:`` and the base32 SHA-1 of its bytes."""
    digest = hashlib.sha1(html.encode("utf-8", "surrogatepass")).digest()  # noqa: S324 (WARC's own digest)
    return "sha1:" + base64.b32encode(digest).decode("ascii")


def run_pages(selection_root: str) -> tuple[set[str], set[str]]:
    """The URLs and payload digests of every page in a selection's simplified shards (with an ``html``
    column, as older shards have, the digest of that text too)."""
    import pyarrow.parquet as pq

    urls: set[str] = set()
    digests: set[str] = set()
    shards = sorted(Path(selection_root, "simplified").glob("part-*.parquet"))
    if not shards:
        raise FileNotFoundError(f"{selection_root}/simplified: no shard; run the simplify stage first")
    for shard in shards:
        names = set(pq.read_schema(shard).names)
        columns = [c for c in ("url", "payload_digest", "html") if c in names]
        table = pq.read_table(shard, columns=columns).to_pydict()
        urls.update(url for url in table.get("url", []) if url)
        digests.update(d for d in table.get("payload_digest", []) if d)
        digests.update(payload_digest(html) for html in table.get("html", []) if html)
    return urls, digests


def held_out_reference(
    selection_root: str, labelled_pages: Sequence[str | Path], out_file: str | Path
) -> dict[str, Any]:
    """Write the ground truth of the labelled pages that are not in the selection's WARC files to
    ``out_file`` (JSONL: ``id``, ``url``, ``text``) and its summary beside it (``…_summary.json``).

    Raises ``ValueError`` when every labelled page is in the run (name a reference file then).
    Returns ``{"file", "pages", "held_out", "excluded_url", "excluded_hash", "sources"}``.
    """
    urls, hashes = run_pages(selection_root)
    kept, excluded_url, excluded_hash, pages = [], 0, 0, 0
    for path in labelled_pages:
        for page in _jsonl(Path(path)):
            text = page.get("ground_truth_text") or ""
            if not text.strip():
                continue
            pages += 1
            if page.get("url") in urls:
                excluded_url += 1
            elif page.get("html") and payload_digest(page["html"]) in hashes:
                excluded_hash += 1
            else:
                kept.append({"id": page.get("id"), "url": page.get("url"), "text": text})
    if not kept:
        raise ValueError(
            f"all {pages} labelled pages of {', '.join(map(str, labelled_pages))} are in the run's WARC files "
            "(by URL or content hash): no held-out reference text; name one with the evaluation's "
            "reference_text (a text or JSONL file no arm trains on)"
        )
    out_file = Path(out_file)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    partial = out_file.with_name(out_file.name + f".{os.getpid()}.partial")
    with partial.open("w", encoding="utf-8") as f:
        for row in kept:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    partial.replace(out_file)  # evaluate tasks of several arms may write it at once: same bytes
    summary = {
        "file": str(out_file),
        "pages": pages,
        "held_out": len(kept),
        "excluded_url": excluded_url,
        "excluded_hash": excluded_hash,
        "sources": [str(p) for p in labelled_pages],
        "characters": sum(len(row["text"]) for row in kept),
    }
    summary_file = out_file.with_name(out_file.stem + "_summary.json")
    partial = summary_file.with_name(summary_file.name + f".{os.getpid()}.partial")
    partial.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    partial.replace(summary_file)
    return summary


def reference_for_run(
    extractor_root: str, reference_text: str | None, labelled_pages: Sequence[str | Path]
) -> dict[str, Any]:
    """The reference of an arm's evaluation: ``reference_text`` when given, else the held-out ground truth
    of ``labelled_pages`` for the arm's selection (``{selection}/reference/held_out.jsonl``, the folder two
    levels above ``{selection}/extractors/{name}``). Returns ``{"file", …}`` (the summary)."""
    if reference_text:
        if not Path(reference_text).is_file():
            raise FileNotFoundError(f"reference_text {reference_text}: no such file")
        return {"file": str(reference_text), "source": "user"}
    selection = os.path.dirname(os.path.dirname(str(extractor_root).rstrip("/")))
    out = Path(selection, REFERENCE_FOLDER, "held_out.jsonl")
    return {**held_out_reference(selection, labelled_pages, out), "source": "labelled pages not in the run"}


def read_reference(path: str | Path) -> list[str]:
    """The documents of a reference file: JSONL(.gz) (``text`` or ``ground_truth_text``), else the whole
    file as one document."""
    path = Path(path)
    name = path.name.removesuffix(".gz")
    if name.endswith((".jsonl", ".json")):
        texts = [row.get("text") or row.get("ground_truth_text") or "" for row in _jsonl(path)]
    else:
        with _open_text(path) as f:
            texts = [f.read()]
    texts = [text for text in texts if text.strip()]
    if not texts:
        raise ValueError(f"{path}: no reference text")
    return texts


def reference_loss(
    model_dir: str | Path, texts: Sequence[str], device: str = "cpu", batch_size: int = 16
) -> dict[str, Any]:
    """Mean per-token loss of the Hugging Face model in ``model_dir`` (with its tokenizer) on ``texts``.

    Returns ``{"reference_loss", "reference_loss_stderr", "reference_tokens", "reference_windows"}``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True, dtype=torch.float32)
    model.to(device).eval()
    window = int(getattr(model.config, "max_position_embeddings", 0) or 1024)
    stream: list[int] = []
    for text in texts:
        stream.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
        if tokenizer.eos_token_id is not None:
            stream.append(int(tokenizer.eos_token_id))
    windows = [stream[start : start + window] for start in range(0, len(stream), window)]
    windows = [ids for ids in windows if len(ids) >= 2]
    losses, counts = [], []
    with torch.no_grad():
        # Full windows in batches (one forward each); a shorter last window on its own.
        for first in range(0, len(windows), batch_size):
            group = windows[first : first + batch_size]
            for same in (
                [ids for ids in group if len(ids) == window],
                [ids for ids in group if len(ids) < window],
            ):
                if not same:
                    continue
                batch = torch.tensor(same, device=device)
                logits = model(input_ids=batch).logits[:, :-1].float()
                per_token = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="none"
                ).reshape(len(same), -1)
                losses.extend(float(x) for x in per_token.mean(dim=1))
                counts.extend([batch.shape[1] - 1] * len(same))
    del model
    if not losses:
        raise ValueError(f"{model_dir}: the reference text holds fewer than 2 tokens")
    total = sum(counts)
    mean = sum(loss * n for loss, n in zip(losses, counts, strict=True)) / total
    stderr = None
    if len(losses) > 1:
        plain = sum(losses) / len(losses)
        variance = sum((loss - plain) ** 2 for loss in losses) / (len(losses) - 1)
        stderr = math.sqrt(variance / len(losses))
    return {
        "reference_loss": mean,
        "reference_loss_stderr": stderr,
        "reference_tokens": total,
        "reference_windows": len(losses),
    }
