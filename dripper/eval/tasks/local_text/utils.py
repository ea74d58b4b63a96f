"""Data loader of the ``local_text`` task: the JSONL file beside this module as a ``test`` split."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).with_name("local_text.jsonl")


def load_local_text(**kwargs):
    """lm-eval's ``custom_dataset`` hook (it passes the task metadata as keyword arguments, unused here)."""
    import datasets

    return datasets.DatasetDict({"test": datasets.load_dataset("json", data_files=str(DATA), split="train")})
