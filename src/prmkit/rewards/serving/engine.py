"""The batching engine: owns the model's score function and a bounded queue.

Requests from many clients wait in one queue; a single batching task takes them in
arrival order into token-budgeted batches, runs the score function on a worker thread and
hands each request its own results, in its own order. While one batch runs, the next one
gathers, so a busy server needs no waiting at all. A batch that finds the queue empty
waits at most `max_wait_ms` for more, and only while requests have been arriving more
often than that (a lone client is never kept waiting).

A large request's tokens are counted on a worker thread before it is queued, so counting
it never stalls the event loop (health checks, other requests).

Backpressure lives here, not in the routes: a request that would take the queue past
`max_queue_items` completions raises `Overloaded` (with a Retry-After estimate), one
larger than the queue could ever hold raises `TooLarge`. A request whose client went
away (its future cancelled) is dropped before its batch runs, or its results are
discarded after; the other requests of the batch are unaffected. A batch whose score
function raises is scored again request by request, so one bad request fails alone.
`close()` refuses new requests and finishes every queued and running batch.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from prmkit.errors import PrmkitError

log = logging.getLogger("prmkit.rewards.serving")


@dataclass(frozen=True)
class Item:
    """One completion to score: its prompt, its text (None: there is none, as for a query
    without its prompt: no steps, the null score), and optionally the policy's token ids of
    the completion (for the index of the policy token that ends each step)."""

    prompt: str
    completion: str | None
    policy_token_ids: tuple[int, ...] | None = None


# score_fn(items) -> one result per item, in order (runs on the engine's worker thread)
ScoreFn = Callable[[Sequence[Item]], list[Any]]
# count_tokens(items) -> the model's token count of each item (for the token budget)
CountFn = Callable[[Sequence[Item]], list[int]]


INLINE_COUNT_CHARS = 8192  # requests up to this many characters are counted on the loop


class EngineError(PrmkitError):
    pass


class Overloaded(EngineError):
    """The queue is full (HTTP 503); `retry_after` is whole seconds."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class TooLarge(EngineError):
    """A request with more completions than the queue holds (HTTP 413)."""


class ShuttingDown(Overloaded):
    """The server is stopping and takes no new requests (HTTP 503)."""


@dataclass
class Job:
    items: list[Item]
    tokens: int
    future: asyncio.Future
    enqueued: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class EngineSettings:
    token_budget: int = 16384  # tokens (prompt + completion) per batch, a lone request excepted
    max_wait_ms: float = 5.0  # how long a batch waits for more requests (see above)
    max_queue_items: int = 4096  # completions waiting at most; beyond: 503
    max_batch_requests: int | None = None  # 1: one request, one forward (no coalescing)

    def __post_init__(self):
        if self.token_budget < 1:
            raise EngineError(f"token_budget must be positive, got {self.token_budget}")
        if not (math.isfinite(self.max_wait_ms) and self.max_wait_ms >= 0):
            raise EngineError(f"max_wait_ms must be a non-negative number, got {self.max_wait_ms}")
        if self.max_queue_items < 1:
            raise EngineError(f"max_queue_items must be positive, got {self.max_queue_items}")
        if self.max_batch_requests is not None and self.max_batch_requests < 1:
            raise EngineError(f"max_batch_requests must be positive, got {self.max_batch_requests}")


class Observer:
    """What the engine reports (the metrics module implements it; this one ignores all)."""

    def queue_changed(self, requests: int, items: int) -> None: ...
    def batch_done(self, requests: int, items: int, tokens: int, seconds: float) -> None: ...
    def cancelled(self, requests: int) -> None: ...


