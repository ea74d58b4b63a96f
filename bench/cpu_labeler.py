"""The CPU labeler: end-to-end speed against Trafilatura, and out-of-fold quality against the baselines.

Usage::

    .venv/bin/python bench/cpu_labeler.py speed [--data FILE…] [--limit N] [--model MODEL] [--profile OUT]
        [--labeler-option KEY=VALUE…]
    .venv/bin/python bench/cpu_labeler.py memory [--data FILE…] [--synthetic-mb MB]
    .venv/bin/python bench/cpu_labeler.py reference (--write OUT.jsonl.gz | --check FILE) [--data FILE…]
    .venv/bin/python bench/cpu_labeler.py quality [--data FILE…] [--by site|page|source] [--folds K]
        [--lump-sources NAME=SOURCE,SOURCE…]
        [--baselines trafilatura resiliparse readability] [--workers N] [--out SUMMARY.json]
        [--pages-out PAGES.jsonl] [--resamples R]
    .venv/bin/python bench/cpu_labeler.py compare PAGES.jsonl [--previous EARLIER_PAGES.jsonl]

``speed``: one process, pages given as UTF-8 bytes; per chunk of pages, Dripper with the ``cpu`` labeler
(decode, simplify, label, reconstruct, Markdown) then Trafilatura (``extract``, Markdown, tables, no
comments) on the same bytes, alternating so that both see the same machine load. CPU time of this process
is the measure (pages/s per core); wall time is printed too.

``speed`` prints these per data file (dev, dev_hard) and for all pages, with each step's CPU ms per page
(timers wrapped around the step functions): simplify, features (both stages), trees (both stages), render
(reconstruct, serialise, Markdown), fallback, other (decoding, checks, batching). ``--profile FILE``
profiles Dripper's calls (not Trafilatura's) with cProfile and prints the top entries.

``memory``: peak RSS of a fresh worker process (imports, model, one page) on the largest page of
``--data`` (default dev_hard), and on a synthetic page of ``--synthetic-mb`` MB.

``reference``: per page, hashes of the features and probabilities, the labels and confidences, and hashes
of the Markdown and main HTML: ``--write`` them from one version of the code, ``--check`` another version
against them (a faster path must give the same outputs; ``tests/dripper_core/labelers/cpu/
test_reference_outputs.py`` checks the bundled sample against a file written before the fast path).

``quality``: every page is labelled by a model that never saw it. The training pages (full-text pages of
``--data``) are split into folds grouped by site (``--by site``, the default), by page, or one fold per
source (``--by source``: leave-one-source-out; ``--lump-sources NAME=A,B`` holds A and B out together, as
one fold); each page is extracted with the model of the fold that held out its group (pages outside every
fold, such as snippet-only pages, with any fold's model: none saw them) and scored by ``eval`` (ROUGE-5 F1 raw and normalised, snippet F1) beside the baselines run on the
same pages. Default data: ``../shared/data/dev.jsonl.gz`` and ``dev_hard.jsonl.gz`` (the bundled sample
when absent). It ends with the model's lead over each baseline, per file and on the article files (dev and
dev_fundus) together, with a 95% paired-bootstrap interval over the pages (``eval.paired``): a lead whose
interval excludes zero is marked as beyond noise.
Beside the model's row it scores ``dripper:cpu-oof/ungated``: the model's own labels on every page, the
pages its confidence gates (``min_confidence``, ``min_page_confidence``) send to the fallback included, with
each page's best block confidence and page confidence (the expected F1 of its labels) in the per-page info;
the last table says, per file, how the declined pages score with the fallback and with the model's labels
(what the gate gains or loses), then replays other pairs of gates from those two numbers, with the share
of pages each would send to the fallback (``compare`` prints it too).

``compare``: the same leads from a ``--pages-out`` file, and with ``--previous`` (the ``--pages-out`` of
an earlier run on the same pages, e.g. with the code of the shipped model) also the lead over that run's
model, so a retrained model is compared page for page with the one it replaces.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import itertools
import json
import pickle
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dripper_core.types import Page  # noqa: E402


def _default_data() -> list[Path]:
    shared = REPO.parent / "shared" / "data"
    files = [shared / "dev.jsonl.gz", shared / "dev_hard.jsonl.gz"]
    if all(path.exists() for path in files):
        return files
    return [REPO / "data" / "sample" / "pages.jsonl.gz"]


def _records(paths: Sequence[Path], limit: int | None) -> list[dict]:
    """The records of the data files, at most ``limit`` per file."""
    from dripper_core.labelers.cpu.training_set import iter_records

    return [record for path in paths for record in itertools.islice(iter_records(path), limit)]


# -- speed ------------------------------------------------------------------------------------------------


_STEPS = ("simplify", "features", "trees", "render", "fallback")
# Timed inside simplify: the parses and the copy any simplifier with today's output needs (bench/simplify.py).
_PARSE_FLOOR = "parse floor"


class _StepClock:
    """CPU seconds of each pipeline step, from timers wrapped around the step functions in this process.

    simplify: ``simplify_html``; features: ``page_features`` and the second stage's ``context_features``;
    trees: ``TreeEnsemble.decision_function`` (both stages); render: ``Extractor._build_output``
    (reconstruct, serialise, Markdown); fallback: ``Extractor._run_fallback`` (Trafilatura and Markdown).
    Within simplify, the parse floor: ``repair_html``, ``parse_document`` and ``processing_copy``.
    """

    def __init__(self) -> None:
        from dripper_core import pipeline, simplify
        from dripper_core.labelers.cpu import model

        self.seconds = dict.fromkeys((*_STEPS, _PARSE_FLOOR), 0.0)
        self._targets = [
            (pipeline, "simplify_html", "simplify"),
            (simplify, "repair_html", _PARSE_FLOOR),
            (simplify, "parse_document", _PARSE_FLOOR),
            (simplify, "processing_copy", _PARSE_FLOOR),
            (model, "page_features", "features"),
            (model, "context_features", "features"),
            (model.TreeEnsemble, "decision_function", "trees"),
            (pipeline.Extractor, "_build_output", "render"),
            (pipeline.Extractor, "_run_fallback", "fallback"),
        ]
        self._originals: list = []

    def __enter__(self) -> _StepClock:
        for owner, name, step in self._targets:
            original = owner.__dict__[name]
            self._originals.append((owner, name, original))
            setattr(owner, name, self._timed(original, step))
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()

    def _timed(self, function, step: str):
        def timed(*args, **kwargs):
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[step] += time.process_time() - started

        return timed


def _speed_group(extractor, blobs, chunk: int, trafilatura_extract, profiler=None) -> dict:
    """Dripper then Trafilatura on each chunk of ``blobs``: CPU and wall seconds, step CPU seconds.

    ``profiler`` (a ``cProfile.Profile``), when given, is enabled around Dripper's calls only.
    """
    cpu = {"dripper:cpu": 0.0, "trafilatura": 0.0}
    wall = dict.fromkeys(cpu, 0.0)
    extractors: Counter = Counter()
    clock = _StepClock()
    for offset in range(0, len(blobs), chunk):
        part = blobs[offset : offset + chunk]
        pages = [Page(doc_id=doc_id, html=html, url=url) for doc_id, html, url in part]
        with clock:
            if profiler is not None:
                profiler.enable()
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            results = extractor.extract_batch(pages)
            cpu["dripper:cpu"] += time.process_time() - cpu_start
            wall["dripper:cpu"] += time.perf_counter() - wall_start
            if profiler is not None:
                profiler.disable()
        extractors.update(result.extractor for result in results)
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        for _, html, url in part:
            trafilatura_extract(
                html, url=url, output_format="markdown", include_tables=True, include_comments=False
            )
        cpu["trafilatura"] += time.process_time() - cpu_start
        wall["trafilatura"] += time.perf_counter() - wall_start
    return {"n": len(blobs), "cpu": cpu, "wall": wall, "steps": clock.seconds, "extractors": extractors}


def _print_speed(name: str, group: dict) -> None:
    n, cpu, wall, steps = group["n"], group["cpu"], group["wall"], group["steps"]
    print(f"\n{name}: {n} pages")
    print(f"  {'extractor':14} {'pages/s per core':>17} {'ms/page (CPU)':>14} {'pages/s (wall)':>15}")
    for extractor in cpu:
        per_core, ms = n / cpu[extractor], 1000 * cpu[extractor] / n
        print(f"  {extractor:14} {per_core:17.1f} {ms:14.1f} {n / wall[extractor]:15.1f}")
    print(f"  ratio dripper:cpu / trafilatura (per core): {cpu['trafilatura'] / cpu['dripper:cpu']:.2f}x")
    other = cpu["dripper:cpu"] - sum(steps[step] for step in _STEPS)  # decoding, checks, batching
    print(
        "  dripper:cpu steps, ms/page (CPU): "
        + ", ".join(f"{key} {1000 * steps[key] / n:.2f}" for key in _STEPS)
        + f", other {1000 * other / n:.2f}"
    )
    floor = steps[_PARSE_FLOOR]
    print(
        f"  of simplify, the parse floor (lexbor repair, libxml2 parse, processing copy): "
        f"{1000 * floor / n:.2f} ms/page, so no faster rest of the path passes "
        f"{cpu['trafilatura'] / max(floor, 1e-9):.2f}x trafilatura"
    )
    print(f"  results by extractor: {dict(group['extractors'])}")


def run_speed(args: argparse.Namespace) -> int:
    from trafilatura import extract as trafilatura_extract

    from dripper_core.labelers.cpu.model import CpuLabeler
    from dripper_core.labelers.cpu.training_set import iter_records
    from dripper_core.pipeline import ExtractOptions, Extractor

    groups = {}
    for path in args.data:
        records = itertools.islice(iter_records(path), args.limit)
        blobs = [(str(r["id"]), r["html"].encode("utf-8"), r.get("url")) for r in records if r.get("html")]
        groups[path.name.split(".")[0]] = blobs
    started = time.process_time()
    labeler = CpuLabeler(model=args.model, **args.labeler_option)
    load_seconds = time.process_time() - started
    extractor = Extractor(labeler, ExtractOptions(fallback="trafilatura", batch_size=args.chunk))
    # Warm both up (imports, lazy tables, the trees' walk layout) outside the measurement.
    first = next(blobs[0] for blobs in groups.values() if blobs)
    extractor.extract_batch([Page(doc_id=first[0], html=first[1], url=first[2])])
    trafilatura_extract(first[1], url=first[2], output_format="markdown", include_tables=True)

    print(f"data: {', '.join(map(str, args.data))}; model loaded in {1000 * load_seconds:.0f} ms CPU")
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    results = {
        name: _speed_group(extractor, blobs, args.chunk, trafilatura_extract, profiler)
        for name, blobs in groups.items()
    }
    for name, group in results.items():
        _print_speed(name, group)
    if len(results) > 1:
        total = {
            "n": 0,
            "cpu": Counter(),
            "wall": Counter(),
            "steps": dict.fromkeys((*_STEPS, _PARSE_FLOOR), 0.0),
        }
        total["extractors"] = Counter()
        for group in results.values():
            total["n"] += group["n"]
            for key in ("cpu", "wall", "extractors"):
                total[key].update(group[key])
            for key, value in group["steps"].items():
                total["steps"][key] += value
        total["cpu"] = {key: total["cpu"][key] for key in ("dripper:cpu", "trafilatura")}
        total["wall"] = {key: total["wall"][key] for key in ("dripper:cpu", "trafilatura")}
        _print_speed("all", total)
    if profiler is not None:
        import pstats

        profiler.dump_stats(args.profile)
        print(f"\nprofile of dripper:cpu (cProfile, slows Python code; {args.profile}), by own time:")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(args.profile_top)
    return 0


# -- reference outputs -------------------------------------------------------------------------------------


def _short_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def reference_outputs(records, model: str | None = None):
    """Per page, what the labeler and the pipeline make of it, small enough to store and compare.

    Yields one dict per record with HTML: ``id``; ``features``, ``structure`` and ``p`` (hashes of the
    feature matrix, of the containers/signatures/chars, and of the float64 probabilities);
    ``labels``, ``failure`` and ``confidence`` as the labeler answers; ``extractor``, ``markdown`` and
    ``main_html`` (hashes) as the pipeline ends (fallback included).
    """
    from dripper_core.labelers.base import LabelRequest
    from dripper_core.labelers.cpu.features import page_features
    from dripper_core.labelers.cpu.model import CpuLabeler
    from dripper_core.pipeline import ExtractOptions, Extractor, prepare_page

    labeler = CpuLabeler(model=model)
    extractor = Extractor(labeler, ExtractOptions(fallback="trafilatura"))
    for record in records:
        if not record.get("html"):
            continue
        page = Page(doc_id=str(record["id"]), html=record["html"].encode("utf-8"), url=record.get("url"))
        out: dict = {"id": page.doc_id}
        prepared = prepare_page(page, extractor.options)
        if prepared.simplified is not None and prepared.simplified.n_blocks:
            features = page_features(prepared.simplified)
            out["features"] = _short_hash(features.values.tobytes())
            out["structure"] = _short_hash(
                features.containers.tobytes() + features.signatures.tobytes() + features.chars.tobytes()
            )
            out["p"] = _short_hash(labeler.model.probabilities([features])[0].tobytes())
            (answer,) = labeler.label_batch([LabelRequest(page, prepared.simplified, prepared.text)])
            out["labels"] = (
                None if answer.main is None else "".join("1" if main else "0" for main in answer.main)
            )
            out["failure"] = answer.failure
            out["confidence"] = answer.confidence
        (result,) = extractor.extract_batch([page])
        out["extractor"] = result.extractor
        out["markdown"] = _short_hash(result.markdown.encode("utf-8"))
        out["main_html"] = _short_hash(result.main_html.encode("utf-8"))
        yield out


def run_reference(args: argparse.Namespace) -> int:
    """Write this code's reference outputs (``--write``), or compare them with a file (``--check``)."""
    from dripper_core.labelers.cpu.training_set import iter_records

    records = (record for path in args.data for record in itertools.islice(iter_records(path), args.limit))
    outputs = reference_outputs(records, args.model)
    if args.write:
        with gzip.open(args.write, "wt", encoding="utf-8") as out:
            for found in outputs:
                out.write(json.dumps(found, ensure_ascii=False) + "\n")
        return 0
    with gzip.open(args.check, "rt", encoding="utf-8") as lines:
        expected = {found["id"]: found for found in map(json.loads, lines)}
    differ: Counter = Counter()
    pages = 0
    for found in outputs:
        pages += 1
        for key, value in found.items():
            if expected.get(found["id"], {}).get(key) != value:
                differ[key] += 1
                if differ[key] <= 3:
                    print(f"{found['id']}: {key} differs")
    print(f"{pages} pages; differing: {dict(differ) or 'none'}")
    return 1 if differ else 0


