"""Step registry, configuration, URL keys, the quality word tokenizer and the language filter."""

from __future__ import annotations

import pytest

from dripper.refine.steps import (
    DEFAULT_STEPS,
    STEP_ORDER,
    STEP_REGISTRY,
    LanguageConfig,
    RefineConfig,
    TokenizeConfig,
    normalize_url,
    step_spec,
)


def test_registry_lists_every_step_in_order():
    assert tuple(STEP_REGISTRY) == STEP_ORDER
    assert set(DEFAULT_STEPS) <= set(STEP_ORDER)
    assert "url_dedup" not in DEFAULT_STEPS and "tokenize" not in DEFAULT_STEPS
    assert all(step_spec(name).drops for name in STEP_ORDER[:7])
    with pytest.raises(KeyError, match="did you mean 'gopher_quality'"):
        step_spec("gopher_qualty")


def test_steps_run_in_canonical_order():
    config = RefineConfig(steps=("pii", "minhash", "language"))
    assert config.steps == ("language", "minhash", "pii")
    assert config.enabled("minhash") and not config.enabled("c4_quality")


def test_config_round_trips_through_dicts():
    config = RefineConfig(
        steps=(*DEFAULT_STEPS, "url_dedup", "tokenize"),
        tasks=8,
        language=LanguageConfig(languages=("en", "de"), threshold=0.5),
        tokenize=TokenizeConfig(tokenizer="/models/qwen"),
        executor="slurm",
        executor_options={"partition": "cpu", "time": "01:00:00"},
    )
    data = config.to_dict()
    assert data["language"]["languages"] == ["en", "de"]
    assert RefineConfig.from_dict(data) == config
    partial = RefineConfig.from_dict({"gopher_quality": {"min_doc_words": 20}, "steps": ["language"]})
    assert partial.gopher_quality.min_doc_words == 20 and partial.gopher_quality.max_doc_words == 100_000
    assert partial.steps == ("language",)
    strings = RefineConfig.from_dict({"steps": "language, pii", "language": {"languages": "en,de"}})
    assert strings.steps == ("language", "pii") and strings.language.languages == ("en", "de")
    top_n = RefineConfig.from_dict({"gopher_repetition": {"top_n_grams": [[2, 0.3]]}})
    assert top_n.gopher_repetition.top_n_grams == ((2, 0.3),)


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        ({"steps": ["langauge"]}, KeyError, "did you mean 'language'"),
        ({"taks": 3}, KeyError, "did you mean 'tasks'"),
        ({"language": {"treshold": 0.2}}, KeyError, "config.language: unknown field 'treshold'"),
        ({"steps": ["tokenize"]}, ValueError, "needs tokenize.tokenizer"),
        ({"tasks": 0}, ValueError, "tasks must be >= 1"),
        ({"executor": "k8s"}, ValueError, "executor must be one of"),
        ({"language": {"threshold": 2}}, ValueError, "threshold"),
        ({"steps": ["pii", "pii"]}, ValueError, "twice"),
    ],
)
def test_config_errors_name_the_fix(data, error, match):
    with pytest.raises(error, match=match):
        RefineConfig.from_dict(data)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("https://Example.com/a?utm_source=x&b=1", "http://example.com:80/a?b=1", True),
        ("https://example.com/a?b=1&c=2#top", "https://example.com/a?c=2&b=1", True),
        ("https://example.com/a?fbclid=1", "https://example.com/a", True),
        ("https://example.com", "https://example.com/", True),
        ("https://example.com/a?output=print0", "https://example.com/a", False),
        ("https://example.com/a", "https://example.com/b", False),
    ],
)
def test_url_keys(a, b, same):
    assert (normalize_url(a) == normalize_url(b)) is same


