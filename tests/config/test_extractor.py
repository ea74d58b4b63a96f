"""Extractor specs: one format for every front end, errors that name the extractor and the field."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dripper.config.extractor import (
    ExtractorSpec,
    ExtractorSpecError,
    check_labeler_options,
    load_extractor_file,
    parse_extractor,
    parse_extractors,
)


def test_plain_names_are_shorthand():
    spec = parse_extractor("cpu")
    assert spec == ExtractorSpec(name="cpu", labeler="cpu")
    assert (spec.fallback, spec.fallback_on_empty, spec.options) == ("trafilatura", False, {})
    assert parse_extractor("tests.mod:Factory").name == "tests.mod-Factory"


def test_named_specs_with_options_in_every_form():
    text = parse_extractor(
        "v10=vllm,model=/models/MinerU-HTML,answer_format=json,max_model_len=8192,fallback=none"
    )
    as_json = parse_extractor(json.dumps(text.to_dict()))
    as_dict = parse_extractor(
        {
            "name": "v10",
            "labeler": "vllm",
            "options": {"model": "/models/MinerU-HTML", "answer_format": "json", "max_model_len": 8192},
            "fallback": None,
        }
    )
    assert text == as_json == as_dict
    assert text.options["max_model_len"] == 8192  # JSON values
    assert text.fallback is None
    assert text.is_lm and text.needs_gpu
    assert not parse_extractor("t=torch,model=/m,device=cpu").needs_gpu
    assert (
        text.describe()
        == "v10 = vllm (model=MinerU-HTML, answer_format=json, max_model_len=8192), fallback none"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "f=cpu,fallback=readability",
            r"extractor 'f': fallback: Input should be 'trafilatura', 'trafilatura_fast' or 'empty'",
        ),
        ("has space=cpu", r"extractor 'has space': name: String should match pattern"),
        ("n=cpu,novalue", r"extractor 'n': 'novalue' is not KEY=VALUE"),
        (
            {"name": "e", "labeler": "cpu", "extra": 1},
            r"extractor 'e': extra: Extra inputs are not permitted",
        ),
    ],
)
def test_structure_errors_name_the_extractor_and_the_field(value, message):
    with pytest.raises(ExtractorSpecError, match=message):
        parse_extractor(value)


def test_option_names_are_checked_against_the_labeler():
    with pytest.raises(
        ExtractorSpecError, match=r"extractor 'c': options\.thresold: .*did you mean 'threshold'"
    ):
        check_labeler_options(parse_extractors(["c=cpu,thresold=0.6"]))
    with pytest.raises(
        ExtractorSpecError, match=r"extractor 'q': labeler: unknown labeler 'vlm'.*did you mean 'vllm'"
    ):
        check_labeler_options(parse_extractors(["q=vlm"]))
    check_labeler_options(
        parse_extractors(["cpu", "c2=cpu,threshold=0.6", "v=vllm,model=/m,gpu_memory_utilization=0.5"])
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("c=cpu,decision=vote", r"extractor 'c': options: decision 'vote': choose one of"),
        ("c=cpu,min_page_confidence=1.5", r"extractor 'c': options: min_page_confidence 1.5: need"),
        ("c=cpu,threshold=0", r"extractor 'c': options: threshold 0.0: need a probability in \(0, 1\)"),
        (
            "x=vllm,model=/m,answer_format=compakt",
            r"extractor 'x': options: answer_format 'compakt': choose one of compact, json; did you mean 'compact'",
        ),
        ("y=vllm", r"extractor 'y': options\.model: the vllm labeler needs model \(a local model folder"),
        ("z=torch,model=", r"extractor 'z': options\.model: the torch labeler needs model"),
        ("o=openai,model=/m", r"extractor 'o': options\.base_url: the openai labeler needs base_url"),
    ],
)
def test_option_values_are_checked_before_any_shard_runs(value, message):
    with pytest.raises(ExtractorSpecError, match=message):
        check_labeler_options(parse_extractors([value]))
    # A model path is left to the workers (it may exist there only).
    check_labeler_options(parse_extractors(["c=cpu,model=/on/the/workers.json.gz,min_page_confidence=0.9"]))


def test_names_are_unique_in_a_run():
    with pytest.raises(ExtractorSpecError, match=r"extractor 'cpu': name used twice"):
        parse_extractors(["cpu", "cpu=cpu,threshold=0.6"])
    specs = parse_extractors(["a=vllm,model=/m", "b=vllm,model=/m,answer_format=json"])
    assert [s.name for s in specs] == ["a", "b"]
    with pytest.raises(ExtractorSpecError, match="no extractor given"):
        parse_extractors([])


def test_spec_files(tmp_path):
    (tmp_path / "ok.yaml").write_text(
        "extractors:\n  - cpu\n  - {name: v11, labeler: vllm, options: {model: /models/v1.1}}\n"
        "  - v10=vllm,model=/models/v1.0,answer_format=json\n"
    )
    assert [s.name for s in load_extractor_file(tmp_path / "ok.yaml")] == ["cpu", "v11", "v10"]
    (tmp_path / "bad.json").write_text(json.dumps([{"name": "v", "labeler": "vllm", "fallback": "x"}]))
    with pytest.raises(ExtractorSpecError, match=r"bad\.json: extractor 'v': fallback"):
        load_extractor_file(tmp_path / "bad.json")


def test_the_module_is_light_enough_for_dag_files():
    """Importing it pulls in no labeler, engine or data library (DAG files import it at parse time)."""
    code = (
        "import sys, dripper.config.extractor as m; m.parse_extractors(['cpu', 'v=vllm,model=/m']);"
        "heavy = [n for n in ('torch', 'vllm', 'lxml', 'pyarrow', 'dripper.labelers') if n in sys.modules];"
        "print(heavy)"
    )
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "[]"
    )


def test_a_labeler_given_by_its_fields_names_its_folder_by_them():
    """``dripper run extract --labeler …`` names a configuration's folder by its fields (``labeler_spec``);
    other options, another folder."""
    from dripper.config.extractor import labeler_spec

    assert labeler_spec("cpu").name == "cpu" and labeler_spec("cpu").fallback == "trafilatura"
    assert labeler_spec("cpu", fallback="none").name == "cpu-nofallback"
    assert labeler_spec("cpu", fallback="empty", fallback_on_empty=True).name == "cpu-fb-empty-onempty"
    vllm = labeler_spec("vllm", {"model": "/models/MinerU-HTML/", "answer_format": "json"})
    assert vllm.name.startswith("vllm-MinerU-HTML-") and vllm.options["answer_format"] == "json"
    assert vllm.name != labeler_spec("vllm", {"model": "/models/MinerU-HTML/"}).name
    assert labeler_spec("trafilatura", {}, None).name == "trafilatura-nofallback"
    assert labeler_spec("pkg.mod:factory", {"x": 1}).name != labeler_spec("pkg.mod:factory", {"x": 2}).name


def test_a_recorded_spec_is_the_same_spec_whatever_the_placement_or_an_added_field(tmp_path):
    """``_extractor.json`` written before ``gpu`` existed, or with another ``gpu``, makes the same pages: the
    folder is continued; a spec that makes other pages is refused."""
    from dripper.stages.extractor import EXTRACTOR_FILE, record_extractor

    older = {
        "name": "cpu",
        "labeler": "cpu",
        "options": {},
        "fallback": "trafilatura",
        "fallback_on_empty": False,
    }
    (tmp_path / EXTRACTOR_FILE).write_text(json.dumps(older))
    assert record_extractor(str(tmp_path), "cpu") == older
    assert record_extractor(str(tmp_path), {"name": "cpu", "labeler": "cpu", "gpu": True}) == older
    with pytest.raises(ValueError, match="this folder holds extractor 'cpu'"):
        record_extractor(str(tmp_path), {"name": "cpu", "labeler": "cpu", "fallback": "empty"})
    assert parse_extractor("g=cpu,gpu=true").needs_gpu and not parse_extractor("cpu").needs_gpu
    assert (
        parse_extractor("v=vllm,model=/m").needs_gpu
        and not parse_extractor("v=vllm,model=/m,gpu=false").needs_gpu
    )


def test_the_output_format_is_the_specs_and_changes_no_shard(tmp_path):
    """``output`` (Markdown or plain-text documents): Markdown by default, plain text for the whole-page
    extractors, which make nothing else; a new one replaces the recorded one without a recompute."""
    from dripper.stages.extractor import EXTRACTOR_FILE, record_extractor

    assert parse_extractor("cpu").output == "markdown"
    assert parse_extractor("fineweb").output == "text" and parse_extractor("dclm").output == "text"
    text = parse_extractor("plain=cpu,output=text")
    assert text.output == "text" and text.describe() == "plain = cpu, text output"
    assert parse_extractor(json.dumps(text.to_dict())) == text
    with pytest.raises(ExtractorSpecError, match="output: fineweb makes plain text only"):
        parse_extractor("f=fineweb,output=markdown")
    with pytest.raises(
        ExtractorSpecError, match="extractor 'x': output: Input should be 'markdown' or 'text'"
    ):
        parse_extractor("x=cpu,output=html")
    record_extractor(str(tmp_path), "cpu")
    assert record_extractor(str(tmp_path), "cpu,output=text")["output"] == "text"
    assert json.loads((tmp_path / EXTRACTOR_FILE).read_text())["output"] == "text"


CASCADE = {"name": "casc", "labeler": "cpu", "route": {"labeler": "oracle", "share": 0.3}}


def test_a_cascade_spec_in_its_json_form():
    spec = parse_extractor(json.dumps(CASCADE))
    assert spec.route.labeler == "oracle" and spec.route.share == 0.3 and spec.route.below is None
    assert not spec.needs_gpu and not spec.route.needs_gpu
    lm = parse_extractor(
        {
            "name": "c",
            "labeler": "cpu",
            "route": {"labeler": "vllm", "options": {"model": "/m/x"}, "below": 0.9},
        }
    )
    assert lm.route.needs_gpu and not lm.needs_gpu  # the first step stays on CPU workers
    assert lm.describe() == "c = cpu, route below 0.9 to vllm (model=x)"
    assert parse_extractor(lm.to_dict()) == lm
    check_labeler_options([spec, lm])


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ({"share": 0.3}, r"extractor 'casc': route\.labeler: Field required"),
        ({"labeler": "oracle"}, r"extractor 'casc': route: give exactly one of share .* got neither"),
        ({"labeler": "oracle", "share": 0.3, "below": 0.9}, r"route: give exactly one of share .* got both"),
        ({"labeler": "oracle", "share": 0}, r"route\.share: Input should be greater than 0"),
        ({"labeler": "oracle", "share": 1.5}, r"route\.share: Input should be less than or equal to 1"),
        ({"labeler": "oracle", "below": -1}, r"route\.below: Input should be greater than or equal to 0"),
        ({"labeler": "oracle", "share": 0.3, "budget": 1}, r"route\.budget: Extra inputs are not permitted"),
    ],
)
def test_cascade_errors_name_the_route_field(route, message):
    with pytest.raises(ExtractorSpecError, match=message):
        parse_extractor({**CASCADE, "route": route})


def test_a_route_labeler_is_checked_like_the_first():
    with pytest.raises(
        ExtractorSpecError, match=r"'casc': route\.options\.model: the vllm labeler needs model"
    ):
        check_labeler_options([parse_extractor({**CASCADE, "route": {"labeler": "vllm", "share": 0.3}})])
    with pytest.raises(ExtractorSpecError, match=r"'casc': route\.labeler: unknown labeler 'orcle'.*oracle"):
        check_labeler_options([parse_extractor({**CASCADE, "route": {"labeler": "orcle", "share": 0.3}})])
    with pytest.raises(ExtractorSpecError, match=r"'casc': route\.options\.thresold: .*'threshold'"):
        check_labeler_options(
            [
                parse_extractor(
                    {**CASCADE, "route": {"labeler": "cpu", "options": {"thresold": 1}, "share": 1}}
                )
            ]
        )
