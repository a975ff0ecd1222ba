"""A bounded, ranked queue in front of one worker thread, for password hashes.

Python's ThreadPoolExecutor serves its queue first come, first served and without bound:
a flood of wrong passwords from many addresses made a labeller's sign-in wait behind
every hash queued before it. Here each job carries a rank (lower first: a browser known
to the account, then clients by their recent failed sign-ins) and the client it is for;
ties go to the client with fewer jobs held, then to the oldest. At most `max_waiting`
jobs wait: when full, a better-ranked job takes the place of the worst one waiting, which
is refused (`Busy`); a job may also say how many jobs its client may hold (waiting or
hashing) and is refused at once past that. Either refusal comes before any hashing.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import Counter
from collections.abc import Callable


class Busy(Exception):
    """Too many password hashes are waiting; try again in a moment."""


class _Job:
    __slots__ = ("fn", "args", "client", "key", "done", "result", "error")

    def __init__(self, fn, args, client, key):
        self.fn, self.args, self.client, self.key = fn, args, client, key
        self.done = threading.Event()
        self.result = self.error = None

    def __lt__(self, other: _Job) -> bool:
        return self.key < other.key


class RankedQueue:
    def __init__(self, max_waiting: int, initializer: Callable[[], None] | None = None):
        if max_waiting < 1:
            raise ValueError(f"the hash queue needs room for a job, got {max_waiting}")
        self.max_waiting = max_waiting
        self._initializer = initializer
        self._cond = threading.Condition()
        self._heap: list[_Job] = []
        self._held: Counter = Counter()  # client -> jobs waiting or running
        self._seq = itertools.count()
        self._worker: threading.Thread | None = None

    def waiting(self) -> int:
        with self._cond:
            return len(self._heap)

    def run(self, fn, *args, client: str | None = None, rank: int = 0,
            most: int | None = None):
        """fn(*args) in the worker thread, once the jobs ranked before it are done; `most`:
        the jobs `client` may hold, this one included (None: no limit but the queue's)."""
        with self._cond:
            held = self._held[client] if client is not None else 0
            if most is not None and held >= most:
                raise Busy("too many sign-ins at once from this client")
            job = _Job(fn, args, client, (rank, held, next(self._seq)))
            if len(self._heap) >= self.max_waiting:
                worst = max(self._heap)
                if not job < worst:
                    raise Busy("too many sign-ins at once")
                self._heap.remove(worst)
                heapq.heapify(self._heap)
                self._release(worst)
                worst.error = Busy("too many sign-ins at once")
                worst.done.set()
            heapq.heappush(self._heap, job)
            if client is not None:
                self._held[client] += 1
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, daemon=True,
                                                name="prmkit-argon2")
                self._worker.start()
            self._cond.notify()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result

    def _release(self, job: _Job) -> None:
        if job.client is not None:
            self._held[job.client] -= 1
            if not self._held[job.client]:
                del self._held[job.client]

    def _work(self) -> None:
        if self._initializer is not None:
            self._initializer()
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                job = heapq.heappop(self._heap)
            try:
                job.result = job.fn(*job.args)
            except BaseException as e:  # handed to the waiting request
                job.error = e
            with self._cond:
                self._release(job)
            job.done.set()
