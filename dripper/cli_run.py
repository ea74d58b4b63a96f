"""``dripper run STAGE``: every stage of a run from the command line, into the run layout the DAGs use
(``dripper.layout``), so a stage started here continues a DAG's run and the reverse::

    dripper run simplify --input snapshot:CC-MAIN-SAMPLE@data/sample --output runs/sample
    dripper run extract  --input runs/sample --extractor cpu          # → runs/sample/extractors/cpu/
    dripper run refine   --input runs/sample --extractor cpu
    dripper run tokenize --input runs/sample --extractor cpu --tokenizer .cache/models/qwen-tokenizer
    dripper run pretrain --input runs/sample --extractor cpu trafilatura --tokenizer … --train-tokens 5120 \
        --seeds 1234 1235 --eval-every 10                               # one run per arm and seed
    dripper run evaluate --input runs/sample --extractor cpu trafilatura --suite local
    dripper run report   --input runs/sample --extractor cpu trafilatura --name first
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from dripper.config.extractor import FALLBACKS
from dripper.config.settings import parse_key_values

RUN_DESCRIPTION = """Run a stage over a run root (a local folder or a URL such as s3://bucket/run), in the layout
the DAGs use (dripper.layout): ROOT/simplified/, then per extractor spec ROOT/extractors/{name}/ with
extracted/, corpus/, tokens/, pretrain/{run}/ and eval/{run}/; reports in ROOT/ablations/{name}/.

Each page stage writes part-NNNNN.parquet with a marker per finished shard, a stage summary and a run
summary (pages in and out, drops and fallbacks by reason, time per stage). A rerun skips finished shards,
datatrove tasks and checkpoints: an interrupted run, or one an Airflow DAG started, is continued by running
the stage again.

examples (the bundled sample, WARC files to the ablation report):
  dripper run simplify --input snapshot:CC-MAIN-SAMPLE@data/sample --warc-count 2 --output runs/s
  dripper run extract --input runs/s --extractor cpu
  dripper run refine --input runs/s --extractor cpu
  dripper run tokenize --input runs/s --extractor cpu --tokenizer .cache/models/qwen-tokenizer
  dripper run pretrain --input runs/s --extractor cpu --tokenizer .cache/models/qwen-tokenizer
  dripper run evaluate --input runs/s --extractor cpu --suite local
  dripper run report --input runs/s --extractor cpu trafilatura --name first
"""

SIMPLIFY_EPILOG = """--input forms (several may be given):
  snapshot:CRAWL_ID[@BASE]   a crawl's warc.paths.gz under BASE: s3 (Common Crawl's bucket, the default),
                             https (its HTTPS mirror) or a folder/URL laid out like Common Crawl,
                             e.g. snapshot:CC-MAIN-SAMPLE@data/sample (the bundled sample)
  PATH/warc.paths.gz         a listing; relative entries resolve against the folder above crawl-data/
  FILE, FOLDER or GLOB       WARC files (.warc, .warc.gz), local or s3://…, e.g. 's3://b/crawl/*.warc.gz'
Listed files are taken in a deterministic order (--seed); --warc-count/--warc-fraction take a prefix of
it, so a larger --warc-count keeps the shard numbers of a smaller one.

examples:
  dripper run simplify --input snapshot:CC-MAIN-SAMPLE@data/sample --output runs/sample --workers 2
  dripper run simplify --input snapshot:CC-MAIN-2025-13 --warc-count 10 --output s3://my-bucket/run \\
      --storage-option endpoint_url=http://127.0.0.1:9000 --dask-scheduler tcp://10.0.0.5:8786
"""

EXTRACT_EPILOG = """--labeler takes a registered name or an import path module:factory (a BlockLabeler factory).
--input is a run root holding simplified/ (extracted shard i is made from simplified shard i; only finished
simplified shards are read), or WARC inputs (the forms of `dripper run simplify`, with its selection and
page-limit flags) and --output the run root: then the extractor reads them in one pass, with no
simplified/ folder, where it needs no GPU (--one-pass auto; always, never), else it simplifies into
ROOT/simplified/ and extracts from there. A rerun skips finished extracted shards whatever labeler made
them: use a new --output root (or --force) to extract again with another labeler.

examples:
  dripper run extract --input snapshot:CC-MAIN-SAMPLE@data/sample --warc-count 4 --output runs/one --extractor cpu
  dripper run extract --input runs/sample --output runs/sample --labeler trafilatura
  dripper run extract --input s3://my-bucket/run --output s3://my-bucket/run --labeler vllm \\
      --labeler-option model=/models/dripper --batch-size 256
