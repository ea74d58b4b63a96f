"""DripperExtractor: the extractor of a spec as a datatrove step, with datatrove's conventions (a bound on each
document's time, stats, metadata) and the pipeline's results."""

from __future__ import annotations

from pathlib import Path

import pytest
from datatrove.data import Document

from dripper.datatrove import DripperExtractor, DripperWarcReader
from dripper.datatrove.extractor import ExtractorBuildError
from dripper.io.warc import iter_warc_pages
from dripper.markdown_text import markdown_plain_text
from dripper.pipeline import Extractor

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
MISBEHAVING = "tests.datatrove.labelers:MisbehavingLabeler"


def total(value) -> int:
    return value["total"] if isinstance(value, dict) else value


def stats_of(step) -> dict[str, int]:
    return {key: total(value) for key, value in step.stats.to_dict()["stats"].items()}


@pytest.fixture(scope="module")
def sample_documents():
    return list(DripperWarcReader(str(SAMPLE)).run())


def pages_of(documents):
    return [(d.id, d.text, d.metadata.get("url"), None) for d in documents]


def test_same_markdown_as_the_pipeline_on_the_warc_records(sample_documents):
    step = DripperExtractor("cpu", sandbox="none", output="markdown")
    out = {
        d.id: d
        for d in step.run([Document(d.text, d.id, metadata=dict(d.metadata)) for d in sample_documents])
    }
    pipeline = Extractor.from_spec("cpu")
    # The reader forwards truncated records, as datatrove's does
    warcs = sorted(SAMPLE.rglob("*.warc.gz"))
    pages = [p.to_page() for f in warcs for p in iter_warc_pages(str(f), keep_truncated=True)]
    results = {r.doc_id: r for r in pipeline.extract_batch(pages)}
    assert len(results) == len(sample_documents) == 198
    kept = [r for r in results.values() if r.extractor != "none" and r.markdown.strip()]
    assert set(out) == {r.doc_id for r in kept}
    for result in kept:
        document = out[result.doc_id]
        assert document.text == result.markdown
        assert document.metadata["extractor"] == result.extractor
        assert document.metadata["fallback_reason"] == result.fallback_reason
        assert document.metadata["page_confidence"] == result.stats.get("page_confidence")
        assert document.metadata["labeler"] == "cpu"
    stats = stats_of(step)
    assert stats["total"] == 198
    assert stats["forwarded"] + stats["dropped"] == 198
    assert sum(v for k, v in stats.items() if k.startswith("dropped:")) == stats["dropped"]
    assert sum(v for k, v in stats.items() if k.startswith("extractor:")) >= stats["forwarded"]
    assert stats["extractor:dripper:cpu"] > 150
    assert stats["dropped:not_html"] == 1  # the binary junk labelled text/html


def test_bytes_in_and_plain_text_out_by_default(sample_documents):
    """Plain text by default, as datatrove's Trafilatura step writes; Markdown on request."""
    document = sample_documents[0]
    raw = document.text.encode("utf-8")
    markdown_step = DripperExtractor("cpu", sandbox="none", output="markdown")
    markdown = next(markdown_step.run([Document(raw, "a", metadata={"url": "u"})]))
    text = next(DripperExtractor("cpu", sandbox="none").run([Document(raw, "a", metadata={})]))
    assert (
        markdown.text == next(markdown_step.run([Document(document.text, "a", metadata={"url": "u"})])).text
    )
    assert text.text == markdown_plain_text(markdown.text)
    assert "\n\n" in text.text and "**" not in text.text and not text.text.startswith("#")


def test_bad_spec_fails_when_the_pipeline_is_built():
    with pytest.raises(Exception, match="nosuch"):
        DripperExtractor("nosuch")
    with pytest.raises(ValueError, match="sandbox"):
        DripperExtractor("cpu", sandbox="thread")