def test_url_dedup_prefers_the_canonical_url():
    from types import SimpleNamespace

    from dripper.refine.steps import UrlDedupConfig, UrlKey, UrlPriority

    config = UrlDedupConfig()
    copy = SimpleNamespace(id="a", metadata={"url": "https://x.org/p?utm_source=feed"})
    page = SimpleNamespace(id="b", metadata={"url": "https://x.org/p"})
    nourl = SimpleNamespace(id="c", metadata={"url": None})
    assert UrlKey(config)(copy) == UrlKey(config)(page) != UrlKey(config)(nourl)
    assert UrlPriority(config)(page) > UrlPriority(config)(copy)


def test_quality_words_read_through_markdown():
    from dripper.refine.language import QualityWordTokenizer, markdown_words_view

    text = "## The title\n\n- **bold** item with [a link](https://x.org/y)\n\n| a | b |\n| --- | --- |\n| 1 | 2 |"
    view = markdown_words_view(text)
    assert "#" not in view and "*" not in view and "https" not in view and "|" not in view
    assert "a link" in view and "snake_case" in markdown_words_view("snake_case stays")
    words = QualityWordTokenizer("en").word_tokenize(text)
    assert "title" in words and "link" in words and "#" not in words and "|" not in words
    raw = QualityWordTokenizer("en", strip_markdown=False).word_tokenize(text)
    assert "|" in raw
    assert QualityWordTokenizer("en") == QualityWordTokenizer("en") != QualityWordTokenizer("en", False)
    assert len({QualityWordTokenizer("en"), QualityWordTokenizer("en")}) == 1


def test_language_filter():
    from datatrove.data import Document

    from dripper.refine.language import LanguageIdFilter, check_languages

    english = Document("The committee published its annual report on the state of the river today.", "en")
    german = Document(
        "Der Ausschuss hat heute seinen jährlichen Bericht über den Zustand des Flusses veröffentlicht.", "de"
    )
    tiny = Document("ok 42", "tiny")
    keep_en = LanguageIdFilter(("en",), threshold=0.65)
    assert keep_en.filter(english) is True
    assert english.metadata["language"] == "en" and english.metadata["language_score"] > 0.65
    assert keep_en.filter(german) == (False, "wrong_language")
    assert german.metadata["language"] == "de"
    assert LanguageIdFilter((), threshold=0.65).filter(german) is True
    assert LanguageIdFilter(("en",), threshold=0.65, label_only=True).filter(german) is True
    assert LanguageIdFilter((), threshold=0.99).filter(tiny) == (False, "low_language_score")
    with pytest.raises(ValueError, match="ISO 639-1"):
        check_languages(("eng",))


def test_slurm_passes_are_chained_not_submitted(tmp_path):
    from datatrove.executor import SlurmPipelineExecutor

    from dripper.refine.pipeline import Layout, build_executors, build_passes

    config = RefineConfig(
        steps=("language", "minhash"),
        tasks=3,
        executor="slurm",
        executor_options={"partition": "cpu", "time": "01:00:00", "venv_path": "/opt/venv/bin/activate"},
    )
    layout = Layout(str(tmp_path / "in"), str(tmp_path / "out"))
    passes = build_passes(layout, ["part-00000.parquet"], config)
    assert [p.name for p in passes] == [
        "filter",
        "minhash_signatures",
        "minhash_buckets",
        "minhash_clusters",
        "finalize",
    ]
    assert [p.tasks for p in passes] == [3, 3, 14, 1, 3]
    executors = build_executors(passes, layout, config)
    assert all(isinstance(e, SlurmPipelineExecutor) for e in executors)
    assert executors[0].depends is None
    assert all(e.depends is prev for prev, e in zip(executors, executors[1:], strict=False))
    assert executors[2].partition == "cpu" and executors[2].job_name == "refine_minhash_buckets"
    with pytest.raises(ValueError, match="partition"):
        build_executors(passes, layout, config.replace(executor_options={"time": "1:00:00"}))


def test_importing_the_configs_imports_no_datatrove():
    import subprocess
    import sys

    code = (
        "import sys; from dripper.refine import RefineConfig, STEP_ORDER; RefineConfig(); "
        "assert 'datatrove' not in sys.modules and 'tokenizers' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=str(__import__("pathlib").Path(__file__).parents[2])
    )
