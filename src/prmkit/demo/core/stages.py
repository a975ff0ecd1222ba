"""Where a demo's seeds are: one line per stage per seed when it starts and ends, and at most
one every `prmkit.progress.LOG_INTERVAL_S` seconds while it runs, with its count done, the
time it took so far and an estimate of what remains of it (at its own rate) and of the
whole run (from each stage's share of a seed's time).

A seed running in this process prints its lines itself; a seed in a process of its own
(`prmkit.demo.core.parallel`) sends them to the parent, which prints them (`StageLines`):
the terminal shows every seed's stages, not a bar of finished seeds.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prmkit.progress import LOG_INTERVAL_S

_send: Callable[[dict], None] | None = None  # set in a seed's own process: to the parent
_seed: int | None = None  # the seed running in this process (None: no lines)


def send_to(sink: Callable[[dict], None] | None) -> None:
    """Where this process's stage events go (None: printed here)."""
    global _send
    _send = sink


@contextlib.contextmanager
def for_seed(seed: int) -> Iterator[None]:
    """The stages reported inside are `seed`'s."""
    global _seed
    saved, _seed = _seed, seed
    try:
        yield
    finally:
        _seed = saved


@dataclass
class Stage:
    seed: int | None
    name: str
    total: int | None = None
    done: int = 0
    start: float = field(default_factory=time.monotonic)
    last_line: float = 0.0
    unit: str = ""

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.seed is None:
            return
        now = time.monotonic()
        if now - self.last_line >= LOG_INTERVAL_S or self.done == n:  # the first unit too
            self.last_line = now
            _emit({"seed": self.seed, "stage": self.name, "event": "progress",
                   "done": self.done, "total": self.total, "unit": self.unit,
                   "elapsed": now - self.start})


@contextlib.contextmanager
def stage(name: str, total: int | None = None, unit: str = "") -> Iterator[Stage]:
    """Report a stage of the seed running here (`for_seed`; outside one, nothing is
    reported): started, `Stage.update` while it runs, done with its time."""
    s = Stage(_seed, name, total, unit=unit)
    if _seed is None:
        yield s
        return
    _emit({"seed": _seed, "stage": name, "event": "start", "total": total, "unit": unit,
           "elapsed": 0.0})
    yield s
    _emit({"seed": _seed, "stage": name, "event": "end", "done": s.done, "total": total,
           "unit": unit, "elapsed": time.monotonic() - s.start})


def _emit(event: dict) -> None:
    if _send is not None:
        _send(event)
    elif _LOCAL.show:
        print(_LOCAL.line(event), flush=True)


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, s = divmod(seconds, 60)
    return f"{minutes}m{s:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


class StageLines:
    """The lines of stage events, with an estimate of what remains of the run: `shares`
    gives each stage's share of a seed's time (measured once, in a recipe's docs); a seed's
    part done is the shares of its ended stages plus its current
    stage's share times the part of it done (its count done of total at its last line, at
    that line's rate until now), and what remains of it is its time so far times
    (1 - part) / part. The run's: `run_left`."""

    def __init__(self, seeds: list[int] | None = None, shares: dict[str, float] | None = None,
                 workers: int = 1, started: float | None = None, show: bool = True):
        self.seeds = list(seeds or [])
        self.show = show  # whether lines of seeds run in this process are printed
        self.workers = workers
        self.shares = dict(shares or {})
        self.started = time.monotonic() if started is None else started
        self.ended: dict[int, set[str]] = {}
        self.at: dict[int, dict] = {}  # seed -> its latest event
        self.seed_started: dict[int, float] = {}

    def line(self, e: dict) -> str:
        now = time.monotonic()
        self.at[e["seed"]] = {**e, "received": now}
        self.seed_started.setdefault(e["seed"], now - e["elapsed"])
        if e["event"] == "end":
            self.ended.setdefault(e["seed"], set()).add(e["stage"])
        head = f"[demo] seed {e['seed']}: {e['stage']}"
        unit = f" {e['unit']}" if e.get("unit") else ""
        if e["event"] == "start":
            text = f"{head} started" + (f" ({e['total']}{unit})" if e.get("total") else "")
        elif e["event"] == "end":
            text = f"{head} done in {duration(e['elapsed'])}"
        else:
            count = f"{e['done']}/{e['total']}" if e.get("total") else str(e["done"])
            left = _stage_left(e)
            text = (f"{head}: {count}{unit}, {duration(e['elapsed'])} elapsed"
                    + (f", about {duration(left)} left" if left is not None else ""))
        run = f"run {duration(now - self.started)} elapsed"
        run_left = self.run_left(now)
        if run_left is not None:
            run += f", about {duration(run_left)} left"
        return f"{text} [{run}]"

    def run_left(self, now: float | None = None) -> float | None:
        """What remains of the run: every seed's remainder (a seed not started yet: the mean
        whole-seed time of those reporting) spread over `workers` processes, and at least
        the slowest seed's (None: not known yet)."""
        now = time.monotonic() if now is None else now
        if not self.shares or not self.seeds:
            return None
        total = sum(self.shares.values())
        whole, lefts = [], []
        for s in (s for s in self.seeds if s in self.at):
            e = self.at[s]
            part = sum(self.shares.get(st, 0.0) for st in self.ended.get(s, ()))
            if e["event"] == "progress" and e.get("total") and e["elapsed"] > 0:
                # the stage's rate at its last line, carried on to now
                going = e["elapsed"] + now - e["received"]
                part += self.shares.get(e["stage"], 0.0) * min(
                    (e.get("done") or 0) / e["total"] * going / e["elapsed"], 1.0)
            part = min(part / total, 1.0)
            if part <= 0:
                return None
            spent = now - self.seed_started[s]
            whole.append(spent / part)
            lefts.append(spent / part - spent)
        if not whole:
            return None
        lefts += [sum(whole) / len(whole)] * (len(self.seeds) - len(lefts))
        return max(max(lefts), sum(lefts) / max(self.workers, 1))


def _stage_left(e: dict) -> float | None:
    done, total = e.get("done") or 0, e.get("total")
    if not total or done <= 0 or e["event"] != "progress":
        return None
    return e["elapsed"] * (total - done) / done


_LOCAL = StageLines()  # the lines of seeds run in this process


def expect(seeds: list[int], shares: dict[str, float] | None, show: bool = True) -> StageLines:
    """The lines of a run of `seeds` one after another in this process (its estimate from
    `shares`; none printed unless `show`)."""
    global _LOCAL
    _LOCAL = StageLines(seeds, shares, show=show)
    return _LOCAL
