"""One pass where no GPU is needed: ``dripper run extract --input WARCS`` writes the extracted shards the
two passes write, with no ``simplified/`` folder, the same Markdown as ``dripper extract`` on the same pages,
the same accounting, and resumes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from dripper.cli import main as cli_main
from dripper.config.extract import ExtractStageConfig
from dripper.decode import decode_html
from dripper.io.warc import iter_warc_pages
from dripper.stages.one_pass import chooses_one_pass
from dripper.stages.simplify import resolve_warc_inputs

from .conftest import LONG_BLOCKS, SAMPLE_SNAPSHOT, comparable, read_stage


def _run(capsys, *argv: str) -> dict:
    code = cli_main(["run", *argv, "--quiet"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out[out.rfind("\n{") + 1 :])


def test_one_pass_equals_two_passes_and_dripper_extract(tmp_path, capsys):
    warc = resolve_warc_inputs(SAMPLE_SNAPSHOT)[1]  # the file with a corrupt gzip member and junk
    one, two = tmp_path / "one", tmp_path / "two"
    common = ["--input", warc, "--extractor", "cpu", "--workers", "0"]
    single = _run(capsys, "extract", *common, "--output", str(one))
    assert single["written"] == 1
    assert not (one / "simplified").exists()  # no intermediate at all
    _run(capsys, "extract", *common, "--output", str(two), "--one-pass", "never")
    assert (two / "simplified").is_dir()
    extracted_one = read_stage(str(one / "extractors" / "cpu"), "extracted")
    extracted_two = read_stage(str(two / "extractors" / "cpu"), "extracted")
    assert comparable(extracted_one) == comparable(extracted_two)  # every column, stats less timings

    # dripper extract on the same pages, decoded to text: the same Markdown.
    pages = tmp_path / "pages.jsonl.gz"
    with gzip.open(pages, "wt") as out:
        for page in iter_warc_pages(warc):
            html = decode_html(page.payload, page.http_charset).text
            out.write(json.dumps({"id": page.doc_id, "url": page.url, "html": html}) + "\n")
    assert cli_main(["extract", "--input", str(pages), "--output", str(tmp_path / "out.jsonl"),
                     "--extractor", "cpu", "--format", "json"]) == 0  # fmt: skip
    direct = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    by_id = comparable(extracted_one)
    assert len(direct) == len(by_id)
    assert all(by_id[record["id"]]["markdown"] == record["markdown"] for record in direct)

    # The datatrove step on the same WARC records: the same Markdown for every page it forwards (it drops,
    # counted, the pages left without text).
    from dripper.datatrove import DripperExtractor, DripperWarcReader

    reader = DripperWarcReader(str(Path(warc).parent), glob_pattern=Path(warc).name, keep_truncated=False)
    step = DripperExtractor("cpu", sandbox="none", output="markdown")
    forwarded = {document.id: document.text for document in step.run(reader.run())}
    assert forwarded and all(text == by_id[doc_id]["markdown"] for doc_id, text in forwarded.items())
    assert set(forwarded) == {i for i, row in by_id.items() if row["markdown"].strip()}

    # The accounting of both stages in one: every record in, pages out, the reader's drops by reason.
    summary = json.loads((one / "extractors" / "cpu" / "_run_summary.json").read_text())["stages"][
        "extracted"
    ]
    simplified = json.loads((two / "_run_summary.json").read_text())["stages"]["simplified"]
    assert (summary["pages_in"], summary["pages_out"], summary["dropped"]) == (
        simplified["pages_in"], simplified["pages_out"], simplified["dropped"],
    )  # fmt: skip
    two_summary = json.loads((two / "extractors" / "cpu" / "_run_summary.json").read_text())
    assert summary["fallbacks"] == two_summary["stages"]["extracted"]["fallbacks"]
    assert summary["counters"]["warc_records"] == simplified["counters"]["warc_records"]

    # A rerun skips the finished shard; the run layout's later stages find the extractor's folder.
    again = _run(capsys, "extract", *common, "--output", str(one))
    assert (again["written"], again["skipped"]) == (0, 1)


def test_the_choice_between_one_pass_and_two(tmp_path):
    cpu = ExtractStageConfig(extractor="cpu")
    assert cpu.runs_one_pass() and chooses_one_pass(cpu, str(tmp_path))
    gpu = ExtractStageConfig(extractor={"name": "lm", "labeler": LONG_BLOCKS, "gpu": True})
    assert not gpu.runs_one_pass() and not chooses_one_pass(gpu, str(tmp_path))
    assert chooses_one_pass(gpu.model_copy(update={"one_pass": "always"}), str(tmp_path))
    assert not chooses_one_pass(cpu.model_copy(update={"one_pass": "never"}), str(tmp_path))
    # A run begun in two passes goes on in two (a rerun never mixes shards of both kinds).
    marker = Path(tmp_path, "simplified", "part-00000.done.json")
    marker.parent.mkdir()
    marker.write_text("{}")
    assert not chooses_one_pass(cpu, str(tmp_path))


def test_a_cascade_in_one_pass_routes_its_share(tmp_path, capsys):
    """A cascade whose second labeler needs no GPU runs in one pass: every page a row, the least sure share
    labelled by the second labeler, the routing counted in the shard's stats."""
    warc = resolve_warc_inputs(SAMPLE_SNAPSHOT)[0]
    spec = {"name": "casc", "labeler": "cpu", "route": {"labeler": "trafilatura", "share": 0.3}}
    out = tmp_path / "run"
    _run(
        capsys,
        "extract",
        "--input",
        warc,
        "--extractor",
        json.dumps(spec),
        "--workers",
        "0",
        "--output",
        str(out),
    )
    assert not (out / "simplified").exists()
    rows = read_stage(str(out / "extractors" / "casc"), "extracted")
    assert len(rows) == len(list(iter_warc_pages(warc)))
    summary = json.loads((out / "extractors" / "casc" / "_run_summary.json").read_text())
    counters = summary["stages"]["extracted"]["counters"]
    assert 0 < counters["route:pages_routed"] <= round(0.3 * counters["route:pages_scored"]) + 1
    assert sum(row["extractor"] == "dripper:trafilatura" for row in rows) > 0