"""


def _add_common_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dask-scheduler", default=None, help="address of an existing Dask scheduler (tcp://host:8786)"
    )
    parser.add_argument(
        "--storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="fsspec option of the run root, repeatable (endpoint_url=…, key=…, client_kwargs.region_name=…)",
    )
    parser.add_argument("--force", action="store_true", help="recompute shards that are already done")
    parser.add_argument("--quiet", action="store_true", help="no progress display, warnings only")


def add_run_parser(commands) -> None:
    from dripper.config.extract import ExtractStageConfig
    from dripper.config.simplify import SimplifyStageConfig

    run = commands.add_parser(
        "run",
        help="run a stage (simplify, extract, refine, tokenize, pretrain, evaluate, report) over a run root",
        description=RUN_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    stages = run.add_subparsers(dest="stage", required=True)

    simplify = stages.add_parser(
        "simplify",
        help="WARC files → {ROOT}/simplified/ shards (Dask)",
        description="Simplify the HTML pages of WARC files into {ROOT}/simplified/, one shard per WARC file.",
        epilog=SIMPLIFY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    simplify.add_argument("--input", required=True, nargs="+", help="WARC inputs (forms below)")
    simplify.add_argument("--output", required=True, help="the run root")
    SimplifyStageConfig.add_arguments(simplify)
    _add_common_run_options(simplify)
    simplify.add_argument(
        "--input-storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="fsspec option of the inputs, repeatable (default: the --storage-option values)",
    )
    simplify.set_defaults(handler=run_simplify_stage)

    extract = stages.add_parser(
        "extract",
        help="ROOT/simplified/ (or WARC files, in one pass) → ROOT/extractors/{name}/extracted/ with an "
        "extractor spec",
        description="Label the simplified pages of a run root, or the pages of WARC files, and write "
        "{ROOT}/extractors/{name}/extracted/ (one row per page; the docs' data-plane page lists the columns).",
        epilog=EXTRACT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    extract.add_argument(
        "--input", required=True, nargs="+", help="the run root holding simplified/, or WARC inputs (below)"
    )
    extract.add_argument(
        "--output",
        default=None,
        help="the extractor's folder, holding extracted/ (default: ROOT/extractors/{extractor name}); with WARC "
        "inputs, the run root (required)",
    )
    add_extractor_arguments(extract)
    ExtractStageConfig.add_arguments(extract, skip=["extractor"])
    SimplifyStageConfig.add_arguments(extract, skip=["workers"])  # with WARC inputs; --workers is extract's
    _add_common_run_options(extract)
    extract.add_argument(
        "--input-storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="fsspec option of the WARC files, repeatable (default: the --storage-option values)",
    )
    extract.set_defaults(handler=run_extract_stage)
    add_later_stages(stages)


def add_extractor_arguments(parser: argparse.ArgumentParser) -> None:
    """How ``dripper extract`` and ``dripper run extract`` name what extracts: ``--extractor SPEC`` (the
    extract config's ``extractor``), or the spec's fields one by one (``--labeler``, ``--labeler-option``,
    ``--fallback``, ``--fallback-on-empty``); read back by :func:`extractor_from_arguments`."""
    from dripper.config.extract import ExtractStageConfig
    from dripper.labelers.base import DEFAULT_LABELER

    parser.add_argument(
        "--extractor",
        default=None,
        metavar="SPEC",
        help=ExtractStageConfig.model_fields["extractor"].description
        + " (instead of --labeler/--labeler-option/--fallback*)",
    )
    parser.add_argument(
        "--labeler",
        default=DEFAULT_LABELER,
        help=f"the spec's labeler: a name or module:factory (default {DEFAULT_LABELER})",
    )
    parser.add_argument(
        "--labeler-option",
        action="append",
        metavar="KEY=VALUE",
        help="the spec's labeler options, repeatable",
    )
    parser.add_argument(
        "--fallback",
        default=None,
        choices=(*FALLBACKS, "none"),
        help="the spec's fallback, for pages the labeler cannot label (default: trafilatura)",
    )
    parser.add_argument(
        "--fallback-on-empty",
        action="store_true",
        default=None,
        help="the spec's fallback_on_empty: also fall back when no block is labelled main content",
    )


def extractor_from_arguments(args: argparse.Namespace) -> Any:
    """The extractor the arguments of :func:`add_extractor_arguments` name: ``--extractor``'s text (the
    extract config parses it, with the message the Airflow task gives), or the spec built from the fields."""
    from dripper.config.extractor import DEFAULT_FALLBACK, labeler_spec

    fields = [args.labeler_option, args.fallback, args.fallback_on_empty]
    if args.extractor and any(field is not None for field in fields):
        raise ValueError(
            "give --extractor or --labeler/--labeler-option/--fallback/--fallback-on-empty, not both "
            "(a spec carries them: NAME=LABELER,key=value,fallback=none,fallback_on_empty=true)"
        )
    if args.extractor:
        return args.extractor
    options = parse_key_values(args.labeler_option, "--labeler-option")
    fallback = args.fallback or DEFAULT_FALLBACK
    return labeler_spec(args.labeler, options, fallback, bool(args.fallback_on_empty))


STAGE_EPILOG = """The extractor's folder is ROOT/extractors/{name} (dripper.layout), as extract and the DAGs
write it; --extractor takes the name (or the spec used at extract). With one extractor folder under ROOT
it may be left out.
"""


def _add_extractor_stage(
    stages, name: str, help_text: str, handler, several: bool = False
) -> argparse.ArgumentParser:
    parser = stages.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=STAGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--input", required=True, help="the run root (holding simplified/ and extractors/)")
    if several:
        parser.add_argument(
            "--extractor",
            nargs="+",
            default=None,
            help="the arms: extractors' names (their folders under extractors/), one run each per seed",
        )
    else:
        parser.add_argument(
            "--extractor", default=None, help="the extractor's name (its folder under extractors/)"
        )
    parser.add_argument("--quiet", action="store_true", help="warnings only")
    parser.set_defaults(handler=handler)
    return parser


def add_later_stages(stages) -> None:
    """refine, tokenize, pretrain, evaluate, report: the stages after extract, on an extractor's folder."""
    from dripper.config.evaluate import EvaluateStageConfig
    from dripper.config.pretrain import PretrainStageConfig
    from dripper.config.refine import RefineStageConfig
    from dripper.config.report import ReportStageConfig
    from dripper.config.tokenize import TokenizeStageConfig

    refine = _add_extractor_stage(
        stages, "refine", "extracted/ → corpus/ with datatrove (filters, dedup)", run_refine_stage
    )
    RefineStageConfig.add_arguments(refine)
    refine.add_argument("--force", action="store_true", help="start over: delete this extractor's refinement")

    tokenize = _add_extractor_stage(
        stages, "tokenize", "corpus/ → tokens/ (Megatron .bin/.idx)", run_tokenize_stage
    )
    TokenizeStageConfig.add_arguments(tokenize)
    tokenize.add_argument(
        "--force", action="store_true", help="retokenize (another tokenizer's tokens are refused)"
    )

    pretrain = _add_extractor_stage(
        stages,
        "pretrain",
        "tokens/ → a model per seed in pretrain/{run}/, every checkpoint exported (several extractors: "
        "the same token budget for each, one after another)",
        run_pretrain_stage,
        several=True,
    )
    TokenizeStageConfig.add_arguments(pretrain, ["tokenizer"])
    PretrainStageConfig.add_arguments(pretrain)
    pretrain.add_argument(
        "--run",
        default=None,
        help="the run's folder name, one extractor and seed (default: {model}-{budget}-seed{seed})",
    )
    pretrain.add_argument(
        "train_arguments",
        nargs=argparse.REMAINDER,
        help="more `python -m dripper.pretrain train` flags after --",
    )

    evaluate = _add_extractor_stage(
        stages,
        "evaluate",
        "score every exported checkpoint on a benchmark suite (lm-eval) and by its loss on a held-out "
        "reference text",
        run_evaluate_stage,
        several=True,
    )
    EvaluateStageConfig.add_arguments(evaluate)
    evaluate.add_argument(
        "--run", default=None, help="the training run's folder name (default: every run under pretrain/)"
    )

    report = stages.add_parser(
        "report",
        help="the ablation report over several extractors of a run root",
        description="Score the extractors' specs on labelled pages, then render the ablation report into "
        "ROOT/ablations/{name}/.",
    )
    report.add_argument("--input", required=True, help="the run root")
    report.add_argument(
        "--extractor", nargs="+", required=True, help="the extractors' names, in report order"
    )
    ReportStageConfig.add_arguments(report)
    report.add_argument(
        "--run", default=None, help="the training run's folder name (default: each one's runs, one per seed)"
    )
    report.add_argument("--title", default=None)
    report.add_argument("--quiet", action="store_true")
    report.set_defaults(handler=run_report_stage)


