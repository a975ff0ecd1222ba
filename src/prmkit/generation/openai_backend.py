"""Sampling from an OpenAI-compatible server (vLLM's `api_server`, OpenAI, others).

One `httpx.AsyncClient` (one connection pool) lives on an event loop in a thread the
sampler owns, so `generate` works from plain code and from code already inside an event
loop. At most `concurrency` HTTP requests are in flight. Failed requests go through one
retry loop (`prmkit.generation.retry`).

`n` samples of a prompt are one request with `n` and `seed`; vLLM gives sample i the
seed `seed + i`. A server that refuses `n` or returns fewer choices gets, from then on,
n requests of 1 with seeds `seed + i` (the same samples vLLM would give).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import httpx

from prmkit.errors import PrmkitError
from prmkit.generation import retry
from prmkit.generation.base import (
    Completion,
    ProgressBar,
    Prompt,
    RequestOutput,
    SampleRequest,
    SamplingParams,
    StreamingSampler,
    sample_bar,
)

log = logging.getLogger(__name__)

HEALTH_CHECK_TIMEOUT = 10.0


class OpenAISampler(StreamingSampler):
    """Samples through `/v1/completions` (text prompts) or `/v1/chat/completions` (chat
    messages; `chat=True` sends text prompts as one user message, `chat=False` refuses
    messages). `model`: the served model's name; None (or another name for the same model:
    the same last path component, e.g. the `smollm2-135m` alias of a served folder) takes
    the server's model when it serves exactly one. `extra_body` is merged into every
    request (e.g. vLLM's `top_k` or `return_token_ids`). Options meant for other backends
    are ignored."""

    backend = "openai"

    def __init__(self, model: str | None, base_url: str = "http://127.0.0.1:8000/v1",
                 api_key: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 concurrency: int = 16, timeout: float = 60.0, max_retries: int = 2,
                 max_retry_after: float = retry.MAX_RETRY_AFTER, chat: bool | None = None,
                 n_per_request: bool = True, extra_body: dict | None = None,
                 **ignored_options):
        if concurrency < 1:
            raise PrmkitError(f"concurrency must be >= 1, got {concurrency}")
        if max_retries < 0:
            raise PrmkitError(f"max_retries must be >= 0, got {max_retries}")
        if ignored_options:
            log.info("the openai backend ignores %s", ", ".join(sorted(ignored_options)))
        self.model = model or ""
        self.base_url = base_url.rstrip("/")
        self.concurrency, self.timeout = concurrency, timeout
        self.max_retries, self.max_retry_after = max_retries, max_retry_after
        self.chat, self.n_per_request = chat, n_per_request
        self.extra_body = dict(extra_body or {})
        key = api_key or os.environ.get(api_key_env)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: httpx.AsyncClient | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._checked = False

    # -- public API ------------------------------------------------------------------

    def iter_generate(self, requests: Sequence[SampleRequest], params: SamplingParams,
                      progress: bool | ProgressBar = False
                      ) -> Iterator[tuple[int, RequestOutput]]:
        """Yield `(index in requests, output)` as requests finish, so a caller can write
        finished outputs before a later request fails; the bar moves by a request's
        samples as it finishes. Closing the iterator early cancels the requests still
        pending."""
        requests = list(requests)
        if not requests:
            return
        finished: queue.Queue = queue.Queue()
        future = self._submit(self._run(requests, params, finished.put))
        bar = sample_bar(progress, sum(r.n for r in requests))
        start, tokens = time.perf_counter(), 0
        try:
            for _ in requests:
                item = finished.get()
                if isinstance(item, BaseException):
                    raise item
                tokens += sum(c.num_tokens for c in item[1].completions)
                bar.update(len(item[1].completions))
                bar.set_postfix_str(f"{tokens / max(time.perf_counter() - start, 1e-9):.0f} tok/s",
                                    refresh=False)
                yield item
            future.result()
        finally:
            future.cancel()
            bar.close()

    def close(self) -> None:
        if self._loop is None:
            return
        if self._client is not None:
            try:
                self._submit(self._client.aclose()).result(timeout=10)
            except (concurrent.futures.TimeoutError, RuntimeError):
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._loop = self._thread = self._client = None

    def check_server(self) -> None:
        """Ask the server once, before any request: it answers, takes the API key, and
        serves the model (whose name is settled here, see the class docstring)."""
        if not self._checked:
            self._submit(self._prepare()).result()

    def describe(self) -> dict:
        """What produced the samples: the model is the served name (the server is asked)."""
        self.check_server()
        return {"backend": self.backend, "model": self.model, "base_url": self.base_url,
                "chat": self.chat, "n_per_request": self.n_per_request}

    # -- event loop ------------------------------------------------------------------

    def _submit(self, coro) -> concurrent.futures.Future:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                            name="prmkit-openai-sampler")
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _run(self, requests: list[SampleRequest], params: SamplingParams,
                   emit: Callable[[object], None]) -> None:
        """Sample every request with `concurrency` workers; emit `(index, output)` as each
        finishes, or the first error (the other workers are then cancelled)."""
        try:
            await self._prepare()
            pending = iter(enumerate(requests))

            async def worker():
                for index, request in pending:
                    emit((index, await self._sample(request, params)))

            async with asyncio.TaskGroup() as group:
                for _ in range(min(self.concurrency, len(requests))):
                    group.create_task(worker())
        except BaseExceptionGroup as errors:
            emit(_first_error(errors))
        except BaseException as error:
            emit(error)
            raise

    async def _prepare(self) -> None:
        """The connection pool, and the server check (once)."""
        if self._client is None:
            self._client = httpx.AsyncClient(
                headers=self._headers,
                timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
                limits=httpx.Limits(max_connections=self.concurrency,
                                    max_keepalive_connections=self.concurrency))
            self._semaphore = asyncio.Semaphore(self.concurrency)
        if not self._checked:
            await self._check_server()
            self._checked = True

    # -- requests --------------------------------------------------------------------

    async def _check_server(self) -> None:
        """Fail fast, with a clear message, when no server answers or it lacks the model."""
        url = f"{self.base_url}/models"
        try:
            response = await self._client.get(url, timeout=min(self.timeout, HEALTH_CHECK_TIMEOUT))
        except httpx.TransportError as e:
            raise PrmkitError(
                f"no server answers at {self.base_url} ({type(e).__name__}: {e or 'no answer'}); "
                "start an OpenAI-compatible server there (e.g. `python -m "
                f"vllm.entrypoints.openai.api_server --model {self.model or 'MODEL'} --port "
                "PORT`; on a CPU, the command of prmkit.generation.vllm_cpu.server_command) "
                "or pass the right base_url") from None
        if response.status_code in (401, 403):
            raise PrmkitError(f"{url} refused the API key (HTTP {response.status_code}: "
                              f"{retry.server_message(response)}); pass api_key or set the "
                              "environment variable named by api_key_env")
        served: list[str] = []
        if response.status_code == 200:  # not every server lists its models
            try:
                served = [str(m["id"]) for m in response.json().get("data", [])]
            except (ValueError, AttributeError, KeyError, TypeError):
                served = []
        if not served:
            if not self.model:
                raise PrmkitError(f"{url} lists no model to take: name the served model "
                                  "(--model)")
            return  # sampling will tell
        if self.model in served:
            return
        if len(served) == 1 and (not self.model or same_model_name(self.model, served[0])):
            if self.model:
                log.warning("%s serves one model, %r: taking it for %r", self.base_url,
                            served[0], self.model)
            self.model = served[0]
            return
        asked = f"model {self.model!r}" if self.model else "no model"
        raise PrmkitError(f"{self.base_url} does not serve {asked}; it serves "
                          f"{', '.join(map(repr, served))}: pass one of them as the model "
                          "(--model)")

    def _is_chat(self, prompt: Prompt) -> bool:
        if prompt.messages is not None:
            if self.chat is False:
                raise PrmkitError("chat=False but a prompt is chat messages; use chat=None")
            return True
        return bool(self.chat)

    def _body(self, request: SampleRequest, params: SamplingParams, chat: bool, n: int,
              seed: int | None) -> dict:
        body = {"model": self.model, "n": n, "max_tokens": params.max_tokens,
                "temperature": params.temperature, "top_p": params.top_p}
        if chat:
            messages = request.prompt.messages or ({"role": "user", "content": request.prompt.text},)
            body["messages"] = list(messages)
            if request.prompt.continuation is not None:
                # vLLM's chat extension: the answer so far, continued in the same turn
                body["messages"].append({"role": "assistant",
                                         "content": request.prompt.continuation})
                body.update(continue_final_message=True, add_generation_prompt=False)
        else:
            body["prompt"] = request.prompt.text
        if params.stop:
            body["stop"] = list(params.stop)
        if seed is not None:
            body["seed"] = seed
        return {**self.extra_body, **body}

    async def _post(self, url: str, body: dict) -> dict:
        async with self._semaphore:
            return await retry.post_json(self._client, url, body, self.max_retries,
                                         self.max_retry_after)

    async def _sample(self, request: SampleRequest, params: SamplingParams) -> RequestOutput:
        chat = self._is_chat(request.prompt)
        url = f"{self.base_url}/chat/completions" if chat else f"{self.base_url}/completions"
        if self.n_per_request or request.n == 1:
            refused = None
            try:
                answer = await self._post(url, self._body(request, params, chat, request.n,
                                                          request.seed))
            except retry.ServerError as e:
                if request.n == 1 or e.status not in (400, 422):
                    raise
                refused = e
            else:
                if len(answer.get("choices") or ()) == request.n:
                    return _output(request, [answer], chat, params, url)
            singles = await self._sample_singly(request, params, chat, url)
            if self.n_per_request:
                self.n_per_request = False
                log.warning("%s %s; sending %d requests of 1 per prompt from now on", url,
                            f"refused n ({refused.message})" if refused else
                            "returned fewer choices than n", request.n)
            return singles
        return await self._sample_singly(request, params, chat, url)

    async def _sample_singly(self, request: SampleRequest, params: SamplingParams, chat: bool,
                             url: str) -> RequestOutput:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(self._post(url, self._body(
                request, params, chat, 1, None if request.seed is None else request.seed + i)))
                for i in range(request.n)]
        return _output(request, [t.result() for t in tasks], chat, params, url)


def same_model_name(name: str, served: str) -> bool:
    """Whether `name` names the served model another way: the same last path component
    (a folder given by another path, the `smollm2-135m` alias of its cached folder)."""
    def last(text: str) -> str:
        return text.rstrip("/").rsplit("/", 1)[-1].casefold()

    return bool(last(name)) and last(name) == last(served)


def _output(request: SampleRequest, answers: list[dict], chat: bool, params: SamplingParams,
            url: str) -> RequestOutput:
    completions: list[Completion] = []
    for answer in answers:
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not choices:
            raise PrmkitError(f"{url} answered without choices: {str(answer)[:200]}")
        completions += _completions(sorted(choices, key=lambda c: c.get("index", 0)),
                                    (answer.get("usage") or {}).get("completion_tokens"),
                                    chat, params)
    prompt_tokens = (answers[0].get("usage") or {}).get("prompt_tokens") or 0
    return RequestOutput(request.key, completions, prompt_tokens)


def _completions(choices: list[dict], total_tokens: int | None, chat: bool,
                 params: SamplingParams) -> list[Completion]:
    """Completions of one answer. Token counts: a choice's `token_ids` when the server
    sends them (vLLM with `return_token_ids`), else `usage.completion_tokens` shared out:
    a choice cut by length has `max_tokens`, the others split the rest evenly."""
    finishes = ["length" if c.get("finish_reason") == "length" else "stop" for c in choices]
    counts = _share_tokens(total_tokens, finishes, params.max_tokens)
    out = []
    for choice, finish, count in zip(choices, finishes, counts):
        text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
        extra = {}
        if choice.get("token_ids") is not None:
            count = len(choice["token_ids"])
        elif finishes.count("stop") > 1:
            extra["num_tokens_estimated"] = True
        if choice.get("finish_reason") not in ("stop", "length"):
            extra["finish_reason"] = choice.get("finish_reason")
        if "stop_reason" in choice:  # vLLM: the stop string, or null at the end of sequence
            reason = choice["stop_reason"]
            extra["stop_reason"] = reason if isinstance(reason, str) else None
        out.append(Completion(text or "", count, finish, extra))
    return out


def _share_tokens(total: int | None, finishes: list[str], max_tokens: int) -> list[int]:
    if total is None:
        return [0] * len(finishes)
    by_length = finishes.count("length") * max_tokens
    if by_length > total:  # the server counts otherwise: share evenly
        by_length, finishes = 0, ["stop"] * len(finishes)
    rest, stopped = total - by_length, finishes.count("stop")
    share, extra = divmod(rest, stopped) if stopped else (0, 0)
    counts = []
    for finish in finishes:
        if finish == "length":
            counts.append(max_tokens)
        else:
            counts.append(share + (1 if extra > 0 else 0))
            extra -= 1
    return counts


def _first_error(group: BaseExceptionGroup) -> BaseException:
    """The error to show from a task group: a prmkit error if there is one."""
    leaves = list(_leaves(group))
    return next((e for e in leaves if isinstance(e, PrmkitError)), leaves[0])


def _leaves(error: BaseException):
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error
