"""One config per stage and its three front ends: every field's default is the same in the Python config,
the ``dripper run STAGE`` flag and the Airflow form (read from the built parser and the loaded DAGs, not
from a second list), and every field reaches the front ends its config says it does."""

from __future__ import annotations

import argparse
import inspect

import pytest

from dripper.config.evaluate import EvaluateStageConfig
from dripper.config.extract import ExtractStageConfig
from dripper.config.pretrain import PretrainStageConfig
from dripper.config.refine import RefineStageConfig
from dripper.config.report import ReportStageConfig
from dripper.config.settings import StageConfigError
from dripper.config.simplify import SimplifyStageConfig
from dripper.config.tokenize import TokenizeStageConfig

CONFIGS = [
    SimplifyStageConfig,
    ExtractStageConfig,
    RefineStageConfig,
    TokenizeStageConfig,
    PretrainStageConfig,
    EvaluateStageConfig,
    ReportStageConfig,
]
#: The flags each ``dripper run STAGE`` needs to parse at all.
REQUIRED = {"simplify": ["--input", "x", "--output", "y"], "report": ["--input", "x", "--extractor", "a"]}


def _stage_parser(stage: str) -> argparse.ArgumentParser:
    from dripper.cli import build_parser

    def subparsers(parser):
        return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices

    return subparsers(subparsers(build_parser())["run"])[stage]


def _env_free(monkeypatch) -> None:
    """The forms' proposed values without a deployment's environment."""
    for config in CONFIGS:
        for name in config.model_fields:
            if variable := config._meta(name).get("env"):
                monkeypatch.delenv(variable, raising=False)


@pytest.fixture(scope="module")
def forms():
    """Every DAG's params, loaded as the DAG processor loads them, with no DRIPPER_* override."""
    from airflow.dag_processing.dagbag import DagBag

    from tests.dags import DAGS_DIR

    with pytest.MonkeyPatch.context() as monkeypatch:
        _env_free(monkeypatch)
        bag = DagBag(str(DAGS_DIR))
    assert bag.import_errors == {}
    return {dag_id: dag.params for dag_id, dag in bag.dags.items()}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.stage)
def test_every_cli_flag_defaults_to_the_config(config):
    parser = _stage_parser(config.stage)
    args = parser.parse_args(REQUIRED.get(config.stage, ["--input", "x"]))
    assert config.cli_fields(), config.stage
    more = {}
    if config.stage == "extract":  # no --extractor: the spec is built from --labeler … (defaults: the same)
        from dripper.cli_run import extractor_from_arguments

        assert args.extractor is None
        more["extractor"] = extractor_from_arguments(args)
    for name in config.cli_fields():
        if name not in more:
            assert getattr(args, name) == config.default(name), (config.stage, name)
    assert config.from_arguments(args, **more) == config()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.stage)
def test_every_form_field_defaults_to_the_config(config, forms):
    """Each form field is in at least one DAG's form, with the config's default everywhere it is; a field a
    form requires (no default: the trigger form asks for it) is only allowed where the default is empty."""
    found = 0
    for name in config.form_field_names():
        form_name = config.form_name(name)
        for dag_id, params in forms.items():
            if form_name not in params:
                continue
            found += 1
            param = params.get_param(form_name)
            if param.has_value:
                assert param.value == config.default(name), (dag_id, form_name)
            else:
                assert config.default(name) is None, (dag_id, form_name)
        assert any(form_name in params for params in forms.values()), f"{form_name} is in no DAG's form"
    assert found


def test_form_fields_are_the_configs_and_carry_their_constraints(forms):
    params = forms["corpus_build"]
    assert params.get_param("extract_batch_size").schema["minimum"] == 1
    assert params.get_param("extractor").schema["type"] == "string"
    assert "cpu" in params.get_param("extractor").schema["examples"]  # from the registry
    assert params.get_param("refine_steps").schema["items"]["enum"][0] == "url_dedup"
    assert params.get_param("simplify_workers").schema["type"] == ["integer", "null"]
    for form_name in ("extract_batch_size", "refine_workers", "simplify_max_page_bytes"):
        assert params.get_param(form_name).description


def test_a_deployment_environment_proposes_other_values(monkeypatch):
    _env_free(monkeypatch)
    monkeypatch.setenv("DRIPPER_EXTRACT_WORKERS", "3")
    monkeypatch.setenv("DRIPPER_BENCHMARK_DATA", "/data/a.jsonl.gz,/data/b.jsonl.gz")
    assert ExtractStageConfig.form_fields()["extract_workers"]["default"] == 3
    assert ReportStageConfig.form_fields()["report_labelled_pages"]["default"] == [
        "/data/a.jsonl.gz",
        "/data/b.jsonl.gz",
    ]
    assert ExtractStageConfig().workers == 1  # the config and the CLI keep their default


