"""The tree-ensemble format, the shipped model and the ``cpu`` labeler."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from dripper.labelers import available_labelers, build_labeler
from dripper.labelers.cpu.features import CONTEXT_FEATURE_NAMES, FEATURE_NAMES
from dripper.labelers.cpu.fit import (
    TrainParams,
    fit_ensemble,
)
from dripper.labelers.cpu.model import (
    CpuLabeler,
    CpuModel,
    TreeEnsemble,
    default_model_path,
    load_model,
)
from dripper.pipeline import extract
from tests.labelers.cpu import toy_data

ARTICLE = (
    "<html><head><title>Rivers of the north</title></head><body>"
    "<div class='menu'><a href='/'>Home</a> <a href='/news'>News</a> <a href='/about'>About us</a></div>"
    "<article><h1>Rivers of the north</h1>"
    "<p>The northern rivers freeze every winter. Fishermen wait for the ice to break, and the boats stay on "
    "the shore until April, when the first ships come up from the south with salt and flour.</p>"
    "<p>In spring the water rises quickly. Villages along the banks prepare sandbags, and the roads are "
    "closed for weeks while the meltwater runs off the hills into the valleys below.</p></article>"
    "<div class='footer'>© 2024 Northern Times · <a href='/privacy'>Privacy</a></div></body></html>"
)


def test_ensemble_round_trip_and_validation():
    x, y, w = toy_data()
    ensemble = fit_ensemble(x, y, w, TrainParams(rounds=5, backend="sklearn"), seed=0)
    again = TreeEnsemble.from_dict(json.loads(json.dumps(ensemble.to_dict())))
    assert np.array_equal(again.decision_function(x), ensemble.decision_function(x))
    broken = ensemble.to_dict()
    broken["children"] = [0] * (len(broken["children"]) - 1) + [10**6]
    with pytest.raises(ValueError, match="children"):
        TreeEnsemble.from_dict(broken)


def _tiny_model(**decision) -> tuple[CpuModel, np.ndarray]:
    """A two-stage model over random features, and the stage-2 rows it was fitted on."""
    rng = np.random.default_rng(1)
    n = 400
    x1 = rng.random((n, len(FEATURE_NAMES))).astype(np.float32)
    y = x1[:, 0] > 0.5
    stage1 = fit_ensemble(x1, y, np.ones(n), TrainParams(rounds=3, backend="sklearn"), seed=0)
    x2 = rng.random((n, len(FEATURE_NAMES) + len(CONTEXT_FEATURE_NAMES))).astype(np.float32)
    stage2 = fit_ensemble(x2, y, np.ones(n), TrainParams(rounds=3, backend="sklearn"), seed=0)
    return CpuModel(stage1, stage2, threshold=0.4, metadata={"note": "test"}, **decision), x2


def test_model_file_round_trip(tmp_path):
    model, x2 = _tiny_model()
    stage2 = model.stage2
    path = model.save(tmp_path / "m.json.gz")
    loaded = load_model(path)
    assert loaded.threshold == 0.4 and loaded.metadata == {"note": "test"}
    assert np.array_equal(loaded.stage2.decision_function(x2), stage2.decision_function(x2))
    # Same model, same bytes (no timestamps in the file).
    assert model.save(tmp_path / "again.json.gz").read_bytes() == path.read_bytes()
    data = model.to_dict()
    data["feature_names"] = data["feature_names"][:-1]
    (tmp_path / "other.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="other features"):
        load_model(tmp_path / "other.json")
    with pytest.raises(FileNotFoundError, match="train-labeler"):
        load_model(tmp_path / "missing.json.gz")


def test_shipped_model_is_small_loads_fast_and_says_what_it_is():
    path = default_model_path()
    assert path.exists(), "the shipped model is missing: see `dripper train-labeler --help`"
    assert path.stat().st_size < 5_000_000
    started = time.perf_counter()
    model = load_model(path)
    print(f"shipped model loaded in {time.perf_counter() - started:.2f} s")
    metadata = model.metadata
    assert metadata["versions"]["dripper-platform"]
    training = metadata["training_data"]
    assert training["pages"] > 100 and training["files"] and all(f["sha256"] for f in training["files"])
    assert metadata["params"]["threshold"] == model.threshold and metadata["params"]["bags"] >= 1
    assert metadata["params"].get("decision", "threshold") == model.decision
    if "cross_validation" in metadata:  # trained without --no-cv: its own block-level report
        assert metadata["cross_validation"]["model"]["all"]["f1"] > 0.5
    assert model.stage2 is not None


def test_registered_and_labels_a_page():
    assert "cpu" in available_labelers()
    labeler = build_labeler("cpu")
    assert isinstance(labeler, CpuLabeler)
    result = extract(ARTICLE, url="https://example.org/rivers", labeler=labeler, fallback=None)
    assert result.extractor == "dripper:cpu"
    assert "northern rivers freeze" in result.markdown
    assert "Privacy" not in result.markdown
    assert result.labels is not None and len(result.labels) == result.stats["n_blocks"]
    # The model's own estimate of the page: the expected F1 of its labels, on declined pages too.
    assert 0.5 < result.stats["page_confidence"] <= 1.0
    declined = extract(ARTICLE, labeler=CpuLabeler(min_confidence=0.9999), fallback="trafilatura")
    assert declined.fallback_reason.startswith("label_failed: low confidence")
    assert declined.stats["page_confidence"] == result.stats["page_confidence"]


def test_the_model_file_names_its_decision_rule(tmp_path):
    path = _tiny_model(decision="expected_f1")[0].save(tmp_path / "m.json")
    assert load_model(path).decision == "expected_f1"
    assert CpuLabeler(model=path).decision == "expected_f1"
    assert CpuLabeler(model=path, decision="threshold").decision == "threshold"
    # A threshold asked for is a threshold used, unless a rule is named too.
    assert CpuLabeler(model=path, threshold=0.6).decision == "threshold"
    assert CpuLabeler(model=path, threshold=0.6, decision="expected_f1").decision == "expected_f1"
    data = json.loads(path.read_text())
    del data["decision"]  # a file written before the rule was named
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert load_model(tmp_path / "old.json").decision == "threshold"
    data["decision"] = "majority"
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="decision 'majority'"):
        load_model(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="decision 'majority'"):
        CpuLabeler(model=path, decision="majority")


def test_the_page_gate_declines_pages_whose_labels_the_model_doubts(tmp_path):
    page = extract(ARTICLE, url="https://example.org/rivers", labeler=CpuLabeler(), fallback=None)
    expected = page.stats["page_confidence"]
    kept = extract(ARTICLE, labeler=CpuLabeler(min_page_confidence=expected - 0.01), fallback="trafilatura")
    assert kept.extractor == "dripper:cpu" and kept.markdown == page.markdown
    gate = round((expected + 1.0) / 2, 4)
    declined = extract(ARTICLE, labeler=CpuLabeler(min_page_confidence=gate), fallback="trafilatura")
    assert declined.extractor == "trafilatura"
    assert (
        declined.fallback_reason == f"label_failed: low confidence: expected F1 {expected:.2f} below {gate:g}"
    )
    # The gate is a model setting too: saved, loaded, overridable; files without it have none.
    path = _tiny_model(min_page_confidence=0.9)[0].save(tmp_path / "m.json")
    assert load_model(path).min_page_confidence == 0.9
    assert CpuLabeler(model=path).min_page_confidence == 0.9
    assert CpuLabeler(model=path, min_page_confidence=0).min_page_confidence == 0.0
    data = json.loads(path.read_text())
    del data["min_page_confidence"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert load_model(tmp_path / "old.json").min_page_confidence == 0.0
    data["min_page_confidence"] = 1.5
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="min_page_confidence 1.5"):
        load_model(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="min_page_confidence -0.1"):
        CpuLabeler(min_page_confidence=-0.1)