def _extractor_layout(args: argparse.Namespace):
    """The extractor's folder under ``--input`` (``--extractor``, or the only one there)."""
    from pathlib import Path

    from dripper.layout import RunLayout

    layout = RunLayout(args.input)
    if args.extractor:
        name = args.extractor
        if "=" in name or "," in name:
            from dripper.config.extractor import parse_extractor

            name = parse_extractor(name).name
        folder = layout.extractor(name)
        if not Path(folder.root).is_dir():
            raise FileNotFoundError(
                f"{folder.root} does not exist: run `dripper run extract --input {args.input} "
                f"--extractor {name}` first"
            )
        return folder
    found = sorted(p.name for p in Path(layout.root, "extractors").glob("*") if p.is_dir())
    if len(found) != 1:
        raise ValueError(
            f"{args.input}: name the extractor with --extractor (found: {', '.join(found) or 'none'})"
        )
    return layout.extractor(found[0])


def _extractor_layouts(args: argparse.Namespace) -> list:
    """The extractors' folders of a stage that takes several (``--extractor A B …``, or the only one)."""
    names = args.extractor or [None]
    return [_extractor_layout(argparse.Namespace(input=args.input, extractor=name)) for name in names]


def _runs(folder: str, run: str | None) -> list[str]:
    """``run``, or every training run under ``folder`` (``{extractor}/pretrain``)."""
    from pathlib import Path

    if run:
        return [run]
    runs = sorted(p.name for p in Path(folder).glob("*") if p.is_dir())
    if not runs:
        raise ValueError(f"{folder}: no training run: run `dripper run pretrain` first")
    return runs


