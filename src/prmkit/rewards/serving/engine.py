"""The batching engine: owns the model's score function and a bounded queue.

Requests from many clients wait in one queue; a single batching task forms batches of at
most `token_budget` tokens, runs the score function on a worker thread and hands each
request its own results, in its own order. A request larger than one batch is split: each
batch takes items from the waiting requests in turn, least recently served first (a new
request counts as served just before the batch running when it arrived), so a small
request waits for at most the batch running when it came, and a large one is served at
least every other batch. A single item over the budget runs alone. While one batch runs,
the next one gathers; a batch that finds the queue empty waits at most `max_wait_ms` for
more, and only while requests have been arriving more often than that (a lone client is
never kept waiting).

Tokens are what the count function says: the server's counts an upper bound from the
texts' bytes (ScorerBackend.token_bounds), so nothing is tokenised before it is scored,
and each item is tokenised once, in its batch. A large request is counted on a worker
thread, so counting it never stalls the event loop.

Backpressure lives here, not in the routes: a request over `max_request_tokens` tokens or
`max_queue_items` completions raises `TooLarge`; one that would take the queue past
`max_queue_items` completions or `max_queue_tokens` tokens raises `Overloaded` (with a
Retry-After estimate). A request whose client went away (its future cancelled) leaves the
queue at once, and its results are discarded; the other requests of a batch are
unaffected. A batch whose score function raises is scored again request by request, so
one bad request fails alone (a split request then fails whole). `close()` refuses new
requests and finishes every queued and running batch.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from prmkit.errors import PrmkitError
from prmkit.rewards.serving.batching import Chunk, Job, Rotation

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
# count_tokens(items) -> each item's tokens for the budgets (the server's: an upper bound)
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
    """A request over the per-request caps (HTTP 413)."""


class ShuttingDown(Overloaded):
    """The server is stopping and takes no new requests (HTTP 503)."""


@dataclass(frozen=True)
class EngineSettings:
    token_budget: int = 16384  # tokens per batch (an item over it runs alone)
    max_wait_ms: float = 5.0  # how long a batch waits for more requests (see above)
    max_queue_items: int = 4096  # completions waiting at most, and per request; beyond: 503/413
    max_batch_requests: int | None = None  # 1: one request, one forward (no coalescing)
    max_request_tokens: int = 16 << 20  # tokens in one request; beyond: 413
    max_queue_tokens: int = 64 << 20  # tokens waiting at most; beyond: 503

    def __post_init__(self):
        for name in ("token_budget", "max_queue_items", "max_request_tokens",
                     "max_queue_tokens"):
            if getattr(self, name) < 1:
                raise EngineError(f"{name} must be positive, got {getattr(self, name)}")
        if not (math.isfinite(self.max_wait_ms) and self.max_wait_ms >= 0):
            raise EngineError(f"max_wait_ms must be a non-negative number, got {self.max_wait_ms}")
        if self.max_batch_requests is not None and self.max_batch_requests < 1:
            raise EngineError(f"max_batch_requests must be positive, got {self.max_batch_requests}")
        if self.max_request_tokens > self.max_queue_tokens:
            raise EngineError(f"max_request_tokens ({self.max_request_tokens}) is more than the "
                              f"queue holds (max_queue_tokens {self.max_queue_tokens})")


class Observer:
    """What the engine reports (the metrics module implements it; this one ignores all)."""

    def queue_changed(self, requests: int, items: int, tokens: int = 0) -> None: ...
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
        self._queue = Rotation()
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
        """(requests, completions) waiting (a split request counts while any item waits)."""
        return len(self._queue), self._queue.items

    @property
    def queued_tokens(self) -> int:
        return self._queue.tokens

    # ---- submitting -----------------------------------------------------------------------
    def _check_room(self, n: int, tokens: int) -> None:
        s, q = self.settings, self._queue
        if n > s.max_queue_items:
            raise TooLarge(f"{n} completions in one request; this server takes at most "
                           f"{s.max_queue_items}")
        if tokens > s.max_request_tokens:
            raise TooLarge(f"{tokens} tokens in one request (counted by their upper bound, the "
                           f"texts' UTF-8 bytes); this server takes at most "
                           f"{s.max_request_tokens}")
        if self._closing or self._task is None:
            raise ShuttingDown("the server is shutting down", retry_after=1)
        if q.items + n > s.max_queue_items:
            raise Overloaded(f"queue full ({q.items} completions waiting)",
                             retry_after=self.retry_after())
        if q.tokens + tokens > s.max_queue_tokens:
            raise Overloaded(f"queue full ({q.tokens} tokens waiting)",
                             retry_after=self.retry_after())

    async def enqueue(self, items: Sequence[Item]) -> asyncio.Future:
        """Queue one request's items; the future resolves to their results in order
        (cancelling it takes the request out of the queue). Raises TooLarge, Overloaded or
        ShuttingDown (nothing is queued then): at once, and again once the tokens are
        counted (on a worker thread for a request over INLINE_COUNT_CHARS, so that a large
        request holds up no other; it joins the queue once counted)."""
        items = list(items)
        self._check_room(len(items), 0)
        future = asyncio.get_running_loop().create_future()
        if not items:
            future.set_result([])
            return future
        if sum(len(it.prompt) + len(it.completion or "") for it in items) <= INLINE_COUNT_CHARS:
            tokens = list(self.count_tokens(items))
        else:
            tokens = list(await asyncio.to_thread(self.count_tokens, items))
        if len(tokens) != len(items):
            raise EngineError(f"the count function gave {len(tokens)} counts for "
                              f"{len(items)} completions")
        self._check_room(len(items), sum(tokens))
        self._note_arrival()
        job = self._queue.add(items, tokens, future)
        future.add_done_callback(lambda f: f.cancelled() and self._drop(job))
        self._report_queue()
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
        return max(1, min(60, math.ceil(self._queue.tokens / self._tokens_per_s)))

    # ---- the batching task ----------------------------------------------------------------
    def _report_queue(self) -> None:
        q = self._queue
        self.observer.queue_changed(len(q), q.items, q.tokens)

    def _drop(self, job: Job) -> None:
        """The client went away: out of the queue, counted once."""
        if not job.dropped:
            job.dropped = True
            self._queue.remove(job)
            self.observer.cancelled(1)
            self._report_queue()

    def _fail(self, job: Job, error: BaseException) -> None:
        self._queue.remove(job)
        if not job.future.done():
            job.future.set_exception(error)

    async def _wait_arrival(self, timeout: float | None) -> None:
        self._arrived.clear()
        if timeout is None:
            await self._arrived.wait()
            return
        try:
            await asyncio.wait_for(self._arrived.wait(), timeout)
        except TimeoutError:
            pass

    async def _next_batch(self) -> list[Chunk] | None:
        """The next batch (see batching.Rotation), or None once closing with nothing queued."""
        while not self._queue:
            if self._closing:
                return None
            await self._wait_arrival(None)
        s = self.settings
        self._queue.start_batch()
        batch: list[Chunk] = []
        tokens, full = self._queue.take(batch, 0, s.token_budget, s.max_batch_requests)
        deadline = time.monotonic() + s.max_wait_ms / 1000
        while not full:
            left = deadline - time.monotonic()
            if left <= 0 or self._closing or not self._arrivals_expected():
                break
            await self._wait_arrival(left)
            tokens, full = self._queue.take(batch, tokens, s.token_budget,
                                            s.max_batch_requests)
        self._report_queue()
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
                for c in batch:
                    self._fail(c.job, e)

    async def _run_batch(self, batch: list[Chunk]) -> None:
        loop = asyncio.get_running_loop()
        live = [c for c in batch if not c.job.future.done()]  # clients that left are gone
        if not live:
            return
        items = [it for c in live for it in c.items]
        tokens = sum(c.tokens for c in live)
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
            for c in live:
                self._deliver(c, results[offset: offset + c.end - c.start])
                offset += c.end - c.start
        seconds = time.monotonic() - start
        self._note_speed(tokens, seconds)
        self.batches_run += 1
        self.observer.batch_done(len(live), sum(c.end - c.start for c in live), tokens, seconds)

    async def _score_alone(self, chunks: list[Chunk], error: Exception) -> None:
        """After a failed batch: each request's part on its own, so only a bad one fails."""
        loop = asyncio.get_running_loop()
        if len(chunks) == 1:
            log.error("scoring a request failed: %s", error)
            self._fail(chunks[0].job, error)
            return
        log.warning("a batch of %d requests failed (%s); scoring them one by one", len(chunks),
                    error)
        for c in chunks:
            if c.job.future.done():
                continue
            try:
                results = await loop.run_in_executor(self._executor, self.score_fn, c.items)
            except Exception as e:  # noqa: BLE001
                log.error("scoring a request failed: %s", e)
                self._fail(c.job, e)
            else:
                self._deliver(c, results)

    def _deliver(self, chunk: Chunk, results: list[Any]) -> None:
        job = chunk.job
        if job.future.done():  # the client went away while its batch ran
            return
        job.results[chunk.start: chunk.end] = results
        job.finished += chunk.end - chunk.start
        if job.finished == len(job.items):
            job.future.set_result(job.results)

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
