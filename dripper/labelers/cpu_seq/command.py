"""``dripper train-labeler --kind cpu_seq``: build the pages, stack on the trees, train, write the file.

The network reads the ``cpu`` trees' logits, so it is trained on logits the trees give pages they did
not see: the ``cpu`` labeler's site-grouped cross-validation (``dripper.labelers.cpu.train``) supplies
them, stage 2 included. At run time the labeler uses the ``trees`` model named here (default: the shipped
``cpu`` model, trained on the same pages).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path

from dripper.labelers.cpu_seq.network import SeqNetwork
from dripper.labelers.cpu_seq.train import SeqTrainParams

__all__ = ["train_seq_labeler"]


def _log(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def train_seq_labeler(
    data: Sequence[str | Path],
    output: str | Path,
    folds: int = 5,
    seed: int = 0,
    params: SeqTrainParams | None = None,
    threads: int = 1,
    exclude_ids: Iterable[str] = (),
    limit: int | None = None,
    settings: dict | None = None,
    quiet: bool = False,
) -> SeqNetwork:
    """Train the ``cpu_seq`` network on dev-format files and write it (``.npz``).

    Args:
        data: JSONL(.gz) files of pages with ground truth (full text or snippets).
        output: The ``.npz`` file to write.
        folds: Site-grouped folds of the trees' out-of-fold logits.
        seed: Seeds the folds, the trees and the network.
        params: The network's training parameters (default :class:`SeqTrainParams`).
        threads: Threads of the tree fits and of torch.
        exclude_ids: Page ids not to train on.
        limit: At most this many records per file.
        settings: Decision rule and gates recorded in the file (``threshold``, ``decision``,
            ``min_confidence``, ``min_page_confidence``); unset ones are ``cpu``'s.
    """
    from dataclasses import replace

    from dripper.labelers.cpu.fit import TrainParams
    from dripper.labelers.cpu.train import cross_validate
    from dripper.labelers.cpu_seq.dataset import build_sequence_set, stage_logits
    from dripper.labelers.cpu_seq.train import fit_network

    params = replace(params or SeqTrainParams(), threads=threads)
    exclude_ids = set(exclude_ids)
    _log(f"building the training set from {', '.join(map(str, data))}", quiet)
    sequence_set = build_sequence_set(data, exclude_ids=exclude_ids, limit=limit, progress=not quiet)
    pages = sequence_set.pages
    if len(pages) < folds:
        raise ValueError(f"only {len(pages)} usable training pages; need at least {folds}")
    _log("out-of-fold tree logits (site-grouped cross-validation of the cpu trees)", quiet)
    cv = cross_validate(pages, TrainParams(threads=threads), folds=folds, seed=seed, by="site", quiet=quiet)
    logits = stage_logits(cv.stage1, cv.probabilities)
    _log(f"training the network on {len(pages)} pages", quiet)
    metadata = {
        "description": "Dripper cpu_seq labeler: a BiGRU over hashed block tokens, features and cpu tree logits",
        "trained_with": "dripper train-labeler --kind cpu_seq",
        "training_data": sequence_set.training.summary(),
        "params": asdict(params),
        "folds": folds,
        "seed": seed,
        "excluded_ids": len(exclude_ids),
        "settings": dict(settings or {}),
    }
    network = fit_network(
        pages, sequence_set.tokens, logits, range(len(pages)), params, seed, quiet, metadata
    )
    path = network.save(output)
    _log(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)", quiet)
    return network
