"""Decontamination against the evaluation suite's own items, and the user's own refinement steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dripper.refine import RefineConfig, run_refine

REPO = Path(__file__).resolve().parents[2]
LOCAL_ITEMS = REPO / "dripper" / "eval" / "tasks" / "local_text" / "local_text.jsonl"

CLEAN = [
    "The river valley was settled by farmers who grew barley and kept goats on the hillsides.\n"
    "Each spring the floods brought fresh soil, and the harvest was shared among the villages.",
    "A good bread needs flour, water, salt and time.\nLet the dough rest overnight before you shape it.",
    "The committee met on Tuesday to review the budget.\nMembers asked for a clearer account of travel costs.",
]


def _items(min_words: int = 14) -> list[str]:
    """The local suite's items as lm-eval scores them (question, delimiter, gold answer), long ones only."""
    items = []
    for line in LOCAL_ITEMS.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        text = record["context"] + " " + record["choices"][record["label"]]
        if len(text.split()) >= min_words:
            items.append(text)
    return items


def _write_extracted(root: Path, texts: list[str]) -> None:
    import pyarrow as pa

    from dripper.stages.extract import extracted_schema
    from dripper.stages.shards import ShardStats, run_shard

    rows = [
        {"doc_id": f"doc-{i}", "url": f"https://example.org/{i}", "markdown": text, "extractor": "fineweb"}
        for i, text in enumerate(texts)
    ]

    def compute():
        return pa.Table.from_pylist(rows, schema=extracted_schema()), ShardStats(
            rows_in=len(rows), rows_out=len(rows)
        )

    run_shard(str(root / "extracted"), 0, compute)


