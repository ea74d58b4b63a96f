"""The registered ``cpu_seq`` labeler: the ``cpu`` labeler's trees, then a BiGRU across the page's blocks.

Each page is featurised as for ``cpu`` (``dripper.labelers.cpu.features``), scored by the shipped tree
stages, and its blocks' hashed tokens, features and tree logits go through :class:`SeqNetwork`; the
probabilities become labels and gates exactly as ``cpu``'s do (``decision.py``). numpy only.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from dripper.labelers.base import BlockLabeler, LabelRequest, Labels, register_labeler
from dripper.labelers.cpu.decision import check_settings, gate_labels
from dripper.labelers.cpu.features import PageFeatures, page_features
from dripper.labelers.cpu.model import CpuModel, default_model_path, load_model
from dripper.labelers.cpu_seq.network import SeqNetwork, numeric_inputs
from dripper.labelers.cpu_seq.tokens import BlockTokens, block_tokens

__all__ = ["CpuSeqLabeler", "default_seq_model_path"]

#: Settings a model file does not name (those of the shipped ``cpu`` model).
DEFAULT_SETTINGS = {
    "decision": "expected_f1",
    "threshold": 0.4,
    "min_confidence": 0.85,
    "min_page_confidence": 0.85,
}


def default_seq_model_path() -> Path:
    """Where a shipped network would lie (``dripper/resources/cpu_seq_labeler/model.npz``; none ships yet)."""
    return Path(str(resources.files("dripper") / "resources" / "cpu_seq_labeler" / "model.npz"))


@lru_cache(maxsize=4)
def _cached_network(path: str) -> SeqNetwork:
    return SeqNetwork.load(path)


@register_labeler("cpu_seq")
class CpuSeqLabeler(BlockLabeler):
    """Labels blocks with the ``cpu`` trees and a block-sequence network over them; numpy only.

    Args:
        model: A ``.npz`` network file or a loaded :class:`SeqNetwork` (default:
            :func:`default_seq_model_path`, the shipped network; a missing file raises
            ``FileNotFoundError`` saying how to train one).
        trees: The ``cpu`` model file (or :class:`CpuModel`) whose logits the network reads (default: the
            shipped ``cpu`` model, which the shipped network was trained over).
        threshold, min_confidence, min_page_confidence, decision: As for the ``cpu`` labeler; defaults
            from the network file's metadata, else ``cpu``'s shipped settings.

    ``Labels.confidence`` holds each block's probability, ``Labels.page_confidence`` the expected
    character F1 of the labels under them (what the cascade routes by). :attr:`seconds` adds up
    ``features``, ``trees``, ``tokens`` and ``network`` wall time.
    """

    name = "cpu_seq"

    def __init__(
        self,
        model: str | Path | SeqNetwork | None = None,
        trees: str | Path | CpuModel | None = None,
        threshold: float | None = None,
        min_confidence: float | None = None,
        decision: str | None = None,
        min_page_confidence: float | None = None,
    ) -> None:
        super().__init__()
        if isinstance(model, SeqNetwork):
            self.network = model
        else:
            path = Path(model) if model is not None else default_seq_model_path()
            self.network = _cached_network(str(path.resolve()))
        if isinstance(trees, CpuModel):
            self.trees = trees
        else:
            self.trees = load_model(Path(trees) if trees is not None else default_model_path())
        settings = {**DEFAULT_SETTINGS, **(self.network.metadata.get("settings") or {})}
        self.threshold = float(settings["threshold"] if threshold is None else threshold)
        self.min_confidence = float(settings["min_confidence"] if min_confidence is None else min_confidence)
        self.min_page_confidence = float(
            settings["min_page_confidence"] if min_page_confidence is None else min_page_confidence
        )
        self.decision = str(decision or ("threshold" if threshold is not None else settings["decision"]))
        check_settings(self.threshold, self.min_confidence, self.min_page_confidence, self.decision)
        self.seconds = {"features": 0.0, "trees": 0.0, "tokens": 0.0, "network": 0.0}

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        check_settings(
            options.get("threshold"),
            options.get("min_confidence"),
            options.get("min_page_confidence"),
            options.get("decision"),
        )

    def probabilities(self, pages: Sequence[tuple[PageFeatures, BlockTokens]]) -> list[np.ndarray]:
        """Block probabilities of featurised pages (``(features, tokens)`` each)."""
        started = time.perf_counter()
        logits = self.trees.stage_logits([features for features, _ in pages])
        trees_done = time.perf_counter()
        inputs = [
            (numeric_inputs(features, logit), tokens)
            for (features, tokens), logit in zip(pages, logits, strict=True)
        ]
        result = self.network.probabilities(inputs)
        self.seconds["trees"] += trees_done - started
        self.seconds["network"] += time.perf_counter() - trees_done
        return result

    def label_batch(self, requests: Sequence[LabelRequest]) -> list[Labels]:
        results: list[Labels | None] = [None] * len(requests)
        ready: list[tuple[int, PageFeatures, BlockTokens]] = []
        buckets = self.network.config.buckets
        for index, request in enumerate(requests):
            try:
                started = time.perf_counter()
                features = page_features(request.simplified)
                featured = time.perf_counter()
                tokens = block_tokens(request.simplified, buckets)
                self.seconds["features"] += featured - started
                self.seconds["tokens"] += time.perf_counter() - featured
                ready.append((index, features, tokens))
            except Exception as error:  # one page's odd DOM goes to the fallback, not the batch
                results[index] = Labels.failed(
                    f"cpu_seq features failed: {type(error).__name__}: {error}"[:300]
                )
        probabilities = self.probabilities([(features, tokens) for _, features, tokens in ready])
        for (index, features, _), p in zip(ready, probabilities, strict=True):
            results[index] = gate_labels(
                p,
                features.chars,
                self.threshold,
                self.decision,
                self.min_confidence,
                self.min_page_confidence,
            )
        return [result for result in results if result is not None]
