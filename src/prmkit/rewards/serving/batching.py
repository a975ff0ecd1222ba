"""What waits in the reward engine's queue, and how a batch takes from it.

A request is a `Job`: its items, each item's tokens, and a cursor past the items already
given to a batch. The `Rotation` holds the jobs with items still waiting and forms each
batch from them in turn, least recently served first (ties in arrival order): a job whose
remaining items all fit in what is left of the batch gives them all; a larger one gives at
most its fair share of the batch (the budget over the jobs waiting, at least one item),
and what the shares leave is filled in the same order. So every waiting job moves on in
every batch, and a new request, which ranks as if served just before the batch running
when it arrived, joins the next batch whole when it is within its share: it waits for the
running batch only. The first job whose next item does not fit ends the batch (an item
over the whole budget goes alone), so requests that fit go in arrival order.
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
    waiting: int = 0  # tokens of the items not yet given to a batch

    def __post_init__(self):
        self.results = [None] * len(self.items)
        self.waiting = sum(self.tokens)


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
            self.tokens -= job.waiting
            job.next, job.waiting = len(job.items), 0

    def start_batch(self) -> None:
        self.formed += 1

    def take(self, batch: list[Chunk], tokens: int, budget: int,
             max_requests: int | None = None) -> tuple[int, bool]:
        """Add items to `batch` (holding `tokens`) from the waiting jobs (module docstring);
        returns the batch's tokens and whether it is full (nothing more may join it)."""
        jobs = [j for j in sorted(self.jobs, key=lambda j: (j.rank, j.seq))
                if not j.future.done()]  # a job whose client left: the engine removes it
        if max_requests is not None:
            jobs = jobs[: max(max_requests - len(batch), 0)]
            if not jobs and self.jobs:
                return tokens, True
        share = max(1, (budget - tokens) // max(1, len(jobs)))
        for capped in (True, False):  # fair shares first, then what is left, in turn
            for job in jobs:
                if job.next == len(job.items):
                    continue
                left = budget - tokens
                cap = share if capped and job.waiting > left else budget
                start, taken = job.next, 0
                while job.next < len(job.items):
                    t = job.tokens[job.next]
                    alone = tokens + taken == 0  # an item over the budget runs alone
                    if not alone and (taken + t > left or (taken and taken + t > cap)):
                        break
                    taken += t
                    job.next += 1
                if job.next == start:  # its next item does not fit: the batch is full
                    return tokens, True
                self._add(batch, job, start, taken)
                tokens += taken
        return tokens, tokens >= budget

    def _add(self, batch: list[Chunk], job: Job, start: int, taken: int) -> None:
        job.rank = self.formed
        job.waiting -= taken
        self.items -= job.next - start
        self.tokens -= taken
        last = next((c for c in batch if c.job is job), None)
        if last is not None:  # its first-pass chunk, continued
            last.end, last.tokens = job.next, last.tokens + taken
        else:
            batch.append(Chunk(job, start, job.next, taken))
        if job.next == len(job.items):
            self.jobs.remove(job)