def _corpus(root: Path) -> dict[str, str]:
    import pyarrow.parquet as pq

    rows = []
    for path in sorted((root / "corpus").glob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    return {row["id"]: row["text"] for row in rows}


@pytest.fixture(scope="module")
def planted() -> list[str]:
    """Three clean documents, then three that quote a benchmark item inside a paragraph of their own."""
    items = _items()
    assert len(items) >= 3
    contaminated = [
        f"Notes from the week.\n{item}\nThat is all for today, thanks for reading." for item in items[:3]
    ]
    return CLEAN + contaminated


def _config(**decont) -> RefineConfig:
    return RefineConfig.from_dict(
        {"steps": ["decontaminate"], "tasks": 1, "workers": 1, "decontaminate": {"suite": "local", **decont}}
    )


def test_documents_sharing_a_13_gram_with_the_suite_are_removed_and_counted(tmp_path, planted, offline):
    _write_extracted(tmp_path, planted)
    summary = run_refine(str(tmp_path), config=_config())
    corpus = _corpus(tmp_path)
    assert sorted(corpus) == ["doc-0", "doc-1", "doc-2"]  # the clean ones, untouched
    assert [corpus[f"doc-{i}"] for i in range(3)] == CLEAN
    decont = summary["decontamination"]
    assert decont["suite"] == "local" and decont["n"] == 13 and decont["mode"] == "documents"
    assert decont["benchmarks"]["local_text"]["items"] == 36
    assert decont["benchmarks"]["local_text"]["documents_removed"] == 3 == decont["documents_removed"]
    assert summary["dropped"]["decontaminate"] == {"contaminated_local_text": 3}
    assert summary["balanced"]
    excluded = tmp_path / "refine" / "excluded" / "decontaminate"
    assert excluded.exists()  # each removed document kept with the n-gram and the benchmark that matched


def test_spans_mode_drops_only_the_matching_lines(tmp_path, planted, offline):
    _write_extracted(tmp_path, planted)
    summary = run_refine(str(tmp_path), config=_config(mode="spans"))
    corpus = _corpus(tmp_path)
    assert len(corpus) == 6
    for i, item in enumerate(_items()[:3]):
        text = corpus[f"doc-{3 + i}"]
        assert item not in text
        assert text == "Notes from the week.\nThat is all for today, thanks for reading."
    assert [corpus[f"doc-{i}"] for i in range(3)] == CLEAN
    decont = summary["decontamination"]
    assert decont["documents_cut"] == 3 and decont["documents_removed"] == 0 and decont["lines_removed"] == 3


def test_n_is_a_setting(tmp_path, offline):
    # With n=20 the shorter items cannot match: the same corpus keeps a document quoting one.
    short = next(item for item in _items(14) if len(item.split()) < 17)
    _write_extracted(tmp_path, [f"Intro line.\n{short}\nOutro line."])
    summary = run_refine(str(tmp_path), config=_config(n=20))
    assert summary["decontamination"]["documents_removed"] == 0 and len(_corpus(tmp_path)) == 1


def test_a_suite_whose_data_is_not_here_is_named(tmp_path, offline):
    from dripper.refine.decontaminate import build_decont_index
    from dripper.refine.steps import DecontaminateConfig

    suite = tmp_path / "two.yaml"
    suite.write_text(
        "name: two\ninclude: [" + str(REPO / "dripper" / "eval" / "tasks") + "]\ntasks:\n"
        "  - {name: local_text, task: local_text, metric: acc, category: x}\n"
        "  - {name: arc_easy, task: arc_easy, metric: acc_norm, category: x}\n",
        encoding="utf-8",
    )
    with pytest.raises(FileNotFoundError, match="arc_easy") as error:
        build_decont_index(DecontaminateConfig(suite=str(suite)), str(tmp_path / "index"))
    assert "skip_unavailable" in str(error.value) and "local_text:" not in str(error.value)
    manifest = build_decont_index(
        DecontaminateConfig(suite=str(suite), skip_unavailable=True), str(tmp_path / "i2")
    )
    assert manifest["benchmarks"]["local_text"]["items"] == 36 and "arc_easy" in manifest["unavailable"]


# -- the user's own steps ------------------------------------------------------------------------------------


def test_custom_steps_are_checked_when_the_config_is_made():
    with pytest.raises(ValueError, match="cannot import"):
        RefineConfig.from_dict(
            {"custom_steps": [{"factory": "tests.refine.nowhere:Step", "after": "language"}]}
        )
    with pytest.raises(ValueError, match="not a datatrove PipelineStep"):
        RefineConfig.from_dict({"custom_steps": [{"factory": "collections:OrderedDict"}]})
    with pytest.raises(ValueError, match="does not take"):
        RefineConfig.from_dict(
            {"custom_steps": [{"factory": "tests.refine.user_steps:WordCountFilter", "options": {"x": 1}}]}
        )
    with pytest.raises(ValueError, match="did you mean 'language'"):
        RefineConfig.from_dict(
            {"custom_steps": [{"factory": "tests.refine.user_steps:WordCountFilter", "after": "langauge"}]}
        )
    config = RefineConfig.from_dict(
        {
            "steps": ["language", "minhash"],
            "custom_steps": [
                {
                    "factory": "tests.refine.user_steps:WordCountFilter",
                    "options": {"min_words": 12},
                    "after": "input",
                },
                {"factory": "tests.refine.user_steps:tag_step", "after": "gopher_quality"},
            ],
        }
    )
    assert config.pipeline_steps() == ["word_count_filter", "language", "tag_step", "minhash"]
    assert RefineConfig.from_dict(config.to_dict()) == config  # plans round-trip


def test_custom_steps_run_where_placed_with_their_stats_in_the_funnel(tmp_path, offline):
    texts = [*CLEAN, "Too short.", "Also short here."]
    _write_extracted(tmp_path, texts)
    config = RefineConfig.from_dict(
        {
            "steps": ["decontaminate"],
            "tasks": 1,
            "workers": 1,
            "custom_steps": [
                {
                    "factory": "tests.refine.user_steps:WordCountFilter",
                    "options": {"min_words": 10},
                    "after": "input",
                },
                {"factory": "tests.refine.user_steps:tag_step", "after": "decontaminate"},
            ],
        }
    )
    summary = run_refine(str(tmp_path), config=config)
    assert [row["step"] for row in summary["steps"]] == [
        "input",
        "word_count_filter",
        "decontaminate",
        "tag_step",
    ]
    row = summary["steps"][1]
    assert row["docs_in"] == 5 and row["docs_out"] == 3 and row["dropped"] == {"too_few_words": 2}
    assert summary["balanced"] and summary["documents_out"] == 3
    assert (tmp_path / "refine" / "excluded" / "word_count_filter").exists()
    import pyarrow.parquet as pq

    corpus = pq.read_table(next((tmp_path / "corpus").glob("*.parquet"))).to_pylist()
    assert all(json.loads(row["extract_stats"] or "{}") is not None for row in corpus)
    assert len(corpus) == 3


def test_the_stage_config_carries_decontamination_and_user_steps_to_the_refine_config():
    from dripper.config.refine import RefineStageConfig
    from dripper.runs.corpus import refine_config

    stage = RefineStageConfig.parse(
        {
            "decontaminate": "true",
            "decont_suite": "paper13",
            "decont_ngram": 8,
            "decont_mode": "spans",
            "custom_steps": ['{"factory": "tests.refine.user_steps:tag_step", "after": "pii"}'],
        }
    )
    config = RefineConfig.from_dict(refine_config(stage.steps, 1, 1, stage.refine_options()))
    assert config.enabled("decontaminate")
    assert (config.decontaminate.suite, config.decontaminate.n, config.decontaminate.mode) == (
        "paper13",
        8,
        "spans",
    )
    assert config.pipeline_steps()[-2:] == ["pii", "tag_step"]
    assert not RefineStageConfig.parse({"decontaminate": False, "steps": ["decontaminate"]}).steps
    with pytest.raises(ValueError, match="entry 0: factory"):
        RefineStageConfig.parse({"custom_steps": [{"factory": "no-colon"}]})