def _print(result: dict) -> int:
    print(json.dumps(result, indent=1, default=str))
    return 0


def run_refine_stage(args: argparse.Namespace) -> int:
    from dripper.config.refine import RefineStageConfig
    from dripper.refine import run_refine
    from dripper.runs.corpus import refine_config, refine_result

    _configure_run_logging(args.quiet)
    stage = RefineStageConfig.from_arguments(args)
    folder = _extractor_layout(args)
    # tokenize: its own stage
    config = refine_config(stage.steps, stage.tasks, stage.workers, stage.refine_options())
    return _print(refine_result(folder.root, run_refine(folder.root, folder.root, config, force=args.force)))


def _tokenizer(args: argparse.Namespace) -> str:
    if not args.tokenizer:
        raise ValueError(f"dripper run {args.stage} needs --tokenizer (a local tokenizer.json or its folder)")
    return args.tokenizer


def run_tokenize_stage(args: argparse.Namespace) -> int:
    from dripper.config.tokenize import TokenizeStageConfig
    from dripper.runs.corpus import tokenize_extractor

    _configure_run_logging(args.quiet)
    stage = TokenizeStageConfig.from_arguments(args, tokenizer=_tokenizer(args))
    folder = _extractor_layout(args)
    return _print(tokenize_extractor(folder.root, stage.tokenizer, stage.eos_token, force=args.force))


def run_pretrain_stage(args: argparse.Namespace) -> int:
    import subprocess

    from dripper.config.pretrain import PretrainStageConfig
    from dripper.io.json_files import read_json
    from dripper.pretrain.cli import main as pretrain_main
    from dripper.runs.jobs import pretrain_job, training_plan

    _configure_run_logging(args.quiet)
    stage = PretrainStageConfig.from_arguments(args, arguments=[a for a in args.train_arguments if a != "--"])
    folders = _extractor_layouts(args)
    arms = []
    for folder in folders:
        summary = read_json(folder.tokens_summary) or {}
        arms.append({"root": folder.root, "tokens": folder.tokens, "token_count": summary.get("tokens")})
    plan = training_plan(stage, arms)
    if args.run and len(plan) > 1:
        raise ValueError("--run names one training run: give one extractor and one seed (--seeds N)")
    runs = []
    for entry in plan:  # one after another: the DAG runs them in parallel
        job = pretrain_job(stage, entry["root"], entry["tokens"], _tokenizer(args), args.run, entry["seed"],
                           entry["data_token_limit"])  # fmt: skip
        if job.launcher:  # data parallel: torchrun starts the ranks
            code = subprocess.run([*job.launcher, "pretrain", *job.train], check=False).returncode
        else:
            code = pretrain_main(job.train)
        if code or (code := pretrain_main(job.export)):
            return code
        runs.append(
            {"run_dir": job.run_dir, "seed": entry["seed"], "data_token_limit": entry["data_token_limit"]}
        )
    return _print({"runs": runs})