# -- memory -----------------------------------------------------------------------------------------------


def _rss_mb() -> float:
    """This process's resident set now (MiB), from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _measure_page(html: bytes, url: str | None, model: str | None) -> dict:
    """In a fresh worker process: RSS after the imports and the model, then peak RSS extracting ``html``."""
    import resource

    from dripper_core.labelers.cpu.model import CpuLabeler
    from dripper_core.pipeline import ExtractOptions, Extractor

    extractor = Extractor(
        CpuLabeler(model=model),
        ExtractOptions(fallback="trafilatura", max_page_bytes=max(len(html) + 1, 20_000_000)),
    )
    extractor.extract_batch([Page(doc_id="warm", html=b"<html><body><p>Warm up.</p></body></html>")])
    ready = _rss_mb()
    started = time.perf_counter()
    result = extractor.extract_batch([Page(doc_id="page", html=html, url=url)])[0]
    return {
        "ready_mb": ready,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "seconds": time.perf_counter() - started,
        "blocks": result.stats.get("n_blocks"),
        "extractor": result.extractor,
        "reason": result.fallback_reason,
    }


def run_memory(args: argparse.Namespace) -> int:
    """Peak RSS of one worker process extracting the largest page of ``--data`` (and a synthetic one)."""
    import multiprocessing

    from dripper_core.labelers.cpu.training_set import iter_records

    largest = max(
        (record for path in args.data for record in iter_records(path) if record.get("html")),
        key=lambda record: len(record["html"].encode("utf-8")),
    )
    html = largest["html"].encode("utf-8")
    files = ", ".join(path.name for path in args.data)
    cases = [(f"largest page of {files} ({largest['id']})", html, largest.get("url"))]
    if args.synthetic_mb:
        # The largest page's body repeated until the page is that large: many blocks, deep enough.
        head, _, rest = largest["html"].partition("<body")
        body = "<body" + rest.rsplit("</body>", 1)[0].split(">", 1)[1] if rest else largest["html"]
        copies = int(args.synthetic_mb * 1_000_000 / max(len(body.encode("utf-8")), 1)) + 1
        synthetic = f"{head}<body>{body * copies}</body></html>".encode()
        cases.append((f"synthetic page: the largest page's body x{copies}", synthetic, largest.get("url")))
    context = multiprocessing.get_context("spawn")  # a fresh interpreter per page: its own peak
    for name, page, url in cases:
        with context.Pool(1) as pool:
            found = pool.apply(_measure_page, (page, url, args.model))
        print(
            f"{name}: {len(page) / 1e6:.1f} MB, {found['blocks']} blocks, {found['extractor']}"
            f"{' (' + found['reason'] + ')' if found['reason'] else ''}, {found['seconds']:.1f} s; "
            f"RSS ready {found['ready_mb']:.0f} MiB, peak {found['peak_mb']:.0f} MiB"
        )
    return 0


# -- quality ----------------------------------------------------------------------------------------------

_worker: dict = {}


def _init_worker(cv, fold_by_key: dict[str, int], baselines: Sequence[str], options: dict) -> None:
    from eval.baselines import get_extractor

    _worker["cv"] = cv
    _worker["options"] = options
    _worker["folds"] = fold_by_key
    _worker["baselines"] = [get_extractor(name) for name in baselines]


def _fold_key(by: str, record: dict) -> str:
    from dripper_core.labelers.cpu.training_set import site_of

    if by == "page":
        return f"{record.get('source') or 'unknown'}:{record.get('id')}"
    if by == "source":
        return str(record.get("source") or "unknown")
    return site_of(record)


def _fold_model(record: dict) -> int:
    """The fold whose model saw neither this page, nor its site (``site``), nor its source (``source``);
    -1 for a page no training page shares a group with (no fold's model saw it)."""
    return _worker["folds"].get(_fold_key(_worker["cv"].by, record), -1)


# The model's own labels on every page, the pages its confidence gate declines included: what the gate
# (``min_confidence``) gains or loses against the fallback, page for page (``best_confidence`` in the
# per-page info says where each page stands against any other gate).
_UNGATED_ROW = "dripper:cpu-oof/ungated"
_LOW_CONFIDENCE = "label_failed: low confidence"


def _declined(fallback_reason: str | None) -> bool:
    """Whether a page went to the fallback because the confidence gate declined it."""
    return (fallback_reason or "").startswith(_LOW_CONFIDENCE)


def _ungated(labeler, pages: list) -> list:
    """The results of ``labeler``'s model without its confidence gate (and no fallback) on ``pages``."""
    if not pages:
        return []
    from dripper_core.labelers.cpu.model import CpuLabeler
    from dripper_core.pipeline import ExtractOptions, Extractor

    open_labeler = CpuLabeler(
        model=labeler.model,
        threshold=labeler.threshold,
        min_confidence=0.0,
        decision=labeler.decision,
        min_page_confidence=0.0,
        trafilatura_weight=labeler.trafilatura_weight,
    )
    return Extractor(open_labeler, ExtractOptions(fallback=None)).extract_batch(pages)


def _score_chunk(records: list[dict], pages) -> list:
    """Extract ``pages`` (eval's BenchPages of ``records``) with their fold models and the baselines."""
    from dripper_core.labelers.cpu.model import CpuLabeler
    from dripper_core.pipeline import ExtractOptions, Extractor
    from eval.baselines import ExtractionOutcome, html_to_markdown
    from eval.extraction import PageResult
    from eval.metrics import prepare_ground_truth, score_page

    cv = _worker["cv"]
    outcomes: dict[int, ExtractionOutcome] = {}
    by_model: dict[int, list[int]] = {}
    for index, record in enumerate(records):
        fold = _fold_model(record)
        by_model.setdefault(fold if fold >= 0 else 0, []).append(index)
    for fold, indexes in by_model.items():
        labeler = CpuLabeler(model=cv.models[fold], **_worker["options"])
        extractor = Extractor(labeler, ExtractOptions(fallback="trafilatura"))
        core_pages = [Page(doc_id=pages[i].id, html=pages[i].html, url=pages[i].url) for i in indexes]
        started = time.perf_counter()
        results = extractor.extract_batch(core_pages)
        share = (time.perf_counter() - started) / len(indexes)
        declined = [position for position, result in enumerate(results) if _declined(result.fallback_reason)]
        ungated = dict(zip(declined, _ungated(labeler, [core_pages[k] for k in declined]), strict=True))
        for position, (i, result) in enumerate(zip(indexes, results, strict=True)):
            own = ungated.get(position, result)
            outputs = {
                "dripper:cpu-oof/md": result.markdown,
                "dripper:cpu-oof/html2text": html_to_markdown(result.main_html or "", pages[i].url),
                _UNGATED_ROW: own.markdown,
            }
            info = {
                "extractor": result.extractor,
                "fallback_reason": result.fallback_reason,
                "best_confidence": max(own.stats.get("confidence") or [0.0]),
                "page_confidence": own.stats.get("page_confidence"),
            }
            outcomes[i] = ExtractionOutcome(outputs, share, None, info)
    baseline_outcomes = [extractor.extract_pages(pages) for extractor in _worker["baselines"]]
    results = []
    for index, page in enumerate(pages):
        prepared = prepare_ground_truth(page.ground_truth, page.with_snippets, page.without_snippets)
        groups = {
            "file": records[index]["_file"],
            "source": page.group_value("source"),
            "page_type": page.group_value("page_type"),
        }
        for outcome in [outcomes[index], *(per_page[index] for per_page in baseline_outcomes)]:
            for row, text in outcome.outputs.items():
                scores = score_page(text, prepared)
                results.append(
                    PageResult(
                        page.id, row, groups, scores, outcome.seconds, outcome.error, None, outcome.info
                    )
                )
    return results


_LEAD_ROW = "dripper:cpu-oof/md"  # the row whose lead over each baseline is bootstrapped
_ARTICLE_FILES = ("dev", "dev_fundus")  # the article files, also bootstrapped as one set
_PREVIOUS_ROW = "previous model"  # the out-of-fold row of an earlier run (compare --previous)


def run_quality(args: argparse.Namespace) -> int:
    from dripper_core.labelers.cpu.fit import TrainParams
    from dripper_core.labelers.cpu.train import cross_validate, format_scores, score_report
    from dripper_core.labelers.cpu.training_set import build_training_set
    from eval.datasets import read_pages
    from eval.extraction import ALL_GROUP, GroupStats, _page_record, _row_summary, format_report
    from eval.paired import format_leads

    started = time.perf_counter()
    training = build_training_set(args.data, workers=args.workers, limit=args.limit, progress=True)
    # --lump-sources: several sources form one fold of --by source (held out together, named as one).
    lumped = {source: name for name, sources in args.lump_sources for source in sources}
    for page in training.pages:
        page.source = lumped.get(page.source, page.source)
    if args.load_cv:
        # Our own cache from --save-cv of an earlier run on the same data: re-score without refitting.
        with gzip.open(args.load_cv, "rb") as cached:
            cv = pickle.load(cached)  # noqa: S301
    else:
        params = TrainParams(**{"threads": args.threads, **args.train_param})
        cv = cross_validate(training.pages, params, folds=args.folds, seed=args.seed, by=args.by)
    if args.save_cv:
        with gzip.open(args.save_cv, "wb") as cache:
            pickle.dump(cv, cache)
    print(format_scores(score_report(training.pages, cv.stage1), f"stage 1 out-of-fold ({args.by})"))
    print(format_scores(score_report(training.pages, cv.probabilities), f"model out-of-fold ({args.by})"))
    fold_by_key: dict[str, int] = {}
    for page, fold in zip(training.pages, cv.fold_of, strict=True):
        record = {"id": page.doc_id, "source": page.source}
        fold_by_key[page.site if args.by == "site" else _fold_key(args.by, record)] = int(fold)

    # The fold keys (site_of reads the URL and the HTML) and the report's file group, from eval's own
    # reading of the files: each file is parsed once, and the dicts share the pages' HTML strings.
    bench_pages, records = [], []
    for path in args.data:
        for page in read_pages(path, limit=args.limit):
            bench_pages.append(page)
            records.append(
                {
                    "id": page.id,
                    "url": page.url,
                    "html": page.html,
                    "source": lumped.get(page.source, page.source),
                    "_file": path.name.split(".")[0],
                }
            )
    chunks = [
        (records[offset : offset + args.chunk], bench_pages[offset : offset + args.chunk])
        for offset in range(0, len(records), args.chunk)
    ]
    totals: dict[str, dict[tuple[str, str], GroupStats]] = {}
    page_records: list[dict] = []  # every row's page scores, for the paired bootstrap
    pages_out = args.pages_out.open("w", encoding="utf-8") if args.pages_out else None
    with ProcessPoolExecutor(
        max_workers=args.workers,
        initializer=_init_worker,
        initargs=(cv, fold_by_key, args.baselines, args.labeler_option),
    ) as pool:
        for results in pool.map(_score_chunk, *zip(*chunks, strict=True)):
            for result in results:
                record = _page_record(result)
                record.pop("text", None)
                page_records.append(record)
                if pages_out is not None:
                    pages_out.write(json.dumps(record, ensure_ascii=False) + "\n")
                stats = totals.setdefault(result.row, {})
                stats.setdefault((ALL_GROUP, ALL_GROUP), GroupStats()).add(result)
                for key, value in result.groups.items():
                    stats.setdefault((key, value), GroupStats()).add(result)
    if pages_out is not None:
        pages_out.close()
    summary = {
        "config": {
            "data": [str(p) for p in args.data],
            "by": args.by,
            "lump_sources": {name: sources for name, sources in args.lump_sources},
            "folds": args.folds,
            "seed": args.seed,
            "train_params": args.train_param,
            "labeler_options": args.labeler_option,
        },
        "wall_seconds": time.perf_counter() - started,
        "rows": {row: _row_summary(stats, ("file", "source", "page_type")) for row, stats in totals.items()},
    }
    leads = _leads(page_records, args.resamples)
    summary["leads"] = [asdict(lead) for lead in leads]
    print(format_report(summary))
    print(format_leads(leads))
    print(format_gate(page_records))
    print(f"\nwall time {summary['wall_seconds']:.0f} s")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0


def _leads(page_records: Iterable[dict], resamples: int, previous: Iterable[dict] = ()) -> list:
    """The paired-bootstrap leads of the out-of-fold model over each baseline (and over ``previous``'s
    model, a per-page file of an earlier run on the same pages), on each file and on the article files."""
    from eval.paired import paired_leads

    per_page: dict[str, dict[str, dict]] = {}  # row -> page id -> scores
    page_sets: dict[str, list[str]] = {}
    for record in page_records:
        per_page.setdefault(record["extractor"], {})[record["id"]] = record
        if record["extractor"] == _LEAD_ROW:
            page_sets.setdefault(f"file={record['file']}", []).append(record["id"])
            if record["file"] in _ARTICLE_FILES:
                page_sets.setdefault("articles", []).append(record["id"])
    for record in previous:
        if record["extractor"] == _LEAD_ROW:
            per_page.setdefault(_PREVIOUS_ROW, {})[record["id"]] = record
    if _LEAD_ROW not in per_page:
        return []
    # Our other rows (the same labels through html2text) are not baselines.
    baselines = sorted(row for row in per_page if row == _PREVIOUS_ROW or not row.startswith("dripper:"))
    return paired_leads(per_page, _LEAD_ROW, page_sets, baselines, resamples=resamples)


def run_compare(args: argparse.Namespace) -> int:
    from eval.paired import format_leads

    def read(path: Path) -> list[dict]:
        with path.open(encoding="utf-8") as lines:
            return [json.loads(line) for line in lines if line.strip()]

    records = read(args.pages)
    leads = _leads(records, args.resamples, read(args.previous) if args.previous else ())
    print(format_leads(leads))
    print(format_gate(records))
    return 0 if leads else 1


# (best block confidence, page confidence) gates to replay: the block gate alone, then the page gate
# (the expected F1 of the model's labels) on top of the shipped block gate.
_OTHER_GATES = (
    (0.7, 0.0),
    (0.8, 0.0),
    (0.9, 0.0),
    (0.94, 0.0),
    (0.85, 0.8),
    (0.85, 0.85),
    (0.85, 0.88),
    (0.85, 0.9),
    (0.85, 0.92),
    (0.85, 0.94),
)


def format_gate(page_records: Iterable[dict], metric: str = "rouge_f1_norm", gates=_OTHER_GATES) -> str:
    """What the confidence gate did, per file: the pages it declined, their mean ``metric`` with the
    fallback's output (what the model row scored) and with the model's own labels (the ungated row); then
    each file's mean under other ``gates`` (pairs of a block gate and a page gate), from each page's best
    block confidence and page confidence (the expected F1 of the model's labels): a declined page that
    passes both takes the model's labels, a kept page that fails one the ``trafilatura`` row's score (the
    fallback's extractor, scored as that baseline's row), with the share of model-labelled pages that
    would go to the fallback (what the gate costs in speed: each runs Trafilatura)."""
    wanted = (_LEAD_ROW, _UNGATED_ROW, "trafilatura")
    rows: dict[tuple[str, str], dict[str, dict]] = {}
    for record in page_records:
        if record.get("extractor") in wanted and record.get(metric) is not None:
            rows.setdefault((record.get("file", "?"), record["id"]), {})[record["extractor"]] = record
    per_file: dict[str, list[tuple[float, float]]] = {}
    pages: list[tuple[str, dict, dict, dict | None]] = []  # file, gated, ungated, trafilatura
    for (file, _), row in rows.items():
        gated, ungated = row.get(_LEAD_ROW), row.get(_UNGATED_ROW)
        if gated is None or ungated is None:
            continue
        pages.append((file, gated, ungated, row.get("trafilatura")))
        if _declined_record(gated):
            per_file.setdefault(file, []).append((gated[metric], ungated[metric]))
    lines = [
        f"\nconfidence gate ({metric}; pages declined, mean with the fallback / with the model's labels):"
    ]
    if not per_file:
        lines.append("  no page with both rows was declined")
    for file, pairs in sorted(per_file.items()):
        fallback = sum(pair[0] for pair in pairs) / len(pairs)
        own = sum(pair[1] for pair in pairs) / len(pairs)
        lines.append(
            f"  {file:12} {len(pairs):5d} pages  fallback {fallback:.3f}  model {own:.3f}  gate gains {fallback - own:+.3f}"
        )
    if pages and all(trafilatura is not None for *_, trafilatura in pages):
        lines.append(
            "  other gates (block gate / page gate: per file, mean, pages that change side, share declined):"
        )
        for block_gate, page_gate in gates:
            sums: dict[str, list[float]] = {}
            for file, gated, ungated, trafilatura in pages:
                info = gated.get("info") or {}
                kept = (info.get("best_confidence") or 0.0) >= block_gate and (
                    info.get("page_confidence") or 0.0
                ) >= page_gate
                score, moved = gated[metric], 0
                if _declined_record(gated) and kept:
                    score, moved = ungated[metric], 1
                elif not _declined_record(gated) and not kept and _by_model(gated):
                    score, moved = trafilatura[metric], 1
                total = sums.setdefault(file, [0.0, 0, 0, 0, 0])
                total[0] += score
                total[1] += 1
                total[2] += moved
                if _by_model(gated) or _declined_record(gated):
                    total[3] += 1
                    total[4] += not kept
            cells = ", ".join(
                f"{file} {t[0] / t[1]:.3f} ({t[2]}, {t[4] / max(t[3], 1):.0%})"
                for file, t in sorted(sums.items())
            )
            lines.append(f"    {block_gate:.2f} / {page_gate:.2f}: {cells}")
    return "\n".join(lines)


def _declined_record(record: dict) -> bool:
    return _declined((record.get("info") or {}).get("fallback_reason"))


def _by_model(record: dict) -> bool:
    return str((record.get("info") or {}).get("extractor") or "").startswith("dripper:")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    speed = modes.add_parser("speed", help="end-to-end pages/s per core against Trafilatura")
    speed.add_argument("--data", type=Path, nargs="+", default=_default_data())
    speed.add_argument("--limit", type=int, default=None, help="pages per file")
    speed.add_argument("--model", default=None, help="model file (default: the shipped one)")
    speed.add_argument("--chunk", type=int, default=32, help="pages per alternation (and labeler batch)")
    speed.add_argument("--profile", type=Path, default=None, help="cProfile Dripper's calls into this file")
    speed.add_argument("--profile-top", type=int, default=30, help="profile entries printed")
    speed.add_argument(
        "--labeler-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="CpuLabeler option (threshold, min_confidence, min_page_confidence, decision)",
    )
    speed.set_defaults(handler=run_speed)
    reference = modes.add_parser("reference", help="write or check per-page reference outputs")
    reference.add_argument("--data", type=Path, nargs="+", default=_default_data())
    reference.add_argument("--limit", type=int, default=None, help="pages per file")
    reference.add_argument("--model", default=None, help="model file (default: the shipped one)")
    target = reference.add_mutually_exclusive_group(required=True)
    target.add_argument("--write", type=Path, help="write this code's outputs here (.jsonl.gz)")
    target.add_argument("--check", type=Path, help="compare this code's outputs with this file")
    reference.set_defaults(handler=run_reference)
    memory = modes.add_parser("memory", help="peak RSS of a worker process on the largest page")
    memory.add_argument("--data", type=Path, nargs="+", default=_default_data()[-1:])
    memory.add_argument("--model", default=None, help="model file (default: the shipped one)")
    memory.add_argument("--synthetic-mb", type=float, default=0, help="also a synthetic page of this size")
    memory.set_defaults(handler=run_memory)
    quality = modes.add_parser("quality", help="out-of-fold extraction scores beside the baselines")
    quality.add_argument("--data", type=Path, nargs="+", default=_default_data())
    quality.add_argument("--limit", type=int, default=None, help="pages per file")
    quality.add_argument("--by", choices=("site", "page", "source"), default="site")
    quality.add_argument(
        "--lump-sources",
        action="append",
        default=[],
        metavar="NAME=SOURCE,SOURCE",
        help="with --by source: these sources are one fold, NAME (repeatable)",
    )
    quality.add_argument("--folds", type=int, default=5)
    quality.add_argument("--seed", type=int, default=0)
    quality.add_argument("--threads", type=int, default=2, help="threads per model fit")
    quality.add_argument("--workers", type=int, default=2, help="processes for features and scoring")
    quality.add_argument("--chunk", type=int, default=32)
    quality.add_argument(
        "--baselines",
        nargs="*",
        default=["trafilatura", "resiliparse", "readability"],
        help="eval extractors",
    )
    quality.add_argument("--save-cv", type=Path, default=None, help="keep the fold models here (.pkl.gz)")
    quality.add_argument("--load-cv", type=Path, default=None, help="fold models from --save-cv: no refit")
    quality.add_argument(
        "--labeler-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="CpuLabeler option for the fold models (threshold, min_confidence, min_page_confidence, decision, "
        "trafilatura_weight)",
    )
    quality.add_argument(
        "--train-param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="TrainParams field for the fold models (rounds, learning_rate, num_leaves, ...)",
    )
    quality.add_argument(
        "--resamples", type=int, default=2000, help="paired-bootstrap resamples of the leads over baselines"
    )
    quality.add_argument("--out", type=Path, default=None, help="write the summary as JSON here")
    quality.add_argument("--pages-out", type=Path, default=None, help="write per-page scores as JSONL here")
    quality.set_defaults(handler=run_quality)

    compare = modes.add_parser("compare", help="the leads of a quality run, from its --pages-out file")
    compare.add_argument("pages", type=Path, help="per-page scores of a quality run (--pages-out)")
    compare.add_argument(
        "--previous", type=Path, default=None, help="per-page scores of an earlier run: its model as a row"
    )
    compare.add_argument("--resamples", type=int, default=2000)
    compare.set_defaults(handler=run_compare)
    args = parser.parse_args(argv)
    if args.mode in ("quality", "speed"):
        from dripper_core.cli import parse_key_values

        args.labeler_option = parse_key_values(args.labeler_option, "--labeler-option")
    if args.mode == "quality":
        args.train_param = parse_key_values(args.train_param, "--train-param")
        lumps = [spec.partition("=") for spec in args.lump_sources]
        if any(not name or not sources for name, _, sources in lumps):
            parser.error("--lump-sources takes NAME=SOURCE,SOURCE")
        args.lump_sources = [(name, sources.split(",")) for name, _, sources in lumps]
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
