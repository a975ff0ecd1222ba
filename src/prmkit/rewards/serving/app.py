"""The HTTP layer of the reward server: parse, validate, await the engine.

Every route first checks who is asking (`Authorization: Bearer KEY` or `X-API-Key: KEY`
when the server has a key) and only then reads the body, in bounded size (a body
announced over the limit is refused before a byte of it is read). A large body is parsed
and checked a piece at a time (jsonbody), its tokens bounded, and a large answer built,
on worker threads: the event loop keeps answering other requests and /health meanwhile.
After a large request the freed memory goes back to the system (memory). Answers: 401
without the key, 408 when the body did not arrive in time (connections), 413 for a body
or request too large, 422 naming the bad field, 503 with Retry-After when the queue is
full or the server is stopping, 499 (logged only: nobody reads it) when the client went
away before its rewards were ready, its body sent in full or not.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import orjson
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect

from prmkit.rewards.contract import PolicyTokens
from prmkit.rewards.openrlhf import openrlhf_answer
from prmkit.rewards.serving import protocol
from prmkit.rewards.serving.connections import TIMED_OUT
from prmkit.rewards.serving.engine import INLINE_COUNT_CHARS, Overloaded, RewardEngine, TooLarge
from prmkit.rewards.serving.memory import TRIM_AFTER_BYTES, release_memory
from prmkit.rewards.serving.metrics import CONTENT_TYPE, ServerMetrics

log = logging.getLogger("prmkit.rewards.serving")
CLIENT_GONE = 499
DEFAULT_MAX_BODY = 64 << 20
INLINE_ANSWER_ITEMS = 256  # larger answers are built on a worker thread


def _authorizer(api_key: str | None) -> Callable[[Request], Awaitable[None]]:
    expected = api_key.encode() if api_key else None

    async def authorized(request: Request) -> None:  # async: no worker thread per request
        if expected is None:
            return
        given = request.headers.get("x-api-key")
        auth = request.headers.get("authorization", "")
        if given is None and auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        if not given or not secrets.compare_digest(given.encode(), expected):
            raise HTTPException(401, "missing or wrong API key",
                                headers={"WWW-Authenticate": "Bearer"})

    return authorized


async def read_body(request: Request, limit: int) -> tuple[list[bytes], int]:
    """The body's chunks as they came, and its size (never joined into one block: the
    parser takes the chunks)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"body of {declared} bytes; this server takes at most {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"body over {limit} bytes")
        if chunk:
            chunks.append(chunk)
    return chunks, size


async def _client_gone(request: Request) -> None:
    """Returns once the client has closed its connection (the body is read by then)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _error(status: int, message: str, field: str | None = None, **headers) -> JSONResponse:
    body = {"error": message} | ({"field": field} if field else {})
    return JSONResponse(body, status_code=status, headers=headers or None)


def create_app(engine: RewardEngine, *, api_key: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY,
               rules: protocol.TextRules | None = None,
               policy_tokenizer=None) -> FastAPI:
    """The app over `engine` (started and drained by the app's lifespan). policy_tokenizer:
    the policy's tokenizer the engine's score function maps step ends with (None: requests
    with policy_token_ids are refused)."""
    metrics = engine.observer if isinstance(engine.observer, ServerMetrics) else ServerMetrics()
    engine.observer = metrics
    rules = rules or protocol.TextRules()
    policy = None if policy_tokenizer is None else PolicyTokens(policy_tokenizer)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await engine.start()
        try:
            yield
        finally:
            await engine.close()  # uvicorn has let in-flight requests finish; drain the rest

    app = FastAPI(title="prmkit reward server", lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None,
                  dependencies=[Depends(_authorizer(api_key))])
    app.state.engine, app.state.metrics = engine, metrics

    async def answer(request: Request, route: str, prepare, to_response,
                     threaded: bool = False) -> Response:
        start, size = time.monotonic(), 0

        def done(status: int, response: Response, seconds: float | None = None) -> Response:
            metrics.answered(route, status, seconds)
            if size >= TRIM_AFTER_BYTES:  # after it is sent, off the event loop
                response.background = BackgroundTask(release_memory)
            return response

        try:
            chunks, size = await read_body(request, max_body_bytes)
            if size <= INLINE_COUNT_CHARS:
                req, items = prepare(chunks)
            else:
                req, items = await asyncio.to_thread(prepare, chunks)
            del chunks
            future = await engine.enqueue(items)
        except ClientDisconnect:
            if request.scope.get(TIMED_OUT):  # the body did not arrive in time: 408 sent
                return done(408, Response(status_code=408))
            return done(CLIENT_GONE, Response(status_code=CLIENT_GONE))
        except protocol.BadField as e:
            return done(422, _error(422, str(e), e.field))
        except TooLarge as e:
            return done(413, _error(413, str(e)))
        except Overloaded as e:
            return done(503, _error(503, str(e), **{"Retry-After": str(e.retry_after)}))
        except HTTPException as e:
            metrics.answered(route, e.status_code)
            raise
        gone = asyncio.ensure_future(_client_gone(request))
        try:
            await asyncio.wait({future, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not future.done():
                future.cancel()  # the engine drops it (or its results) and goes on
        if future.cancelled():
            return done(CLIENT_GONE, Response(status_code=CLIENT_GONE))
        if future.exception() is not None:
            return done(500, _error(500, f"scoring failed: {future.exception()}"))
        results = future.result()
        build = lambda: orjson.dumps(to_response(req, items, results))  # noqa: E731
        if len(items) <= INLINE_ANSWER_ITEMS and not threaded:
            body = build()
        else:  # a large answer is built on a worker thread, as its body was parsed
            body = await asyncio.to_thread(build)
        return done(200, Response(body, media_type="application/json"),
                    time.monotonic() - start)

    def openrlhf_body(req, items, results) -> dict:
        missing = [it.completion is None for it in items]
        if not rules.verifier_weight:
            return openrlhf_answer(results, missing)
        from prmkit.rewards.diagnostics import verifier_rewards

        gold = req.labels or [None] * len(items)
        verdicts = verifier_rewards([it.completion for it in items], gold)
        return openrlhf_answer(results, missing, verdicts, rules.verifier_weight)

    def step_body(req, items, results) -> dict:
        return protocol.step_response(results, req.request_id)

    most = engine.settings.max_queue_items  # entries of a request's lists

    @app.post("/get_reward")
    async def get_reward(request: Request) -> Response:
        return await answer(request, "/get_reward",
                            lambda body: protocol.prepare_openrlhf(body, rules, most),
                            openrlhf_body, threaded=bool(rules.verifier_weight))

    @app.post("/v1/step_rewards")
    async def step_rewards(request: Request) -> Response:
        return await answer(request, "/v1/step_rewards",
                            lambda body: protocol.prepare_steps(body, rules, policy, most),
                            step_body)

    @app.get("/health")
    async def health() -> Response:
        requests, items = engine.queue_depth
        ok = engine.running
        return JSONResponse({"status": "ok" if ok else "stopping", "queue_requests": requests,
                             "queue_completions": items, "queue_tokens": engine.queued_tokens},
                            status_code=200 if ok else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    return app