def run_evaluate_stage(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dripper.config.evaluate import EvaluateStageConfig
    from dripper.eval.lm_suite import run_suite_many
    from dripper.eval.reference import reference_for_run
    from dripper.runs.jobs import EvaluationFolders, collect_scores

    _configure_run_logging(args.quiet)
    stage = EvaluateStageConfig.from_arguments(args)
    results = []
    for folder in _extractor_layouts(args):
        reference = reference_for_run(folder.root, stage.reference_text, stage.reference_pages)
        for run in _runs(str(Path(folder.root, "pretrain")), args.run):
            checkpoints = sorted(Path(folder.hf_checkpoints(run)).glob("iter_*"))
            if not checkpoints:
                raise FileNotFoundError(
                    f"{folder.hf_checkpoints(run)}: no exported checkpoint: run `dripper run pretrain` first"
                )
            folders = EvaluationFolders.of(folder.root, run)
            summaries = run_suite_many(stage.suite, checkpoints, out_dir=Path(folders.checkpoints),
                                       device=stage.device, limit=stage.limit, fixtures=stage.fixtures,
                                       reference=reference["file"])  # fmt: skip
            scores = collect_scores(folders, checkpoints)["scores"]
            results.append(
                {
                    "scores": scores,
                    "means": {s["model"]: s["mean"] for s in summaries},
                    "reference_loss": {s["model"]: s.get("reference_loss") for s in summaries},
                }
            )
    return _print(results[0] if len(results) == 1 else {"runs": results})


def run_report_stage(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dripper.config.extractor import parse_extractors
    from dripper.config.report import ReportStageConfig
    from dripper.eval.ablation import ablation_manifest
    from dripper.eval.extraction import BenchmarkConfig, run_benchmark
    from dripper.eval.report import load_manifest, write_report
    from dripper.layout import RunLayout
    from dripper.runs.jobs import write_report_manifest

    _configure_run_logging(args.quiet)
    stage = ReportStageConfig.from_arguments(args)
    name = stage.name or "-vs-".join(args.extractor)
    layout = RunLayout(args.input)
    folders = [layout.extractor(name) for name in args.extractor]
    for folder in folders:
        if not Path(folder.spec_file).exists():
            raise FileNotFoundError(
                f"{folder.spec_file} is missing: extract with `dripper run extract` first"
            )
    specs = parse_extractors([json.loads(Path(f.spec_file).read_text()) for f in folders])
    out = Path(layout.ablation(name))
    run_benchmark(
        BenchmarkConfig(data=[Path(p) for p in stage.labelled_pages], extractors=list(specs), limit=stage.labelled_limit,
                        out=out / "extraction" / "summary.json"),
        progress=False,
    )  # fmt: skip
    runs = {
        f.root: _runs(str(Path(f.root, "pretrain")), args.run)
        for f in folders
        if Path(f.root, "pretrain").is_dir()
    }
    manifest = ablation_manifest([f.root for f in folders], train_runs=runs,
                                 extraction_summary=str(out / "extraction" / "summary.json"),
                                 title=args.title or f"Extractor ablation {name}",
                                 run={"run_root": args.input, **_training_description(runs)},
                                 lm_pages_per_second=stage.lm_pages_per_second)  # fmt: skip
    files = write_report_manifest(str(out / "report"), manifest)
    write_report(load_manifest(files.manifest), Path(files.html), Path(files.markdown))
    return _print({"html": files.html, "markdown": files.markdown})


def _training_description(runs: dict[str, list[str]]) -> dict[str, Any]:
    """What the training runs share, for the report's "what was run": the model, budget and seeds (from
    each run's ``run.json``)."""
    from pathlib import Path

    from dripper.layout import ExtractorLayout

    configs = []
    for root, names in runs.items():
        for name in names:
            path = Path(ExtractorLayout(root).pretrain(name), "run.json")
            if path.exists():
                configs.append(json.loads(path.read_text(encoding="utf-8")).get("train", {}))
    if not configs:
        return {}
    first = configs[0]
    described = {"model": first.get("model"), "seeds": sorted({c.get("seed") for c in configs})}
    for key in ("train_tokens", "train_steps", "data_token_limit"):
        if all(c.get(key) == first.get(key) for c in configs) and first.get(key) is not None:
            described[key] = first[key]
    return described


def _configure_run_logging(quiet: bool) -> bool | None:
    """Log lines on a pipe, a progress bar on a terminal; returns the stage's ``progress`` argument."""
    # Per-page complaints of the fallback extractor: each page's outcome is in its row already.
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    if quiet:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return False
    level = logging.WARNING if sys.stderr.isatty() else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("distributed").setLevel(logging.WARNING)  # Dask's own start-up chatter
    return None


def _finish_stage(report) -> int:
    print(json.dumps(report.to_dict(), indent=1))
    return 0 if report.ok else 1


def run_simplify_stage(args: argparse.Namespace) -> int:
    from dripper.config.simplify import SimplifyStageConfig
    from dripper.stages.simplify import simplify_stage

    progress = _configure_run_logging(args.quiet)
    stage = SimplifyStageConfig.from_arguments(args)
    storage_options = parse_key_values(args.storage_option, "--storage-option")
    input_options = (
        parse_key_values(args.input_storage_option, "--input-storage-option")
        if args.input_storage_option
        else None
    )
    report = simplify_stage(
        args.input,
        args.output,
        stage,
        scheduler=args.dask_scheduler,
        storage_options=storage_options or None,
        input_storage_options=input_options,
        force=args.force,
        progress=progress,
        raise_on_failure=False,
    )
    return _finish_stage(report)


def _names_warc_files(inputs: list[str], storage_options: dict[str, Any] | None) -> bool:
    """Whether ``dripper run extract --input`` names WARC files rather than a run root: several inputs, a
    snapshot, a listing, a WARC file or glob, or a folder holding neither simplified/ nor extractors/."""
    import posixpath

    from dripper.io.storage import filesystem_for

    if len(inputs) != 1:
        return True
    spec = inputs[0]
    name = posixpath.basename(spec.rstrip("/"))
    if spec.startswith("snapshot:") or name.endswith((".paths", ".paths.gz")) or ".warc" in name:
        return True
    if any(char in spec for char in "*?["):
        return True
    fs, path = filesystem_for(spec, storage_options)
    if not fs.isdir(path):
        return False  # not there (yet): read as a run root, whose error says what to run first
    markers = ("simplified", "extractors", "_run_summary.json")
    return not any(fs.exists(posixpath.join(path.rstrip("/"), marker)) for marker in markers)


def run_extract_stage(args: argparse.Namespace) -> int:
    from dripper.config.extract import ExtractStageConfig
    from dripper.config.simplify import SimplifyStageConfig
    from dripper.stages.extractor import run_extractor, run_extractor_one_pass
    from dripper.stages.one_pass import chooses_one_pass
    from dripper.stages.simplify import plan_simplify_shards, resolve_warc_inputs, simplify_stage

    progress = _configure_run_logging(args.quiet)
    stage = ExtractStageConfig.from_arguments(args, extractor=extractor_from_arguments(args))
    storage_options = parse_key_values(args.storage_option, "--storage-option") or None
    input_options = (
        parse_key_values(args.input_storage_option, "--input-storage-option")
        if args.input_storage_option
        else storage_options
    )
    run = {
        "force": args.force,
        "scheduler": args.dask_scheduler,
        "progress": progress,
        "raise_on_failure": False,
    }
    if not _names_warc_files(args.input, input_options):
        (root,) = args.input
        report = run_extractor(root, stage, args.output, storage_options=storage_options,
                               input_storage_options=input_options, **run)  # fmt: skip
        return _finish_stage(report)
    if not args.output:
        raise ValueError("dripper run extract with WARC inputs needs --output (the run root)")
    reading = SimplifyStageConfig.from_arguments(args, workers=stage.workers)
    if not chooses_one_pass(stage, args.output, storage_options):
        simplified = simplify_stage(args.input, args.output, reading, storage_options=storage_options,
                                    input_storage_options=input_options, **run)  # fmt: skip
        if not simplified.ok:
            return _finish_stage(simplified)
        report = run_extractor(args.output, stage, storage_options=storage_options,
                               input_storage_options=input_options, **run)  # fmt: skip
        return _finish_stage(report)
    warc_files = resolve_warc_inputs(args.input, count=reading.warc_count, fraction=reading.warc_fraction,
                                     seed=reading.seed, storage_options=input_options)  # fmt: skip
    shards = list(enumerate(plan_simplify_shards(warc_files, reading.warcs_per_shard)))
    report = run_extractor_one_pass(args.output, shards, stage, reading, storage_options=storage_options,
                                    input_storage_options=input_options, **run)  # fmt: skip
    return _finish_stage(report)
