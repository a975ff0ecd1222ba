"""What waits in the reward engine's queue, and how a batch takes from it.

A request is a `Job`: its items, each item's tokens, and a cursor past the items already
given to a batch. The `Rotation` holds the jobs with items still waiting and forms each
batch from them in turn: least recently served first, ties in arrival order. A new job
ranks as if served just before the batch that was running when it arrived, so it goes
ahead of the jobs that batch served and behind those waiting since earlier. Each job gives
the batch as many of its next items as fit in the budget; the first item that does not
fit ends the batch (what is left of its job waits for the next one), and an item over the
whole budget goes alone. With one job, or jobs that fit, batches follow arrival order.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Job:
    items: list[Any]
    tokens: list[int]  # of each item
    future: asyncio.Future
    seq: int  # arrival order
    rank: float  # the batch that last served it (see the module docstring)
    next: int = 0  # the first item not yet given to a batch
    finished: int = 0  # items with results
    results: list[Any] = field(default_factory=list)
    dropped: bool = False  # its client went away (counted once)

    def __post_init__(self):
        self.results = [None] * len(self.items)


@dataclass(eq=False)
class Chunk:
    """Items [start, end) of one job, in one batch."""

    job: Job
    start: int
    end: int
    tokens: int

    @property
    def items(self) -> list[Any]:
        return self.job.items[self.start: self.end]


class Rotation:
    """The waiting jobs, and the counts of their items and tokens not yet in a batch."""

    def __init__(self):
        self.jobs: list[Job] = []
        self.items = 0
        self.tokens = 0
        self.formed = 0  # batches formed so far
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self.jobs)

    def add(self, items: list[Any], tokens: list[int], future: asyncio.Future) -> Job:
        job = Job(items, tokens, future, next(self._seq), rank=self.formed - 0.5)
        self.jobs.append(job)
        self.items += len(items)
        self.tokens += sum(tokens)
        return job

    def remove(self, job: Job) -> None:
        """Take what is left of `job` out of the queue (it failed, or its client left)."""
        if job in self.jobs:
            self.jobs.remove(job)
            self.items -= len(job.items) - job.next
            self.tokens -= sum(job.tokens[job.next:])
            job.next = len(job.items)

    def start_batch(self) -> None:
        self.formed += 1

    def take(self, batch: list[Chunk], tokens: int, budget: int,
             max_requests: int | None = None) -> tuple[int, bool]:
        """Add items to `batch` (holding `tokens`) in rotation order; returns the batch's
        tokens and whether it is full (nothing more may join it)."""
        for job in sorted(self.jobs, key=lambda j: (j.rank, j.seq)):
            if job.future.done():  # its client left: the engine's callback removes it
                continue
            if max_requests is not None and len(batch) >= max_requests:
                return tokens, True
            start, taken = job.next, 0
            while job.next < len(job.items):
                t = job.tokens[job.next]
                if tokens + taken and tokens + taken + t > budget:
                    break
                taken += t
                job.next += 1
            if job.next > start:
                batch.append(Chunk(job, start, job.next, taken))
                job.rank = self.formed
                tokens += taken
                self.items -= job.next - start
                self.tokens -= taken
            if job.next < len(job.items):
                return tokens, True
            self.jobs.remove(job)
        return tokens, tokens >= budget
