"""The ``cpu_seq`` labeler end to end with a small network of fixed random weights (no torch needed)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from dripper.labelers.cpu.features import FEATURE_NAMES
from dripper.labelers.cpu_seq.labeler import CpuSeqLabeler
from dripper.labelers.cpu_seq.network import NetworkConfig, SeqNetwork
from dripper.pipeline import ExtractOptions, Extractor
from dripper.types import Page


def random_network(seed: int = 0, **shapes) -> SeqNetwork:
    """A network of the torch module's shapes with seeded random weights."""
    config = NetworkConfig(
        **{"buckets": 1024, "embedding": 8, "hidden": 16, "gru": 8, "head": 8, "window": 32, "stride": 16}
        | shapes,
        n_numeric=len(FEATURE_NAMES) + 2,
    )
    rng = np.random.default_rng(seed)
    c = config

    def w(*shape):
        return (rng.normal(size=shape) * 0.2).astype(np.float32)

    params = {
        "embedding": w(c.buckets, c.embedding),
        "dense.weight": w(c.hidden, 2 * c.embedding + c.n_numeric),
        "dense.bias": w(c.hidden),
        "head1.weight": w(c.head, c.hidden + 2 * c.gru),
        "head1.bias": w(c.head),
        "head2.weight": w(1, c.head),
        "head2.bias": w(1),
        "tree_weight": np.ones(1, np.float32),
        "numeric_mean": np.zeros(c.n_numeric, np.float32),
        "numeric_scale": np.full(c.n_numeric, 4.0, np.float32),
    }
    for suffix in ("", "_reverse"):
        params[f"gru.weight_ih_l0{suffix}"] = w(3 * c.gru, c.hidden)
        params[f"gru.weight_hh_l0{suffix}"] = w(3 * c.gru, c.gru)
        params[f"gru.bias_ih_l0{suffix}"] = w(3 * c.gru)
        params[f"gru.bias_hh_l0{suffix}"] = w(3 * c.gru)
    return SeqNetwork(config, params, {"settings": {"min_confidence": 0.0, "min_page_confidence": 0.0}})


def _page(n_paragraphs: int) -> Page:
    body = "".join(
        f"<p>Paragraph {i} says something about the topic, with a sentence or two of text.</p>"
        for i in range(n_paragraphs)
    )
    html = f"<html><head><title>t</title></head><body>{body}</body></html>"
    return Page(doc_id=f"p{n_paragraphs}", html=html, url="https://example.org/a")


@pytest.mark.parametrize("n_paragraphs", [1, 20_000])
def test_labels_a_page_of_one_block_and_one_of_twenty_thousand(n_paragraphs):
    labeler = CpuSeqLabeler(model=random_network())
    extractor = Extractor(labeler, ExtractOptions(fallback=None, max_page_bytes=1 << 30))
    started = time.perf_counter()
    [result] = extractor.extract_batch([_page(n_paragraphs)])
    assert result.fallback_reason is None, result.fallback_reason
    blocks = result.stats["n_blocks"]
    assert blocks == n_paragraphs
    assert len(result.labels) == blocks and len(result.stats["confidence"]) == blocks
    assert 0.0 <= result.stats["page_confidence"] <= 1.0
    print(f"{blocks} blocks labelled in {time.perf_counter() - started:.1f} s")


def test_batch_scores_each_page_as_alone():
    labeler = CpuSeqLabeler(model=random_network(seed=1))
    extractor = Extractor(labeler, ExtractOptions(fallback=None))
    pages = [_page(3), _page(70), _page(1)]
    together = extractor.extract_batch(pages)
    for page, result in zip(pages, together, strict=True):
        [alone] = extractor.extract_batch([page])
        np.testing.assert_allclose(result.stats["confidence"], alone.stats["confidence"], atol=1e-4)


def test_registered_under_its_name(tmp_path):
    from dripper.labelers import build_labeler

    path = random_network().save(tmp_path / "net.npz")
    labeler = build_labeler("cpu_seq", model=str(path), min_page_confidence=0.5)
    assert isinstance(labeler, CpuSeqLabeler) and labeler.min_page_confidence == 0.5
    with pytest.raises(ValueError):
        CpuSeqLabeler.check_options({"decision": "nope"})


def test_without_a_model_file_the_error_says_how_to_train_one(tmp_path, monkeypatch):
    from dripper.labelers.cpu_seq import labeler as seq_labeler

    monkeypatch.setattr(seq_labeler, "default_seq_model_path", lambda: tmp_path / "absent.npz")
    with pytest.raises(FileNotFoundError, match="train-labeler --kind cpu_seq"):
        CpuSeqLabeler()


def test_the_shipped_network_extracts_the_sample_with_numpy_alone(tmp_path):
    """``dripper extract --labeler cpu_seq`` on the bundled sample with torch, LightGBM and scikit-learn
    unimportable (a bare install): every page is an output row, most labelled by the network."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    output = tmp_path / "out.jsonl"
    script = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'lightgbm', 'sklearn'):\n"
        "            raise ImportError(name + ' blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from dripper.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "assert 'torch' not in sys.modules\n"
        "sys.exit(code)\n"
    )
    sample = repo / "data" / "sample" / "pages.jsonl.gz"
    argv = ["--input", str(sample), "--output", str(output), "--labeler", "cpu_seq"]
    run = subprocess.run(
        [sys.executable, "-c", script, "extract", *argv], capture_output=True, text=True, cwd=repo
    )
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    (summary,) = [
        json.loads(line) for line in (run.stdout + run.stderr).splitlines() if line.startswith('{"pages"')
    ]
    assert len(rows) == summary["pages"] == 60
    assert summary["by_extractor"]["dripper:cpu_seq"] >= 40
    assert sum(summary["by_extractor"].values()) == 60
