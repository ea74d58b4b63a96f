"""Long jobs in processes of their own: pretraining, benchmark evaluation, the extraction benchmark and
the ablation report (``python -m MODULE …``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from dripper.airflow.base import StageConfigMixin
from dripper.airflow.hooks import RunStorageHook
from dripper.airflow.storage import DEFAULT_AWS_CONN_ID
from dripper.config.evaluate import EvaluateStageConfig
from dripper.config.pretrain import PretrainStageConfig

# -- long jobs in their own processes ----------------------------------------------------------------------


class ModuleJobOperator(StageConfigMixin, BaseOperator):
    """Run ``python -m {module} {argv…}`` in a process of its own (training, evaluation, benchmarks).

    The job's output streams into the task log; killing the task terminates the process. A module that is
    not installed fails the task at once, without retries, saying which stage is missing. The last stdout
    line that parses as a JSON object is returned as ``result`` (the project's CLIs print one).

    Args:
        module: The module to run (``pretrain``, ``dripper.eval.extraction``).
        argv: Its command-line arguments (templated; ``None`` entries are dropped).
        requires: More modules that must be importable (``megatron.core``, ``torch``).
        stage: What the job is, for messages (``pretraining``).
        launcher: Replaces ``[python, -m]``, e.g. ``["torchrun", "--nproc-per-node", "8", "-m"]``.
        env: Extra environment variables of the process.
    """

    template_fields: Sequence[str] = ("argv", "env")
    ui_color = "#fdf1e6"

    def __init__(
        self,
        *,
        module: str,
        argv: Any = (),
        requires: Sequence[str] = (),
        stage: str | None = None,
        launcher: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.module = module
        self.argv = argv
        self.requires = tuple(requires)
        self.stage = stage or module
        self.launcher = list(launcher) if launcher else None
        self.env = env
        self._process: Any = None

    def job_environment(self) -> dict[str, str]:
        import os

        return {**os.environ, **{k: str(v) for k, v in (self.env or {}).items()}}

    def check_available(self) -> None:
        """Fail (no retry) when the module or a requirement is not importable where the job runs."""
        from airflow.sdk.exceptions import AirflowFailException

        from dripper.runs.jobs import missing_modules

        missing = missing_modules([self.module, *self.requires], self.job_environment())
        if missing:
            raise AirflowFailException(
                f"{self.task_id}: the {self.stage} stage cannot run: module {missing[0]!r} is not importable in "
                "this Airflow environment. Install it (or the project extra that provides it) on the workers, "
                "then clear this task; the upstream outputs are kept."
            )

    def command(self) -> list[str]:
        launcher = self.launcher or [sys.executable, "-m"]
        return [*launcher, self.module, *(str(a) for a in (self.argv or []) if a is not None)]

    def execute(self, context: Any) -> dict[str, Any]:
        import subprocess

        from airflow.sdk.exceptions import AirflowException

        from dripper.runs.jobs import last_json_object

        self.check_available()
        command = self.command()
        self.log.info("running: %s", " ".join(command))
        started = time.perf_counter()
        tail: list[str] = []
        self._process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.job_environment(),
            bufsize=1,
        )  # fmt: skip

        def lines() -> Any:
            nonlocal tail
            for line in self._process.stdout:
                line = line.rstrip("\n")
                self.log.info("%s", line)
                tail = [*tail[-19:], line]
                yield line

        result = last_json_object(lines())
        returncode = self._process.wait()
        if returncode != 0:
            raise AirflowException(
                f"{self.stage}: `{' '.join(command)}` exited with {returncode}; last lines:\n"
                + "\n".join(tail)
            )
        return {
            "module": self.module,
            "result": result,
            "wall_seconds": round(time.perf_counter() - started, 3),
        }

    def on_kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()


def _local_dir(path: str, what: str) -> str:
    from airflow.sdk.exceptions import AirflowFailException

    if "://" in str(path) and not str(path).startswith("file://"):
        raise AirflowFailException(
            f"{what} {path} is not on a local or shared filesystem: Megatron and lm-eval read local files; "
            "use a storage root on a filesystem the training workers mount"
        )
    return str(path).removeprefix("file://")


class PretrainOperator(ModuleJobOperator):
    """Train a model on one corpus's tokens with ``python -m dripper.pretrain train`` (own process; ``torchrun``
    with ``nproc`` > 1), then export it to Hugging Face format (``python -m dripper.pretrain export``).

    ``tokens``: a run of the training plan (:func:`dripper.runs.jobs.training_plan`: ``tokens``, ``seed``,
    ``data_token_limit``), the tokenize task's output (a dict with ``tokens`` and ``root``: the first seed)
    or a tokens folder. The run folder is ``{root}/pretrain/{run_name}`` (default
    ``{model}-{budget}-seed{seed}``); training resumes from its latest checkpoint. ``config``: the
    pretrain stage's (:class:`~dripper.config.pretrain.PretrainStageConfig`: ``model``, ``train_steps``,
    ``eval_every``, ``device``, ``nproc``, ``arguments``), with its defaults and checks, and the same
    command lines as ``dripper run pretrain``: a checkpoint every ``eval_every`` steps, each exported to
    ``hf-checkpoints/``. Returns ``{"run_dir", "hf_dir", "checkpoints", "train": …, "export": …}``.

    ``run_on="slurm"`` runs the training as a Slurm job instead (:func:`dripper.airflow.slurm.submit_pretrain`):
    ``slurm`` holds :class:`dripper.pretrain.slurm.SlurmJobConfig`'s fields (``nodes``, ``gpus_per_node``,
    ``partition``, ``account``, ``time``, ``sbatch_lines``, ``env``…); the task waits in the triggerer, fails
    with the job's log tail, cancels the job when killed or cleared, and a resubmission resumes from the
    latest checkpoint. The export then runs here, as with ``run_on="local"`` (not ``executor``: that is
    Airflow's own operator field).
    """

    template_fields: Sequence[str] = ("tokens", "tokenizer", "config", "run_name", "run_on", "slurm")
    config_class = PretrainStageConfig

    def __init__(
        self,
        *,
        tokens: Any,
        tokenizer: Any,
        config: Any = None,
        run_name: Any = None,
        run_on: Any = "local",
        slurm: Any = None,
        **kwargs,
    ):
        super().__init__(
            module="dripper.pretrain",
            requires=("dripper.pretrain.train", "torch", "megatron.core"),
            stage="pretraining",
            **kwargs,
        )
        self.tokens = tokens
        self.tokenizer = tokenizer
        self.config = self.config_values(config)
        self.run_name = run_name
        self.run_on = run_on
        self.slurm = slurm

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        if self.run_on not in ("local", "slurm"):
            raise AirflowFailException(f"{self.task_id}: run_on={self.run_on!r}: use 'local' or 'slurm'")
        job = self.job(export_in_training=self.run_on == "local")
        self.launcher = job.launcher if self.run_on == "local" else None
        self.argv = job.train
        if self.run_on == "slurm":
            from dripper.airflow.slurm import submit_pretrain

            submit_pretrain(self, context, job.run_dir, job.root)  # defers to execute_slurm_complete
        train = super().execute(context)
        return self._export(context, job, train["result"])

    def job(self, export_in_training: bool = False) -> Any:
        """The training run of the rendered fields (:func:`dripper.runs.jobs.pretrain_job`)."""
        import os

        from dripper.runs.jobs import pretrain_job

        plan = self.tokens if isinstance(self.tokens, dict) else {}
        tokens = _local_dir(plan.get("tokens") or self.tokens, "tokens folder")
        root = os.path.dirname(tokens.rstrip("/"))
        return pretrain_job(self.stage_config(), root, tokens, str(self.tokenizer), self.run_name,
                            plan.get("seed"), plan.get("data_token_limit"), export_in_training)  # fmt: skip

    def execute_slurm_complete(self, context: Any, event: dict[str, Any], **job: Any) -> dict[str, Any]:
        """Resumed when the Slurm training job ended: fail with its log tail, or export as locally."""
        from dripper.airflow.slurm import job_outcome

        train = job_outcome(self, event, f"{self.task_id}: pretraining")
        return self._export(context, self.job(), train["result"])

    def on_kill(self) -> None:
        from dripper.airflow.slurm import on_kill_cancel

        on_kill_cancel(self)
        super().on_kill()

    def _export(self, context: Any, job: Any, train: Any) -> dict[str, Any]:
        from dripper.runs.jobs import pretrain_result

        if job.export is None:  # the training process exported its checkpoints
            return pretrain_result(job, train, (train or {}).get("export"))
        self.launcher, self.argv = None, job.export
        return pretrain_result(job, train, super().execute(context)["result"])


class ExtractionBenchmarkOperator(ModuleJobOperator):
    """Score extractors on labelled pages with ``python -m dripper.eval.extraction`` (own process) and store the
    summary, the printed table and the per-page scores under ``output_dir`` (local or ``s3://``).
    ``dripper_labelers`` adds ``dripper:<labeler>`` (the Dripper pipeline with that labeler) per name.

    Returns ``{"output_dir", "summary", "report", "rows": {extractor: overall figures}}``.
    """

    template_fields: Sequence[str] = (
        "data",
        "extractors",
        "limit",
        "group_by",
        "workers",
        "output_dir",
        "dripper_labelers",
        "extractor_specs",
        "aws_conn_id",
    )

    def __init__(
        self,
        *,
        data: Any,
        extractors: Any = (),
        output_dir: str,
        dripper_labelers: Any = (),
        extractor_specs: Any = (),
        limit: Any = None,
        group_by: Any = ("source", "page_type"),
        workers: Any = 1,
        aws_conn_id: str = DEFAULT_AWS_CONN_ID,
        **kwargs,
    ):
        super().__init__(module="dripper.eval.extraction", stage="extraction benchmark", **kwargs)
        self.data = data
        self.extractors = extractors
        self.output_dir = output_dir
        self.limit = limit
        self.group_by = group_by
        self.workers = workers
        self.dripper_labelers = dripper_labelers
        self.extractor_specs = extractor_specs
        self.aws_conn_id = aws_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        import os
        import tempfile

        from dripper.runs.jobs import extraction_benchmark_arguments, store_extraction_benchmark

        hook = RunStorageHook(self.output_dir, self.aws_conn_id)
        with tempfile.TemporaryDirectory(prefix="extraction-benchmark-") as tmp:
            summary_file, pages_file = os.path.join(tmp, "summary.json"), os.path.join(tmp, "pages.jsonl")
            self.argv = extraction_benchmark_arguments(
                self.data, self.extractors, self.dripper_labelers, self.extractor_specs, self.group_by,
                self.workers, self.limit, summary_file, pages_file,
            )  # fmt: skip
            super().execute(context)
            result = store_extraction_benchmark(
                self.output_dir, summary_file, pages_file, hook.storage_options
            )
        extra = {key: result[key] for key in ("output_dir", "report", "extractors")}
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = extra
        return result


class EvaluateOperator(ModuleJobOperator):
    """Score a trained model's checkpoints on the benchmark suite with ``python -m dripper.eval.lm_suite`` (own
    process, one model load per checkpoint).

    ``model``: the pretrain task's output (``hf_dir``, ``checkpoints``, ``run_dir``, ``root``, ``seed``). Scores
    go to ``{root}/eval/{run}/checkpoints/{checkpoint}.json`` and, for the last checkpoint, ``…/scores.json``;
    each holds the checkpoint's loss on the held-out reference text too (the early signal:
    :func:`dripper.eval.reference.reference_for_run`, the config's ``reference_text`` or its
    ``reference_pages`` not in the run's WARC files).
    ``config``: the evaluate stage's (:class:`~dripper.config.evaluate.EvaluateStageConfig`). Returns
    ``{"root", "run_dir", "scores", "checkpoint_scores", "mean", "mean_stderr", "categories"}``.

    ``run_on="slurm"`` runs the suite as a one-process Slurm job (``slurm``: the fields of
    :class:`dripper.pretrain.slurm.SlurmJobConfig`, e.g. ``{"gpus_per_node": 1, "partition": "h100", "time":
    "02:00:00"}``), awaited in the triggerer like pretraining's; its log goes to ``{root}/eval/{run}/slurm/``.
    """

    template_fields: Sequence[str] = ("model", "config", "run_on", "slurm")
    config_class = EvaluateStageConfig

    def __init__(self, *, model: Any, config: Any = None, run_on: Any = "local", slurm: Any = None, **kwargs):
        super().__init__(
            module="dripper.eval.lm_suite",
            requires=("lm_eval",),
            stage="evaluation (lm-eval suite)",
            **kwargs,
        )
        self.model = model
        self.config = self.config_values(config)
        self.run_on = run_on
        self.slurm = slurm

    def execute_slurm_complete(self, context: Any, event: dict[str, Any], **job: Any) -> dict[str, Any]:
        """Resumed when the Slurm evaluation job ended: fail with its log tail, or collect the scores."""
        return self.execute(context, slurm_event=event)

    def on_kill(self) -> None:
        from dripper.airflow.slurm import on_kill_cancel

        on_kill_cancel(self)
        super().on_kill()

    def execute(self, context: Any, slurm_event: dict[str, Any] | None = None) -> dict[str, Any]:
        import os

        from dripper.runs.jobs import EvaluationFolders, collect_scores, suite_arguments

        if self.run_on not in ("local", "slurm"):
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(f"{self.task_id}: run_on={self.run_on!r}: use 'local' or 'slurm'")
        config = self.stage_config()
        run_dir = _local_dir(self.model["run_dir"], "model run")
        run = os.path.basename(run_dir.rstrip("/"))
        models = list(self.model.get("checkpoints") or []) or [self.model["hf_dir"]]
        folders = EvaluationFolders.of(self.model["root"], run)
        os.makedirs(folders.checkpoints, exist_ok=True)
        reference = self.reference(config)
        self.argv = suite_arguments(models, config.suite, folders.checkpoints, config.device, config.limit,
                                    config.fixtures, config.arguments, reference["file"])  # fmt: skip
        if self.run_on == "slurm" and slurm_event is None:
            from dripper.airflow.slurm import submit_module_job

            log_dir = os.path.join(folders.folder, "slurm")
            submit_module_job(self, log_dir=log_dir, job_name=f"eval-{run}", launcher="python")  # defers
        if slurm_event is None:
            super().execute(context)
        else:
            from dripper.airflow.slurm import job_outcome

            job_outcome(self, slurm_event, f"{self.task_id}: evaluation")
        return {
            "root": self.model["root"],
            "run_dir": run_dir,
            "seed": self.model.get("seed"),
            "reference": reference,
            **collect_scores(folders, models),
        }

    def reference(self, config: EvaluateStageConfig) -> dict[str, Any]:
        """The held-out reference text of the early signal (:func:`dripper.eval.reference.reference_for_run`)."""
        from airflow.sdk.exceptions import AirflowFailException

        from dripper.eval.reference import reference_for_run

        try:
            return reference_for_run(
                _local_dir(self.model["root"], "extractor folder"),
                config.reference_text,
                config.reference_pages,
            )
        except (FileNotFoundError, ValueError) as error:
            raise AirflowFailException(f"{self.task_id}: {error}") from None


class CheckSuiteOperator(ModuleJobOperator):
    """Check that every benchmark of a suite can load its data where evaluation will run
    (``python -m dripper.eval.lm_suite --check``), so a missing dataset fails the run before any WARC is read or
    model trained. The failure names the benchmarks and how to make their data available.

    ``config``: the evaluation's (:class:`~dripper.config.evaluate.EvaluateStageConfig`): its ``suite``,
    ``fixtures`` and ``arguments`` are the check's (model options are not used by the check).
    """

    template_fields: Sequence[str] = ("config",)
    config_class = EvaluateStageConfig

    def __init__(self, *, config: Any = None, **kwargs):
        super().__init__(
            module="dripper.eval.lm_suite", requires=("lm_eval",), stage="benchmark data check", **kwargs
        )
        self.config = self.config_values(config)

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        config = self.stage_config()
        fixtures = ["--fixtures", config.fixtures] if config.fixtures else []
        self.argv = ["--check", "--suite", config.suite, *fixtures, *config.arguments]
        try:
            return super().execute(context)
        except AirflowException as error:
            # No retry: the data does not appear by itself. The job's last lines hold the benchmarks.
            raise AirflowFailException(str(error)) from None


class AblationReportOperator(ModuleJobOperator):
    """Render the ablation report with ``python -m dripper.eval.report``: one HTML file with plots and a Markdown
    table, in ``output_dir``.

    Joins, by extractor folder, the extract tasks' outputs (``labeler``, ``output_root``) with the evaluate
    tasks' (``run_dir``, ``scores``) and writes the report's manifest (``output_dir/manifest.json``):
    each extractor's refinement summary, training run and scores, and the extraction benchmark's summary
    (``extraction``: the extraction-quality task's output, optional).
    """

    template_fields: Sequence[str] = (
        "extracts",
        "evaluations",
        "extraction",
        "output_dir",
        "title",
        "run_description",
        "lm_pages_per_second",
    )

    def __init__(
        self,
        *,
        extracts: Any,
        evaluations: Any,
        output_dir: str,
        extraction: Any = None,
        title: Any = "Extractor ablation",
        run_description: Any = None,
        lm_pages_per_second: Any = None,
        **kwargs,
    ):
        super().__init__(
            module="dripper.eval.report", requires=("matplotlib",), stage="ablation report", **kwargs
        )
        self.extracts = extracts
        self.evaluations = evaluations
        self.extraction = extraction
        self.output_dir = output_dir
        self.title = title
        self.run_description = run_description
        self.lm_pages_per_second = lm_pages_per_second

    def manifest(self) -> dict[str, Any]:
        """The report manifest from the extractor folders (``dripper.eval.ablation``, as ``dripper run report``)."""
        import os

        from dripper.eval.ablation import ablation_manifest

        runs: dict[str, list[str]] = {}  # one training run per seed of each arm, in the plan's order
        for e in self.evaluations or []:
            runs.setdefault(str(e["root"]).rstrip("/"), []).append(
                os.path.basename(str(e["run_dir"]).rstrip("/"))
            )
        roots = [str(extract["output_root"]).rstrip("/") for extract in self.extracts or []]
        rate = float(self.lm_pages_per_second) if self.lm_pages_per_second not in (None, "", "None") else None
        manifest = ablation_manifest(
            roots, train_runs=runs, title=self.title, run=self.run_description, lm_pages_per_second=rate
        )
        if self.extraction:
            extraction_dir = _local_dir(self.extraction["output_dir"], "extraction benchmark")
            manifest["extraction"] = f"{extraction_dir}/summary.json"
        return manifest

    def execute(self, context: Any) -> dict[str, Any]:
        from dripper.runs.jobs import write_report_manifest

        files = write_report_manifest(_local_dir(self.output_dir, "report folder"), self.manifest())
        self.argv = files.arguments()
        super().execute(context)
        extra = {"html": files.html, "markdown": files.markdown, "manifest": files.manifest}
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = extra
        return extra
