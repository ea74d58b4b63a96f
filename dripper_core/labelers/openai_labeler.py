"""The ``openai`` labeler: any OpenAI-compatible server (``vllm serve`` in production) with the answer regex.

Each prompt (a page or a window of it) is one ``/v1/completions`` request carrying the regex as vLLM's
server reads it, ``"structured_outputs": {"regex": …}`` (the older ``guided_regex`` field is silently
ignored by current vLLM: the answer comes back unconstrained). Completions get the prompt as token ids,
templated here exactly as the released weights expect; ``endpoint="chat"`` sends chat messages instead and
lets the server template them (``compact`` only).

Requests run concurrently under a semaphore (``max_concurrency``), each with a timeout; transport errors,
429 and 5xx are retried with exponential backoff and jitter; a page whose request still fails gets
``Labels.failed(reason)``, so the pipeline's fallback takes it, and the rest of the batch is unaffected.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Sequence
from typing import Any

from dripper_core.labelers.base import BlockLabeler, LabelRequest, Labels, register_labeler
from dripper_core.labelers.lm_common import LMAnswer, LMCall, install_hint, open_local_model
from dripper_core.labelers.lm_prompts import SYSTEM_PROMPT
from dripper_core.labelers.lm_tokens import label_margins
from dripper_core.prompt import answer_format as get_answer_format

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


@register_labeler("openai")
class OpenAILabeler(BlockLabeler):
    """Labels blocks through an OpenAI-compatible completions server.

    Args:
        base_url: Server root, e.g. ``http://127.0.0.1:8000/v1``.
        model: The served model name; also where the tokenizer is read from (a local folder or a cached
            repo id) unless ``tokenizer`` says otherwise.
        tokenizer: Folder or cached repo id of the tokenizer, if not ``model``.
        served_model_name: Name to send as ``model`` in requests, if not ``model``.
        answer_format: ``compact`` or ``json``.
        max_model_len: The server's context length (``None``: the model config's).
        endpoint: ``completions`` (token ids, exact prompt) or ``chat`` (messages; ``compact`` only).
        api_key: Sent as a bearer token.
        max_concurrency: Requests in flight at once.
        timeout: Seconds per request.
        max_retries: Retries after the first attempt (transport errors, 408/429/5xx).
        backoff: Base delay in seconds (doubled per retry, with jitter).
        logprobs: Top log-probabilities per token for label confidences (0: none).
    """

    name = "openai"
    needs_block_text = False

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer: str | None = None,
        served_model_name: str | None = None,
        revision: str | None = None,
        answer_format: str = "compact",
        max_model_len: int | None = None,
        endpoint: str = "completions",
        api_key: str | None = None,
        max_concurrency: int = 32,
        timeout: float = 300.0,
        max_retries: int = 3,
        backoff: float = 1.0,
        logprobs: int = 20,
        system_prompt: str = SYSTEM_PROMPT,
        trust_remote_code: bool = False,
    ) -> None:
        super().__init__()
        try:
            import httpx
        except ImportError as error:
            raise ImportError(install_hint("httpx", "openai")) from error
        if endpoint not in ("completions", "chat"):
            raise ValueError(f"endpoint must be completions or chat, got {endpoint!r}")
        if max_concurrency < 1 or max_retries < 0 or timeout <= 0:
            raise ValueError("max_concurrency must be >= 1, max_retries >= 0 and timeout > 0")
        fmt = get_answer_format(answer_format)
        if endpoint == "chat" and fmt.name != "compact":
            raise ValueError(
                "the json format (v1.0) was used without a chat template; use endpoint='completions'"
            )
        local = open_local_model(tokenizer or model, revision, max_model_len, trust_remote_code)
        tokenizer_object = local.tokenizer
        self.planner = local.planner(fmt, system_prompt)
        self.renderer = self.planner.renderer
        self.format = fmt
        self.token_bytes = local.token_bytes()
        self._token_ids = {
            token: index
            for index, token in enumerate(
                tokenizer_object.convert_ids_to_tokens(range(len(tokenizer_object)))
            )
        }
        self.base_url = base_url.rstrip("/")
        self.served_model_name = served_model_name or model
        self.endpoint = endpoint
        self.max_concurrency = max_concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.logprobs = logprobs
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._httpx = httpx
        self.requests_sent = 0
        self.retries = 0

    def label_batch(self, requests: Sequence[LabelRequest]) -> list[Labels]:
        calls, failures = self.planner.plan(requests)
        answers = _run_coroutine(self._answer_all(calls)) if calls else []
        return self.planner.assemble(len(requests), calls, answers, failures)

    async def _answer_all(self, calls: Sequence[LMCall]) -> list[LMAnswer]:
        semaphore = asyncio.Semaphore(self.max_concurrency)
        limits = self._httpx.Limits(max_connections=self.max_concurrency)
        async with self._httpx.AsyncClient(
            timeout=self.timeout, limits=limits, headers=self.headers
        ) as client:

            async def bounded(call: LMCall) -> LMAnswer:
                async with semaphore:
                    return await self._answer(client, call)

            return await asyncio.gather(*(bounded(call) for call in calls))

    def _payload(self, call: LMCall) -> tuple[str, dict[str, Any]]:
        payload: dict[str, Any] = {
            "model": self.served_model_name,
            "max_tokens": call.max_tokens,
            "temperature": 0.0,
            "structured_outputs": {"regex": call.regex},
        }
        if self.endpoint == "chat":
            payload["messages"] = self.renderer.chat_messages(call.simplified_html)
            payload["chat_template_kwargs"] = {"enable_thinking": False}
            if self.logprobs:
                payload.update(logprobs=True, top_logprobs=self.logprobs)
            return "/chat/completions", payload
        payload["prompt"] = call.prompt_ids
        if self.logprobs:
            payload.update(logprobs=self.logprobs, return_tokens_as_token_ids=True)
        return "/completions", payload

    async def _answer(self, client: Any, call: LMCall) -> LMAnswer:
        path, payload = self._payload(call)
        error = "no attempt"
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.retries += 1
                await asyncio.sleep(self.backoff * 2 ** (attempt - 1) * (0.5 + random.random()))
            self.requests_sent += 1
            try:
                response = await client.post(self.base_url + path, json=payload)
            except self._httpx.HTTPError as exception:
                error = f"{type(exception).__name__}: {exception}"[:200]
                continue
            if response.status_code == 200:
                try:
                    return self._parse(call, response.json())
                except (ValueError, KeyError, IndexError, TypeError) as exception:
                    return LMAnswer(text="", failure=f"malformed server response: {exception}"[:200])
            error = f"HTTP {response.status_code}: {response.text[:160]}"
            if response.status_code not in _RETRY_STATUS:
                break
        return LMAnswer(text="", failure=f"server request failed after {attempt + 1} attempts: {error}")

    def _parse(self, call: LMCall, body: dict[str, Any]) -> LMAnswer:
        choice = body["choices"][0]
        if self.endpoint == "chat":
            text = choice["message"]["content"] or ""
            steps = [
                (
                    self._bytes_of(entry),
                    {self._bytes_of(top): top["logprob"] for top in entry.get("top_logprobs", [])},
                )
                for entry in ((choice.get("logprobs") or {}).get("content") or [])
            ]
        else:
            text = choice["text"]
            logprobs = choice.get("logprobs") or {}
            steps = [
                (self._token_bytes(token), {self._token_bytes(t): value for t, value in (top or {}).items()})
                for token, top in zip(
                    logprobs.get("tokens") or [], logprobs.get("top_logprobs") or [], strict=False
                )
            ]
        margins = None
        steps = [(token, top) for token, top in steps if token is not None]
        if steps:
            margins = label_margins(self.format, [s[0] for s in steps], [s[1] for s in steps], call.n_blocks)
        return LMAnswer(text=text, margins=margins)

    def _token_bytes(self, token: str) -> bytes | None:
        """Bytes of a token as vLLM returns it with ``return_tokens_as_token_ids`` (``token_id:123``)."""
        if token.startswith("token_id:"):
            index = int(token.split(":", 1)[1])
            return self.token_bytes[index] if index < len(self.token_bytes) else None
        index = self._token_ids.get(token)
        return self.token_bytes[index] if index is not None else token.encode("utf-8")

    def _bytes_of(self, entry: dict[str, Any]) -> bytes | None:
        if entry.get("bytes") is not None:
            return bytes(entry["bytes"])
        return self._token_bytes(entry.get("token", ""))


def _run_coroutine(coroutine: Any) -> Any:
    """``asyncio.run``, also from inside a running event loop (a notebook, an async worker): in a thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coroutine)
        except BaseException as error:  # re-raised in the caller's thread
            result["error"] = error

    thread = threading.Thread(target=target, name="dripper-openai-labeler")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
