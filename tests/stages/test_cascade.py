"""A cascade in the data plane: the first labeler's step, then only the routed pages to the second labeler;
exactly-once across a crash between the steps."""

from __future__ import annotations

import json
import os

import pytest

from dripper.cli import main as cli_main
from dripper.labelers.base import build_labeler
from dripper.stages.extract import read_simplified_items

from .conftest import LongBlocks, read_stage

ROUTE = "tests.stages.test_cascade:Switchable"


class Switchable(LongBlocks):
    """LongBlocks that raises while ``$SWITCHABLE_BROKEN`` is set (a worker lost mid-step) and appends the
    ids it labels to ``$SWITCHABLE_LOG`` (the environment, not class state: pytest may import this module
    twice)."""

    name = "switchable"

    def label_batch(self, requests):
        if os.environ.get("SWITCHABLE_BROKEN"):
            raise RuntimeError("the LM worker died")
        with open(os.environ["SWITCHABLE_LOG"], "a") as log:
            log.writelines(f"{request.page.doc_id}\n" for request in requests)
        return super().label_batch(requests)


def _labelled(log) -> list[str]:
    return log.read_text().split() if log.exists() else []


def _alone(labeler, root: str) -> dict[str, list[bool] | None]:
    """Labels of every labelled page of ``root``'s simplified shards by ``labeler`` alone."""
    from dripper.labelers.base import LabelRequest
    from dripper.stages.shards import done_shard_paths

    labels = {}
    for path in done_shard_paths(f"{root}/simplified"):
        for batch in read_simplified_items(path, 64):
            items = [(page, simplified) for page, simplified, problem, _ in batch if problem is None]
            answers = labeler([LabelRequest(page, simplified) for page, simplified in items])
            labels.update(
                {page.doc_id: answer.main for (page, _), answer in zip(items, answers, strict=True)}
            )
    return labels


def test_routed_pages_get_the_second_labels_the_others_the_first(reference_run, tmp_path, monkeypatch):
    root = reference_run["root"]
    out = tmp_path / "casc"
    spec = {"name": "casc", "labeler": "cpu", "route": {"labeler": ROUTE, "share": 0.25}}
    log = tmp_path / "labelled.txt"
    monkeypatch.setenv("SWITCHABLE_LOG", str(log))
    monkeypatch.setenv("SWITCHABLE_BROKEN", "1")
    args = [
        "run",
        "extract",
        "--input",
        root,
        "--output",
        str(out),
        "--extractor",
        json.dumps(spec),
        "--quiet",
    ]
    assert cli_main(args) == 1  # the second step failed on every shard ...
    first = read_stage(str(out), "cascade_first")
    assert len(first) == len(reference_run["simplified"])  # ... the first step's shards are published
    assert read_stage(str(out), "extracted") == []

    monkeypatch.delenv("SWITCHABLE_BROKEN")
    assert cli_main(args) == 0
    summary = json.loads((out / "_run_summary.json").read_text())
    assert summary["stage_runs"]["cascade_first"]["written"] == 0  # nothing labelled twice on CPU
    rows = read_stage(str(out), "extracted")
    assert [row["doc_id"] for row in rows] == [row["doc_id"] for row in first]
    stats = {row["doc_id"]: json.loads(row["stats"]) for row in rows}
    scored = [row for row in rows if "routed" in stats[row["doc_id"]]]
    routed = [row for row in scored if stats[row["doc_id"]]["routed"]]
    assert sorted(_labelled(log)) == sorted(row["doc_id"] for row in routed)  # each routed page once
    # A share is held per shard: each shard routes round(0.25 × its scored pages).
    counters = summary["stages"]["extracted"]["counters"]
    assert counters["route:pages_routed"] == len(routed) and counters["route:pages_scored"] == len(scored)
    assert abs(len(routed) / len(scored) - 0.25) < 0.03
    assert 0 < counters["route:routed_prompt_tokens_estimate"] < counters["route:prompt_tokens_estimate"]

    second_alone = _alone(LongBlocks(), root)
    cpu_alone = _alone(build_labeler("cpu"), root)
    for row in routed:
        assert row["extractor"] == "dripper:switchable" and row["labels"] == second_alone[row["doc_id"]]
    kept = [row for row in scored if not stats[row["doc_id"]]["routed"]]
    for row in kept:
        expected = cpu_alone[row["doc_id"]]
        if expected is None:  # declined by the CPU labeler and not routed: the fallback's output
            assert row["extractor"] == "trafilatura"
        else:
            assert row["extractor"] == "dripper:cpu" and row["labels"] == expected
    # Declined pages go first: every declined page is routed unless the shard's budget ran out.
    declined = [row for row in scored if stats[row["doc_id"]]["declined"]]
    assert declined and sum(stats[row["doc_id"]]["routed"] for row in declined) >= len(declined) // 2

    # A rerun repeats nothing: no LM work, no CPU work.
    log.unlink()
    assert cli_main(args) == 0
    assert _labelled(log) == []
    assert read_stage(str(out), "extracted") == rows


def test_a_cascade_spec_is_checked_before_any_shard(reference_run, tmp_path, capsys):
    spec = {"name": "casc", "labeler": "cpu", "route": {"labeler": "oracle"}}
    args = ["run", "extract", "--input", reference_run["root"], "--output", str(tmp_path / "x")]
    assert cli_main([*args, "--extractor", json.dumps(spec)]) == 2
    assert "route: give exactly one of share" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("rule", [{"below": 0.0}, {"below": 1.0}])
def test_a_threshold_routes_the_declined_pages_or_every_page(reference_run, tmp_path, rule, monkeypatch):
    from dripper.config.extract import ExtractStageConfig
    from dripper.stages.cascade import extract_cascade

    spec = {"name": "casc", "labeler": "cpu", "route": {"labeler": ROUTE, **rule}}
    monkeypatch.setenv("SWITCHABLE_LOG", str(tmp_path / "labelled.txt"))
    config = ExtractStageConfig(extractor=spec, workers=0)
    extract_cascade(reference_run["root"], str(tmp_path / "c"), config, progress=False)
    rows = read_stage(str(tmp_path / "c"), "extracted")
    stats = [json.loads(row["stats"]) for row in rows]
    scored = [s for s in stats if "routed" in s]
    if rule["below"] == 1.0:
        assert all(s["routed"] for s in scored)
    else:
        assert [s["routed"] for s in scored] == [s["declined"] for s in scored]