def docs(n: int, stall: int | None, html: str) -> list[Document]:
    url = "https://example.org/{}"
    return [
        Document(html, f"d{i}", metadata={"url": url.format("stall" if i == stall else f"ok{i}")})
        for i in range(n)
    ]


PAGE = "<html><body><article><h1>Title</h1><p>" + "Some words of text. " * 30 + "</p></article></body></html>"


@pytest.mark.parametrize("sandbox", ["process", "signal"])
def test_a_document_past_its_time_is_dropped_and_its_batch_kept(sandbox, tmp_path):
    """The process sandbox bounds each document of a CPU spec by itself: nothing is labelled twice. The
    signal sandbox bounds the batch (as for an LM) and retries it one by one after a hang."""
    log = tmp_path / "labelled.txt"
    spec = {"name": "stalls", "labeler": MISBEHAVING, "options": {"mode": "sleep", "log": str(log)}}
    step = DripperExtractor(spec, sandbox=sandbox, timeout=1.0, batch_size=4)
    assert step.per_document == (sandbox == "process")
    out = list(step.run(docs(6, stall=2, html=PAGE)))
    assert [d.id for d in out] == ["d0", "d1", "d3", "d4", "d5"]
    stats = stats_of(step)
    assert stats["dropped:timeout"] == 1
    assert all(d.metadata["extractor"] == "dripper:misbehaving" for d in out)
    labelled = log.read_text().split()
    if sandbox == "process":
        assert "batches_retried" not in stats
        assert sorted(labelled) == sorted(
            f"https://example.org/{u}" for u in ("ok0", "ok1", "stall", "ok3", "ok4", "ok5")
        )
    else:  # the batch that hung is labelled again, one by one
        assert stats["batches_retried"] == 1 and labelled.count("https://example.org/ok0") == 2


def test_a_fallback_that_hangs_loses_only_its_document(monkeypatch, tmp_path):
    """The fallback runs inside the document's bound: a page it hangs on is dropped, the others kept, and
    none of them extracted twice."""
    import time

    import dripper.fallback
    from dripper.fallback import Fallback

    class Hangs(Fallback):
        name = "trafilatura"

        def main_html(self, html, url):
            time.sleep(60)
            return html

    monkeypatch.setitem(dripper.fallback._FALLBACKS, "trafilatura", Hangs)  # inherited by the forked child
    log = tmp_path / "labelled.txt"
    spec = {"name": "declines", "labeler": MISBEHAVING, "options": {"mode": "decline", "log": str(log)}}
    step = DripperExtractor(spec, sandbox="process", timeout=1.0, batch_size=4)
    out = list(step.run(docs(5, stall=1, html=PAGE)))
    assert [d.id for d in out] == ["d0", "d2", "d3", "d4"]
    assert stats_of(step)["dropped:timeout"] == 1
    assert sorted(log.read_text().split()) == sorted(
        f"https://example.org/{u}" for u in ("ok0", "stall", "ok2", "ok3", "ok4")
    )


def test_a_child_that_dies_loses_only_its_document():
    spec = {"name": "dies", "labeler": MISBEHAVING, "options": {"mode": "exit"}}
    step = DripperExtractor(spec, sandbox="process", timeout=5.0, batch_size=3)
    out = list(step.run(docs(5, stall=1, html=PAGE)))
    assert [d.id for d in out] == ["d0", "d2", "d3", "d4"]
    assert stats_of(step)["dropped:broken_process"] == 1


def test_an_extractor_that_cannot_be_built_ends_the_task():
    spec = {"name": "broken", "labeler": MISBEHAVING, "options": {"mode": "sleep"}}
    step = DripperExtractor(spec, sandbox="process", timeout=5.0)
    step.spec = step.spec.model_copy(update={"options": {"mode": "sleep", "unknown": 1}})
    with pytest.raises(ExtractorBuildError, match="cannot be built"):
        list(step.run(docs(2, stall=None, html=PAGE)))
