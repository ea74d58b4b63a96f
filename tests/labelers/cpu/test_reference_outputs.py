"""The CPU labeler gives, page for page, what the shipped model gave when it was trained.

``reference_sample.jsonl.gz`` was written by ``bench/cpu_labeler.py reference --write`` with the shipped
model (rewritten whenever a new model is shipped; first written by the per-block code before the labeler
was vectorised, which the fast path matched exactly), on the bundled sample: per page, a hash of the
feature matrix, the block probabilities (rounded, compared within 1e-8: their last bits differ between
CPUs), the labels and confidences, and hashes of the Markdown and main HTML. Any change to them is a
change of behaviour, not of speed. (The same check on dev and
dev_hard: ``bench/cpu_labeler.py reference --check``, with a file written by the earlier code.)
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from dripper.labelers.cpu.model import TreeEnsemble
from dripper.labelers.cpu.text_stats import class_counts
from dripper.labelers.cpu.training_set import iter_records

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"
REFERENCE = Path(__file__).with_name("reference_sample.jsonl.gz")


def _bench():
    spec = importlib.util.spec_from_file_location("cpu_labeler_bench", REPO / "bench" / "cpu_labeler.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _bench()


@pytest.fixture(scope="module")
def outputs(bench) -> tuple[dict, dict]:
    with gzip.open(REFERENCE, "rt", encoding="utf-8") as lines:
        expected = {found["id"]: found for found in map(json.loads, lines)}
    found = {page["id"]: page for page in bench.reference_outputs(iter_records(SAMPLE))}
    return expected, found


def test_every_sample_page_is_compared(outputs):
    expected, found = outputs
    assert len(found) == 60 and found.keys() == expected.keys()
    assert sum(page.get("labels") is not None for page in found.values()) >= 50


@pytest.mark.parametrize(
    "key",
    ["features", "structure", "p", "labels", "failure", "confidence", "extractor", "markdown", "main_html"],
)
def test_same_as_the_reference_path(bench, outputs, key):
    expected, found = outputs
    differ = sorted(
        page_id
        for page_id, page in found.items()
        if not bench.same_output(page.get(key), expected[page_id].get(key))
    )
    assert not differ, f"{key} differs on {len(differ)} pages, e.g. {differ[:3]}"


def _utf8_class_counts(text: str) -> list[int]:
    """The classes as the per-block path counted them: on the UTF-8 bytes, wide marks counted apart."""
    data = text.encode("utf-8", "surrogatepass")
    groups = [
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        b"abcdefghijklmnopqrstuvwxyz",
        b"0123456789",
        b" ",
        b".!?;",
        b",:",
        b"|/>\\-_=+*#@~",
        b"()[]{}",
        bytes(range(0xC3, 0xE0)),
        bytes(range(0xE3, 0xEE)),
    ]
    counts = [sum(data.count(bytes([byte])) for byte in group) for group in groups]
    counts[4] += sum(text.count(mark) for mark in "。！？…；")
    counts[5] += sum(text.count(mark) for mark in "，、：")
    counts[6] += sum(text.count(mark) for mark in "•·»«›‹–—©→｜")
    counts[9] -= text.count("。") + text.count("、")
    return counts


def test_character_classes_match_the_utf8_byte_classes():
    texts = [
        "Hello, World! 42 (x) a/b",
        "Ünïcödé façade — «quoted» · © 2024 → next",
        "北方的河流每年冬天都会结冰。渔民们，等待：冰面破裂、船只！？…；",
        "Русский текст; ελληνικά: עברית, العربية",
        "한국어 텍스트 ｜ カタカナ • 😀 emoji \ud800 lone surrogate",
        "",
    ]
    counts = class_counts(texts)
    for text, row in zip(texts, counts, strict=True):
        assert row[1:].tolist() == _utf8_class_counts(text), text
        assert row.sum() == len(text)


def _walk_one(ensemble: TreeEnsemble, row: np.ndarray) -> float:
    """The plain definition: from each root, left while ``x[feature] <= threshold``, until a leaf."""
    values = []
    for root in ensemble.roots.tolist():
        node = root
        while ensemble.children[2 * node] != node:
            go_right = float(row[ensemble.feature[node]]) > ensemble.threshold[node]
            node = int(ensemble.children[2 * node + go_right])
        values.append(ensemble.value[node])
    return math.fsum(values) + ensemble.baseline


def test_tree_walk_matches_the_plain_definition_across_chunks():
    from dripper.labelers.cpu.fit import TrainParams, fit_ensemble

    rng = np.random.default_rng(3)
    x = rng.random((700, 5)).astype(np.float32)
    y = x[:, 0] + x[:, 1] * x[:, 2] > 0.8
    ensemble = fit_ensemble(x, y, np.ones(len(x)), TrainParams(rounds=8, backend="sklearn"), seed=0)
    scores = ensemble.decision_function(x)  # 700 rows: two full chunks of 256 rows and a partial one
    expected = np.array([_walk_one(ensemble, row) for row in x])
    assert np.allclose(scores, expected, rtol=0, atol=1e-12)
    assert np.array_equal(ensemble.decision_function(x[:5]), scores[:5])


def test_reference_floats_are_compared_within_the_tolerance_only(bench):
    assert bench.same_output([0.25, 0.5 + 1e-12], [0.25, 0.5])
    assert not bench.same_output([0.25, 0.5 + 1e-6], [0.25, 0.5])
    assert not bench.same_output([0.25], [0.25, 0.5])
    assert bench.same_output("0101", "0101") and not bench.same_output("0101", "0110")
    assert not bench.same_output(None, [0.5]) and not bench.same_output(True, 1.0 + 1e-12)