class RewardEngine:
    """Coalesces `submit` calls into batches for `score_fn` (see the module docstring)."""

    def __init__(self, score_fn: ScoreFn, count_tokens: CountFn,
                 settings: EngineSettings | None = None, observer: Observer | None = None):
        self.score_fn = score_fn
        self.count_tokens = count_tokens
        self.settings = settings or EngineSettings()
        self.observer = observer or Observer()
        self._queue: deque[Job] = deque()
        self._queued_items = 0
        self._queued_tokens = 0
        self._arrived: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._closing = False
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="prmkit-reward")
        self._tokens_per_s = 0.0  # smoothed, for Retry-After
        self._last_arrival: float | None = None
        self._gap_s: float | None = None  # smoothed time between arrivals
        self.batches_run = 0

    # ---- life cycle -----------------------------------------------------------------------
    async def start(self) -> None:
        if self._task is not None:
            return
        self._arrived = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="prmkit-batcher")

    async def close(self) -> None:
        """Take no new requests; finish every queued and running batch, then stop."""
        self._closing = True
        if self._task is not None:
            self._arrived.set()
            await self._task
            self._task = None
        self._executor.shutdown(wait=True)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done() and not self._closing

    @property
    def queue_depth(self) -> tuple[int, int]:
        """(requests, completions) waiting."""
        return len(self._queue), self._queued_items

    # ---- submitting -----------------------------------------------------------------------
    def _check_room(self, n: int) -> None:
        cap = self.settings.max_queue_items
        if n > cap:
            raise TooLarge(f"{n} completions in one request; this server takes at most {cap}")
        if self._closing or self._task is None:
            raise ShuttingDown("the server is shutting down", retry_after=1)
        if self._queued_items + n > cap:
            raise Overloaded(f"queue full ({self._queued_items} completions waiting)",
                             retry_after=self.retry_after())

    async def enqueue(self, items: Sequence[Item]) -> asyncio.Future:
        """Queue one request's items; the future resolves to their results in order.
        Raises TooLarge, Overloaded or ShuttingDown (nothing is queued then): at once, and
        again after the tokens of a request over INLINE_COUNT_CHARS are counted on a worker
        thread, so that a large request holds up no other (the event loop goes on serving
        meanwhile; it joins the queue once counted)."""
        items = list(items)
        self._check_room(len(items))
        future = asyncio.get_running_loop().create_future()
        if not items:
            future.set_result([])
            return future
        if sum(len(it.prompt) + len(it.completion or "") for it in items) <= INLINE_COUNT_CHARS:
            tokens = sum(self.count_tokens(items))
        else:
            tokens = sum(await asyncio.to_thread(self.count_tokens, items))
            self._check_room(len(items))
        self._note_arrival()
        self._queue.append(Job(items, tokens, future))
        self._queued_items += len(items)
        self._queued_tokens += tokens
        self.observer.queue_changed(len(self._queue), self._queued_items)
        self._arrived.set()
        return future

    async def submit(self, items: Sequence[Item]) -> list[Any]:
        """Score `items` with the others waiting; cancelling the call drops the request."""
        future = await self.enqueue(items)
        try:
            return await future
        finally:
            future.cancel()  # a no-op once done; marks a dropped request otherwise

    def retry_after(self) -> int:
        """Seconds until the queue has drained at the recent speed (1 to 60)."""
        if self._tokens_per_s <= 0:
            return 1
        return max(1, min(60, math.ceil(self._queued_tokens / self._tokens_per_s)))

    # ---- the batching task ----------------------------------------------------------------
    def _pop(self) -> Job:
        job = self._queue.popleft()
        self._queued_items -= len(job.items)
        self._queued_tokens -= job.tokens
        return job

    async def _wait_arrival(self, timeout: float | None) -> None:
        self._arrived.clear()
        if timeout is None:
            await self._arrived.wait()
            return
        try:
            await asyncio.wait_for(self._arrived.wait(), timeout)
        except TimeoutError:
            pass

    async def _next_batch(self) -> list[Job] | None:
        """The next batch in arrival order, or None once closing with nothing queued."""
        while not self._queue:
            if self._closing:
                return None
            await self._wait_arrival(None)
        s = self.settings
        batch = [self._pop()]
        tokens = batch[0].tokens
        deadline = time.monotonic() + s.max_wait_ms / 1000
        while tokens < s.token_budget:
            if s.max_batch_requests is not None and len(batch) >= s.max_batch_requests:
                break
            if not self._queue:
                left = deadline - time.monotonic()
                if left <= 0 or self._closing or not self._arrivals_expected():
                    break
                await self._wait_arrival(left)
                continue
            if tokens + self._queue[0].tokens > s.token_budget:
                break
            job = self._pop()
            batch.append(job)
            tokens += job.tokens
        self.observer.queue_changed(len(self._queue), self._queued_items)
        return batch

    async def _run(self) -> None:
        while True:
            batch = await self._next_batch()
            if batch is None:
                return
            try:
                await self._run_batch(batch)
            except Exception as e:  # a bug here must not leave requests waiting forever
                log.exception("a batch failed outside the score function")
                for j in batch:
                    if not j.future.done():
                        j.future.set_exception(e)

    async def _run_batch(self, batch: list[Job]) -> None:
        loop = asyncio.get_running_loop()
        live = [j for j in batch if not j.future.done()]  # drop requests whose client left
        if len(live) < len(batch):
            self.observer.cancelled(len(batch) - len(live))
        if not live:
            return
        items = [it for j in live for it in j.items]
        tokens = sum(j.tokens for j in live)
        start = time.monotonic()
        try:
            results = await loop.run_in_executor(self._executor, self.score_fn, items)
            if len(results) != len(items):
                raise EngineError(f"the score function gave {len(results)} results for "
                                  f"{len(items)} completions")
        except Exception as e:  # noqa: BLE001 (isolated below, request by request)
            await self._score_alone(live, e)
        else:
            offset = 0
            for j in live:
                self._resolve(j, results[offset: offset + len(j.items)])
                offset += len(j.items)
        seconds = time.monotonic() - start
        self._note_speed(tokens, seconds)
        self.batches_run += 1
        self.observer.batch_done(len(live), len(items), tokens, seconds)

    async def _score_alone(self, jobs: list[Job], error: Exception) -> None:
        """After a failed batch: each request on its own, so that only a bad one fails."""
        loop = asyncio.get_running_loop()
        if len(jobs) == 1:
            log.error("scoring a request failed: %s", error)
            if not jobs[0].future.done():
                jobs[0].future.set_exception(error)
            return
        log.warning("a batch of %d requests failed (%s); scoring them one by one", len(jobs), error)
        for j in jobs:
            if j.future.done():
                continue
            try:
                results = await loop.run_in_executor(self._executor, self.score_fn, j.items)
            except Exception as e:  # noqa: BLE001
                log.error("scoring a request failed: %s", e)
                if not j.future.done():
                    j.future.set_exception(e)
            else:
                self._resolve(j, results)

    def _resolve(self, job: Job, results: list[Any]) -> None:
        if job.future.done():  # the client went away while its batch ran
            self.observer.cancelled(1)
            return
        job.future.set_result(results)

    def _note_arrival(self) -> None:
        now = time.monotonic()
        if self._last_arrival is not None:
            gap = now - self._last_arrival
            self._gap_s = gap if self._gap_s is None else 0.7 * self._gap_s + 0.3 * gap
        self._last_arrival = now

    def _arrivals_expected(self) -> bool:
        """Whether requests have lately come more often than the max wait."""
        return self._gap_s is not None and self._gap_s < self.settings.max_wait_ms / 1000

    def _note_speed(self, tokens: int, seconds: float) -> None:
        if seconds <= 0:
            return
        speed = tokens / seconds
        self._tokens_per_s = speed if self._tokens_per_s == 0 else 0.8 * self._tokens_per_s + 0.2 * speed
