"""The ``openai`` labeler: any OpenAI-compatible server (``vllm serve`` in production) with the answer regex.

Each prompt (a page or a window of it) is one ``/v1/completions`` request carrying the regex as vLLM's
server reads it, ``"structured_outputs": {"regex": …}`` (the older ``guided_regex`` field is silently
ignored by current vLLM: the answer comes back unconstrained). Completions get the prompt as token ids,
templated here exactly as the released weights expect; ``endpoint="chat"`` sends chat messages instead and
lets the server template them (``compact`` only).

Requests run concurrently under a semaphore (``max_concurrency``), each with a timeout; transport errors,
429 and 5xx are retried with exponential backoff and jitter; a page whose request still fails gets
``Labels.failed(reason)``, so the pipeline's fallback takes it, and the rest of the batch is unaffected.

Several servers (``base_url`` a list, or comma-separated: one ``vllm serve`` per GPU node) share the
requests round robin. A request that fails on one server for a reason a retry could fix goes at once to the
next; a server that cannot be reached is set aside for ``down_seconds`` (its requests go to the others,
unless every server is down), so a dead node costs one failed connection, not a timeout per page.
:attr:`OpenAILabeler.endpoint_stats` counts requests, answers and failures per server.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from dripper.labelers.base import LabelRequest, Labels, register_labeler
from dripper.labelers.lm_common import LMAnswer, LMCall, LMLabeler, install_hint, open_local_model
from dripper.labelers.lm_prompts import SYSTEM_PROMPT
from dripper.labelers.lm_tokens import label_margins
from dripper.prompt import answer_format as get_answer_format

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


@register_labeler("openai")
class OpenAILabeler(LMLabeler):
    """Labels blocks through an OpenAI-compatible completions server.

    Args:
        base_url: Server root, e.g. ``http://127.0.0.1:8000/v1``; several as a list or comma-separated.
        model: The served model name; also where the tokenizer is read from (a local folder or a cached
            repo id) unless ``tokenizer`` says otherwise.
        tokenizer: Folder or cached repo id of the tokenizer, if not ``model``.
        served_model_name: Name to send as ``model`` in requests, if not ``model``.
        answer_format: ``compact`` or ``json``.
        max_model_len: The server's context length (``None``: the model config's).
        endpoint: ``completions`` (token ids, exact prompt) or ``chat`` (messages; ``compact`` only).
        api_key: Sent as a bearer token.
        max_concurrency: Requests in flight at once, per server.
        timeout: Seconds per request.
        max_retries: Retries after the first attempt (transport errors, 408/429/5xx).
        backoff: Base delay in seconds (doubled per retry, with jitter).
        logprobs: Top log-probabilities per token for label confidences (0: none).
        down_seconds: How long a server that could not be reached is passed over (several servers).
    """

    name = "openai"
    required_options = {
        **LMLabeler.required_options,
        "base_url": "the server's URL, http://host:port/v1",
    }

    @classmethod
    def needs_gpu(cls, options: Mapping[str, Any]) -> bool:
        return False  # the server has the GPU; the extract worker only sends requests

    def __init__(
        self,
        base_url: str | Sequence[str],
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
        down_seconds: float = 30.0,
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
        urls = base_url.split(",") if isinstance(base_url, str) else list(base_url)
        self.base_urls = [str(url).strip().rstrip("/") for url in urls if str(url).strip()]
        if not self.base_urls:
            raise ValueError("base_url names no server")
        self.base_url = self.base_urls[0]
        self.down_seconds = down_seconds
        self._down_until: dict[str, float] = {}
        self.endpoint_stats = {url: {"requests": 0, "answers": 0, "failures": 0} for url in self.base_urls}
        self._next_call = 0
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
        semaphore = asyncio.Semaphore(self.max_concurrency * len(self.base_urls))
        limits = self._httpx.Limits(max_connections=self.max_concurrency * len(self.base_urls))
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

    def _server(self, first: int, attempt: int) -> str:
        """The server for a call's attempt: round robin from the call's own, past servers set aside as
        unreachable (all of them down: the rotation as it is)."""
        order = [
            self.base_urls[(first + attempt + i) % len(self.base_urls)] for i in range(len(self.base_urls))
        ]
        now = time.monotonic()
        return next((url for url in order if self._down_until.get(url, 0.0) <= now), order[0])

    async def _answer(self, client: Any, call: LMCall) -> LMAnswer:
        path, payload = self._payload(call)
        first, self._next_call = self._next_call, self._next_call + 1
        error, server, previous = "no attempt", self.base_url, None
        # Each server gets a try before the retries run out: a dead node's pages move to the live ones.
        attempts = self.max_retries + len(self.base_urls)
        for attempt in range(attempts):
            server = self._server(first, attempt)
            if attempt:
                self.retries += 1
                if server == previous:  # the same server again: back off first (another one: at once)
                    await asyncio.sleep(self.backoff * 2 ** (attempt - 1) * (0.5 + random.random()))
            previous = server
            self.requests_sent += 1
            stats = self.endpoint_stats[server]
            stats["requests"] += 1
            try:
                response = await client.post(server + path, json=payload)
            except self._httpx.HTTPError as exception:
                error = f"{type(exception).__name__}: {exception}"[:200]
                stats["failures"] += 1
                if len(self.base_urls) > 1 and isinstance(exception, self._httpx.TransportError):
                    self._down_until[server] = time.monotonic() + self.down_seconds
                continue
            if response.status_code == 200:
                stats["answers"] += 1
                try:
                    return self._parse(call, response.json())
                except (ValueError, KeyError, IndexError, TypeError) as exception:
                    return LMAnswer(text="", failure=f"malformed server response: {exception}"[:200])
            stats["failures"] += 1
            error = f"HTTP {response.status_code}: {response.text[:160]}"
            if response.status_code not in _RETRY_STATUS:
                break
        where = f" (last: {server})" if len(self.base_urls) > 1 else ""
        return LMAnswer(
            text="", failure=f"server request failed after {attempt + 1} attempts{where}: {error}"
        )

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
