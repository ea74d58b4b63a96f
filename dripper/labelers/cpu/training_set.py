"""Training pages for the CPU labeler: dev-format records → block features and ``oracle`` labels.

Each full-text page is simplified, its blocks get :func:`~dripper.labelers.cpu.features.page_features`
and the ``oracle`` alignment of its ground truth as labels. A snippet-only page (its ground truth a few
strings that must or must not appear) is *partially* labelled: a block holding a ``with`` snippet is main, a
block holding a ``without`` snippet is other, and every other block is unknown (``known`` false: not trained
on, never scored at block level). Its features still cover every block, so the second stage sees the
page whole.

Pages are grouped by *site* for cross-validation (the URL's registrable domain, else the page's canonical
or ``og:url`` host, else the host most of its absolute links point to, else the page itself): pages of one
site share a template, and a model tested on a site it was trained on is judged too kindly.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from dripper.labelers.cpu.features import PageFeatures, page_features
from dripper.labelers.oracle import align_blocks

__all__ = [
    "GROUPINGS",
    "PageExample",
    "TrainingSet",
    "assign_folds",
    "build_training_set",
    "example_with_page",
    "file_records",
    "file_sha256",
    "iter_records",
    "site_of",
    "snippet_labels",
]

_CANONICAL = re.compile(
    r"""<link[^>]+rel=["']?canonical["']?[^>]*href=["']([^"']+)"""
    r"""|<meta[^>]+property=["']og:url["'][^>]*content=["']([^"']+)"""
    r"""|<link[^>]+href=["']([^"']+)["'][^>]*rel=["']?canonical""",
    re.IGNORECASE,
)
_ABSOLUTE_LINK = re.compile(r"""href=["'](https?://[^"'/?#]+)""", re.IGNORECASE)
MIN_ORACLE_RECALL = 0.5
"""Pages whose main blocks (per the oracle) hold less of their ground truth than this are not trained on."""
_SECOND_LEVEL = frozenset({"co", "com", "org", "net", "ac", "gov", "edu", "ne", "or", "go"})


@dataclass(slots=True)
class PageExample:
    """One training page: its blocks' features and oracle labels.

    Attributes:
        doc_id: The record's ``id``.
        source: The record's ``source`` (collection).
        page_type: The record's ``page_type`` (dev_hard's WCXB pages), or ``None``.
        site: The group key for cross-validation (see :func:`site_of`).
        features: The blocks' features.
        labels: ``(n_blocks,)`` bool, the oracle's main/other (snippet pages: the snippets').
        known: ``(n_blocks,)`` bool, the blocks whose label is known (snippet pages), or ``None``: all.
    """

    doc_id: str
    source: str
    page_type: str | None
    site: str
    features: PageFeatures
    labels: np.ndarray
    known: np.ndarray | None = None

    @property
    def n_blocks(self) -> int:
        return self.features.n_blocks

    @property
    def partial(self) -> bool:
        """Only some blocks are labelled (a snippet page): no block-level score."""
        return self.known is not None


@dataclass
class TrainingSet:
    """The pages used for training and what was read to make them.

    Attributes:
        pages: The usable pages, in file order.
        files: Per input file: ``path`` (as given), ``sha256``, ``records``, ``used``.
        skipped: Pages not used, counted by reason.
    """

    pages: list[PageExample]
    files: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)

    def summary(self) -> dict:
        """Counts for the model's metadata: pages and blocks per source, files, skipped pages by reason."""
        per_source: Counter = Counter(page.source for page in self.pages)
        return {
            "files": self.files,
            "pages": len(self.pages),
            "blocks": int(sum(page.n_blocks for page in self.pages)),
            "main_blocks": int(sum(int(page.labels.sum()) for page in self.pages)),
            "snippet_pages": sum(page.partial for page in self.pages),
            "sites": len({page.site for page in self.pages}),
            "pages_per_source": dict(sorted(per_source.items())),
            "skipped": dict(self.skipped),
        }


def iter_records(path: str | Path) -> Iterator[dict]:
    """The JSON records of a dev-format JSONL file (plain or gzip): the project's one reader
    (:func:`dripper.io.jsonl.iter_json_records`), which names the file and line of any damage."""
    from dripper.io.jsonl import iter_json_records

    yield from iter_json_records(path)


def _registrable(host: str) -> str:
    host = host.lower().split(":")[0].removeprefix("www.")
    labels = host.split(".")
    if len(labels) >= 3 and labels[-2] in _SECOND_LEVEL and len(labels[-1]) == 2:
        return ".".join(labels[-3:])
    return ".".join(labels[-2:])