def _stage_operators():
    """Each stage's operator, its config and the least it is built with."""
    from dripper.airflow.stages import (
        CheckSuiteOperator,
        EvaluateOperator,
        ExtractOperator,
        PretrainOperator,
        RefineOperator,
        SelectWarcsOperator,
        SimplifyBatchOperator,
        TokenizeOperator,
    )

    return [
        (SelectWarcsOperator, SimplifyStageConfig, {"crawl_id": "CC-MAIN-X"}),
        (SimplifyBatchOperator, SimplifyStageConfig, {"batch": {}}),
        (ExtractOperator, ExtractStageConfig, {"input_root": "/r"}),
        (RefineOperator, RefineStageConfig, {"root": "/r"}),
        (TokenizeOperator, TokenizeStageConfig, {"root": "/r"}),
        (PretrainOperator, PretrainStageConfig, {"tokens": "/t", "tokenizer": "/k"}),
        (EvaluateOperator, EvaluateStageConfig, {"model": {}}),
        (CheckSuiteOperator, EvaluateStageConfig, {}),
    ]


def _arguments(operator) -> set[str]:
    """Every keyword argument of an operator's own classes (not Airflow's ``BaseOperator``)."""
    return {
        name
        for cls in operator.__mro__
        if cls.__module__.startswith("dripper.") and "__init__" in vars(cls)
        for name in inspect.signature(cls.__init__).parameters
    }


def test_stage_operators_take_their_config_as_one_argument():
    """A stage's operator takes the stage's config as ``config`` (the config, or its values by field name as
    a form renders them) and no field of it as an argument of its own: the field list is the config's.
    Without a config the task runs on the config's defaults; a config given as an object comes back equal."""
    for operator, config, required in _stage_operators():
        arguments = _arguments(operator)
        assert operator.config_class is config and "config" in arguments, operator.__name__
        assert not arguments & set(config.model_fields), (
            operator.__name__,
            arguments & set(config.model_fields),
        )
        assert operator(task_id="t", **required).stage_config() == config(), operator.__name__
    given = ExtractStageConfig(extractor="v=cpu,min_confidence=0.5", batch_size=3)
    task = _stage_operators()[2][0](task_id="t", input_root="/r", config=given)
    assert task.config == {"extractor": {"name": "v", "labeler": "cpu", "options": {"min_confidence": 0.5}},
                           "batch_size": 3}  # fmt: skip
    assert task.stage_config() == given


def test_errors_name_the_stage_and_the_field():
    with pytest.raises(StageConfigError, match=r"extract config: batch_size: Input should be greater than"):
        ExtractStageConfig.parse(batch_size=0)
    with pytest.raises(StageConfigError, match=r"refine config: steps\.0: Input should be 'url_dedup'"):
        RefineStageConfig.parse(steps=["minhas"])
    with pytest.raises(StageConfigError, match=r"warc_count or warc_fraction, not both"):
        SimplifyStageConfig.parse(warc_count=2, warc_fraction=0.5)
    with pytest.raises(StageConfigError, match=r"Extra inputs are not permitted"):
        ExtractStageConfig.parse(batchsize=3)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.stage)
def test_one_name_per_setting(config):
    """No field has a second flag, and no operator argument spells a field another way (``count`` for
    ``warc_count`` was one): the CLI flag is the field's name, the form field its prefixed name."""
    parser = _stage_parser(config.stage)
    flags = {flag for action in parser._actions for flag in action.option_strings}
    for name in config.cli_fields():
        assert config._meta(name)["aliases"] == [], (config.stage, name)
        assert config.flag(name) == "--" + name.replace("_", "-") and config.flag(name) in flags
    if config.stage in ("simplify", "extract"):  # the Dask scheduler is the forms' dask_scheduler
        assert "--dask-scheduler" in flags and "--scheduler" not in flags
    spellings = {"count", "fraction", "processes", "max_payload", "max_page", "dask_workers", "labeler"}
    spellings |= {"labeler_model", "labeler_options", "fallback", "fallback_on_empty"}  # in the spec
    spellings |= {"extra_arguments", "workers"}  # the configs' arguments and workers
    for operator, _, _ in _stage_operators():
        assert not spellings & _arguments(operator), operator.__name__


def test_list_flags_take_spaces_or_commas():
    parser = _stage_parser("refine")
    args = parser.parse_args(["--input", "x", "--steps", "language,minhash", "pii", "--workers", "2"])
    config = RefineStageConfig.from_arguments(args)
    assert config.steps == ["language", "minhash", "pii"] and config.workers == 2
    args = _stage_parser("simplify").parse_args(["--input", "x", "--output", "y", "--warc-count", "3"])
    assert SimplifyStageConfig.from_arguments(args).warc_count == 3


def test_a_bad_flag_value_is_one_line_and_exit_2(capsys):
    from dripper.cli import main

    assert main(["run", "refine", "--input", "x", "--steps", "minhas"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("dripper: error: refine config: steps.0:") and "\n" not in error
