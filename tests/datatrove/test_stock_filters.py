"""The docs' datatrove example (docs/datatrove.md) as written, with the stock ``GopherQualityFilter``: our step's
default output is plain text, as datatrove's ``Trafilatura`` writes, so the stock filter drops no more of it
than of Trafilatura's (Markdown syntax counted as words once made it drop about half the sample)."""

from __future__ import annotations

from pathlib import Path

from dripper.datatrove import DripperExtractor, DripperWarcReader, QualityWordTokenizer

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"


def total(value) -> int:
    return value["total"] if isinstance(value, dict) else value


def through(documents, extractor):
    """Documents kept by ``extractor`` then the stock Gopher filter, and the filter's drop count."""
    from datatrove.pipeline.filters import GopherQualityFilter

    gopher = GopherQualityFilter()
    kept = list(gopher.run(extractor.run(iter(documents))))
    dropped = sum(total(v) for k, v in gopher.stats.to_dict()["stats"].items() if k == "dropped")
    return kept, dropped


def test_stock_gopher_drops_no_more_than_after_datatroves_trafilatura():
    from datatrove.data import Document
    from datatrove.pipeline.extractors import Trafilatura

    read = list(DripperWarcReader(str(SAMPLE / "crawl-data")).run())
    copies = lambda: [Document(d.text, d.id, metadata=dict(d.metadata)) for d in read]  # noqa: E731
    ours, ours_dropped = through(copies(), DripperExtractor("cpu"))
    # a generous bound: on a busy machine the 1 s default drops pages before the filter sees them
    theirs, theirs_dropped = through(copies(), Trafilatura(favour_precision=True, timeout=30))
    print(f"Gopher drops after DripperExtractor: {ours_dropped}, after Trafilatura: {theirs_dropped}")
    assert ours_dropped <= theirs_dropped
    assert len(ours) >= len(theirs) > 50
    assert not any(d.text.lstrip().startswith("#") or "**" in d.text for d in ours)  # no Markdown syntax


def test_markdown_kept_with_the_exported_word_tokenizer():
    """A pipeline that keeps Markdown gives the stock filter the Markdown-aware word counter."""
    from datatrove.pipeline.filters import GopherQualityFilter

    read = list(DripperWarcReader(str(SAMPLE / "crawl-data"), glob_pattern="**/*00000.warc.gz").run())
    markdown = list(DripperExtractor("cpu", output="markdown", sandbox="none").run(iter(read)))
    plain_counter = GopherQualityFilter()
    aware = GopherQualityFilter(language=QualityWordTokenizer("en"))  # as fineweb_pipeline's filters count
    kept_plain = {d.id for d in plain_counter.run(iter(markdown))}
    kept_aware = {d.id for d in aware.run(iter(markdown))}
    assert kept_plain < kept_aware