def site_of(record: dict) -> str:
    """The record's site (for grouping): registrable domain of its URL, canonical URL or usual link host."""
    url = record.get("url")
    host = urlsplit(url).netloc if url else ""
    html = record.get("html") or ""
    if not host:
        match = _CANONICAL.search(html)
        if match:
            host = urlsplit(next(group for group in match.groups() if group)).netloc
    if not host:
        hosts = Counter(urlsplit(link).netloc for link in _ABSOLUTE_LINK.findall(html[:300_000]))
        if hosts:
            host = hosts.most_common(1)[0][0]
    if host and "web.archive.org" not in host:
        return _registrable(host)
    return f"page:{record.get('source')}:{record.get('id')}"


def snippet_labels(
    block_texts: Sequence[str], with_snippets: Sequence[str], without_snippets: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Partial labels from snippets, matched as the snippet metric matches them (``dripper.eval.metrics``'
    Markdown normalisation, substring of one block's text).

    A ``with`` snippet found in exactly one block makes it main (in several, which one the metric credits
    is unknown); a ``without`` snippet makes every block holding it other. A block claimed by both stays
    unknown; a snippet spanning blocks labels none.

    Returns:
        ``(labels, known)``, both ``(n_blocks,)`` bool.
    """
    from dripper.markdown_text import normalize_markdown

    texts = [normalize_markdown(text) for text in block_texts]
    main = np.zeros(len(texts), dtype=bool)
    other = np.zeros(len(texts), dtype=bool)
    for snippets, hits_needed, mark in ((with_snippets, 1, main), (without_snippets, None, other)):
        for snippet in snippets:
            needle = normalize_markdown(snippet)
            hits = [index for index, text in enumerate(texts) if needle and needle in text]
            if hits and (hits_needed is None or len(hits) == hits_needed):
                mark[hits] = True
    known = main ^ other
    return main & known, known


def _example(record: dict) -> PageExample | str:
    """The page's :class:`PageExample`, or why it cannot be used."""
    return example_with_page(record)[0]


def example_with_page(record: dict) -> tuple[PageExample | str, object | None]:
    """The page's :class:`PageExample` (or why it cannot be used) and its ``SimplifiedPage`` (``None``
    where simplifying failed): for training sets that read more of each page than its features."""
    from dripper.simplify import simplify_html

    simplified = None
    ground_truth = record.get("ground_truth_text")
    with_snippets = record.get("with_snippets") or ()
    if (not ground_truth or not ground_truth.strip()) and not with_snippets:
        return "no full-text ground truth", simplified
    html = record.get("html")
    if not isinstance(html, str) or not html.strip():
        return "no html", simplified
    try:
        simplified = simplify_html(html, str(record.get("id")), record.get("url"))
    except Exception as error:  # a page the simplifier rejects is a page the labeler never sees
        return f"simplify failed: {type(error).__name__}", None
    if simplified.n_blocks == 0:
        return "no blocks", simplified
    texts = [block.text for block in simplified.blocks]
    if not ground_truth or not ground_truth.strip():
        labels, known = snippet_labels(texts, with_snippets, record.get("without_snippets") or ())
        if not labels.any():
            return "no with-snippet in one block", simplified
        return _page_example(record, simplified, labels, known), simplified
    alignment = align_blocks(ground_truth, texts)
    if not any(alignment.main):
        return "oracle found no main block", simplified
    if alignment.ground_truth_recall < MIN_ORACLE_RECALL:
        # The ground truth is mostly not in the page's blocks (a challenge page, another version of the
        # page): its labels would teach noise.
        return "oracle covers too little of the ground truth", simplified
    return _page_example(record, simplified, np.array(alignment.main, dtype=bool)), simplified


def _page_example(
    record: dict, simplified, labels: np.ndarray, known: np.ndarray | None = None
) -> PageExample:
    return PageExample(
        doc_id=str(record.get("id")),
        source=str(record.get("source") or "unknown"),
        page_type=record.get("page_type"),
        site=site_of(record),
        features=page_features(simplified),
        labels=labels,
        known=known,
    )


def _examples(records: list[dict]) -> list[PageExample | str]:
    return [_example(record) for record in records]


def _batches(records: Iterable[dict], size: int) -> Iterator[list[dict]]:
    batch: list[dict] = []
    for record in records:
        batch.append(record)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (hex), read in 1 MiB chunks: which data a training set was built from."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_records(
    path: Path,
    excluded: set[str],
    limit: int | None,
    skipped: Counter,
    excluded_sources: frozenset = frozenset(),
) -> list[dict]:
    """The records of one training file, at most ``limit``, without the ``excluded`` ids and the records of
    ``excluded_sources`` (counted in ``skipped``); a missing file is an error, not an empty set."""
    if not path.exists():
        raise FileNotFoundError(f"training data {path} does not exist")
    records = []
    for record in iter_records(path):
        if limit is not None and len(records) >= limit:
            break
        if str(record.get("id")) in excluded:
            skipped["excluded id"] += 1
            continue
        if record.get("source") in excluded_sources:
            skipped[f"excluded source {record.get('source')}"] += 1
            continue
        records.append(record)
    return records


def build_training_set(
    paths: Sequence[str | Path],
    workers: int = 1,
    exclude_ids: Iterable[str] = (),
    limit: int | None = None,
    progress: bool = False,
    exclude_sources: Iterable[str] = (),
) -> TrainingSet:
    """Simplify, label (``oracle``, or snippets: partially) and featurise the pages of dev-format files.

    Args:
        paths: JSONL(.gz) files of ``{id, html, url, ground_truth_text, source, page_type…}`` records.
        workers: Processes to use (1: this process).
        exclude_ids: Record ids to leave out (e.g. the bundled sample pages, kept for an honest test).
        limit: Read at most this many records per file.
        progress: Print a line per file to stderr.
        exclude_sources: Collections (the records' ``source``) to leave out, e.g. one whose licence does
            not allow training on it.

    Returns:
        The :class:`TrainingSet`, pages in file order.
    """
    import sys

    excluded = set(exclude_ids)
    training = TrainingSet(pages=[])
    for path in map(Path, paths):
        records = file_records(path, excluded, limit, training.skipped, frozenset(exclude_sources))
        if workers > 1:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                results = [item for batch in pool.map(_examples, _batches(records, 16)) for item in batch]
        else:
            results = _examples(records)
        used = 0
        for result in results:
            if isinstance(result, str):
                training.skipped[result] += 1
            else:
                training.pages.append(result)
                used += 1
        training.files.append(
            {"path": str(path), "sha256": file_sha256(path), "records": len(records), "used": used}
        )
        if progress:
            print(f"{path}: {len(records)} records, {used} used", file=sys.stderr)
    return training


# -- folds ------------------------------------------------------------------------------------------------

GROUPINGS = ("site", "page", "source")


def assign_folds(pages: Sequence[PageExample], folds: int, seed: int = 0, by: str = "site") -> np.ndarray:
    """Fold number of every page; pages of one group (site, page or source) share a fold.

    ``by="source"`` gives one fold per source (leave-one-source-out; ``folds`` is ignored). Otherwise the
    groups of each source are dealt, largest first (ties in a seeded random order), to the fold holding the
    fewest of that source's blocks, so every fold has a share of every source.
    """
    if by not in GROUPINGS:
        raise ValueError(f"grouping {by!r}: choose one of {GROUPINGS}")
    if by == "source":
        sources = sorted({page.source for page in pages})
        return np.array([sources.index(page.source) for page in pages], dtype=np.int64)
    if folds < 2:
        raise ValueError(f"need at least 2 folds, got {folds}")
    key = (lambda page: page.site) if by == "site" else (lambda page: f"{page.source}:{page.doc_id}")
    groups: dict[str, list[int]] = {}
    for index, page in enumerate(pages):
        groups.setdefault(key(page), []).append(index)
    rng = np.random.default_rng(seed)
    tiebreak = {
        name: float(value) for name, value in zip(sorted(groups), rng.random(len(groups)), strict=True)
    }
    by_source: dict[str, list[str]] = {}
    for name, members in groups.items():
        majority = Counter(pages[i].source for i in members).most_common(1)[0][0]
        by_source.setdefault(majority, []).append(name)
    fold_of = np.zeros(len(pages), dtype=np.int64)
    for source in sorted(by_source):
        load = np.zeros(folds)
        names = sorted(
            by_source[source],
            key=lambda name: (-sum(pages[i].n_blocks for i in groups[name]), tiebreak[name]),
        )
        for name in names:
            fold = int(np.argmin(load))
            for index in groups[name]:
                fold_of[index] = fold
            load[fold] += sum(pages[i].n_blocks for i in groups[name])
    return fold_of
