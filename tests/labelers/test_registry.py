"""The labeler registry: built-ins listed without importing them, plugins through the ``dripper.labelers``
entry-point group usable by name from the CLI, a spec and the Airflow form."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dripper.labelers.base import BUILTIN_LABELERS, available_labelers, build_labeler, labeler_factory

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "pages.jsonl.gz"

PLUGIN = '''
from dripper.labelers.base import BlockLabeler, Labels


class FirstBlock(BlockLabeler):
    """Main = the first block only."""

    name = "first-block"

    def label_batch(self, requests):
        return [Labels([i == 0 for i in range(r.simplified.n_blocks)]) for r in requests]
'''


@pytest.fixture
def plugin_path(tmp_path) -> Path:
    """A folder holding an installed distribution (as pip leaves it) that announces labeler ``first``."""
    (tmp_path / "tiny_plugin.py").write_text(PLUGIN)
    info = tmp_path / "tiny_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[dripper.labelers]\nfirst = tiny_plugin:FirstBlock\n")
    return tmp_path


def _run(code_or_args: list[str], plugin_path: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(plugin_path), str(REPO), str(REPO / "dags")])
    return subprocess.run(
        [sys.executable, *code_or_args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def test_listing_the_names_imports_no_labeler(plugin_path, tmp_path):
    code = (
        "import sys, json; from dripper.labelers.base import available_labelers, BUILTIN_LABELERS; "
        "names = available_labelers(); "
        "print(json.dumps([names, sorted(m for m in sys.modules if m.startswith('dripper.labelers.'))]))"
    )
    done = _run(["-c", code], plugin_path, tmp_path)
    names, modules = json.loads(done.stdout)
    assert names == sorted([*BUILTIN_LABELERS, "first"])
    assert modules == ["dripper.labelers.base"]


def test_a_plugin_labeler_is_usable_by_name_from_the_cli(plugin_path, tmp_path):
    out = tmp_path / "out.jsonl"
    args = ["-m", "dripper.cli", "extract", "--input", str(SAMPLE), "--output", str(out), "--limit", "4"]
    done = _run([*args, "--labeler", "first"], plugin_path, tmp_path)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["extractor"] for r in records] == ["dripper:first-block"] * 4
    assert all(r["labels"][0] and not any(r["labels"][1:]) for r in records)
    spec = json.dumps({"name": "casc", "labeler": "cpu", "route": {"labeler": "first", "share": 0.5}})
    done = _run([*args, "--extractor", spec], plugin_path, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stderr.strip().splitlines()[-1])["by_extractor"].get("dripper:first-block") == 2


def test_a_plugin_labeler_is_usable_by_name_from_a_form(plugin_path, tmp_path):
    """corpus_build's form proposes it, and the extract task's config takes it as its extractor (checked as a
    run checks it)."""
    code = (
        "import json, _params; from dripper.airflow.corpus import ExtractOperator; "
        "from dripper.config.extractor import check_labeler_options; "
        "field = _params.extractor_params()['extractor']; "
        "spec = ExtractOperator(task_id='extract', input_root='/tmp/r', config={'extractor': 'first'}).stage_config().extractor; "
        "check_labeler_options([spec]); "
        "print(json.dumps([field.schema['examples'], spec.name, spec.labeler]))"
    )
    done = _run(["-c", code], plugin_path, tmp_path)
    assert done.returncode == 0, done.stderr
    examples, name, labeler = json.loads(done.stdout.strip().splitlines()[-1])
    assert "first" in examples and (name, labeler) == ("first", "first")


def test_a_labeler_class_declares_what_its_spec_is_checked_for():
    """Required options, option values, GPU and LM are the class's (no table by labeler name): a labeler
    given by import path is checked and placed by what its class declares."""
    from dripper.config.extractor import ExtractorSpecError, check_labeler_options, parse_extractor

    path = "dripper.labelers.lm_common:LMLabeler"  # the LM labelers' base: model required, answer format
    assert parse_extractor(f"x={path},model=/m").is_lm and parse_extractor(f"x={path},model=/m").needs_gpu
    with pytest.raises(
        ExtractorSpecError, match=r"extractor 'v': options\.model: the vllm labeler needs model"
    ):
        check_labeler_options([parse_extractor("v=vllm")])
    with pytest.raises(ExtractorSpecError, match=r"answer_format 'jsn': choose one of compact, json"):
        check_labeler_options([parse_extractor("t=torch,model=/m,answer_format=jsn")])
    assert not parse_extractor("t=torch,model=/m,device=cpu").needs_gpu  # torch on CPU: a CPU worker
    assert not parse_extractor("o=openai,model=m,base_url=http://h/v1").needs_gpu  # the server has the GPU
    assert parse_extractor("o=openai,model=m,base_url=http://h/v1").is_lm
    assert not parse_extractor("cpu").is_lm and not parse_extractor("cpu").needs_gpu
    assert not parse_extractor("x=no_such_module:Labeler").needs_gpu  # may exist on the workers only


def test_unknown_names_and_import_paths():
    with pytest.raises(KeyError, match=r"unknown labeler 'orcale'.*did you mean 'oracle'"):
        labeler_factory("orcale")
    with pytest.raises(KeyError, match=r"cannot import 'Nothing' from 'dripper.labelers.base'"):
        build_labeler("dripper.labelers.base:Nothing")
    assert build_labeler("dripper.labelers.oracle:OracleLabeler").name == "oracle"
    assert "cpu" in available_labelers()
