"""A demo's seeds, one after another or each in a process of its own.

Every seed seeds its own world, models and draws, so a seed's figures are the same in a
fresh process as after other seeds in one process. Processes start with 'spawn' (no state
copied from the parent), each with the demo's torch settings (`torch_settings`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any

from prmkit.demo.core import stages
from prmkit.demo.core.config import DemoConfig, torch_settings
from prmkit.errors import PrmkitError

LOG = "output.log"  # a seed's output when it runs in a process of its own


def cores() -> int:
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def seed_workers(cfg: DemoConfig) -> int:
    """How many seeds run at once: `cfg.workers`, or with 0 as many as the cores hold at
    `cfg.threads` each, or every seed when they are at most twice that (1: one after
    another)."""
    if cfg.workers < 0:
        raise PrmkitError(f"workers must be 0 (one process per core) or more, got {cfg.workers}")
    seeds = len(set(cfg.seeds))
    if cfg.workers:
        return max(1, min(cfg.workers, seeds))
    fit = max(1, cores() // max(cfg.threads, 1))
    # Up to twice as many seeds as fit run all at once: 3 single-threaded seeds on 2 cores
    # end in about 1.5 seed-times, against 2 for two rounds (2, then 1 with a core idle).
    return seeds if seeds <= 2 * fit else fit


def map_seeds(fn: Callable, cfg: DemoConfig, work: Path,
              line: Callable[[int, Any], str] | None = None,
              shares: dict[str, float] | None = None) -> list:
    """`fn(seed, cfg, work)` for each of `cfg.seeds`, in their order (a repeated seed runs
    once), and `line(seed, result)` printed as each seed ends. Each seed's stages are
    reported as lines (`prmkit.demo.core.stages`; `shares`: each stage's share of a seed's
    time, for an estimate of what remains of the run). With several workers `fn` must be a
    module-level function; each process runs without progress bars and writes its output to
    `work/seed<s>/output.log`, its stages' lines sent to this process and printed here."""
    seeds = list(dict.fromkeys(cfg.seeds))
    workers = seed_workers(cfg)
    done: dict = {}
    if workers == 1:
        stages.expect(seeds, shares, show=cfg.progress)
        with torch_settings(cfg.threads):
            for s in seeds:
                with stages.for_seed(s):
                    done[s] = fn(s, cfg, work)
                if line is not None:
                    print(line(s, done[s]), flush=True)
        return [done[s] for s in cfg.seeds]

    quiet = replace(cfg, progress=False)
    print(f"[demo] seeds {', '.join(map(str, seeds))}: {workers} processes of "
          f"{cfg.threads} thread(s) on {cores()} cores, each seed's output in "
          f"{Path(work) / 'seed<s>' / LOG}", flush=True)
    lines = stages.StageLines(seeds, shares, workers)
    context = multiprocessing.get_context("spawn")
    events = context.Queue()
    with ProcessPoolExecutor(workers, mp_context=context, initializer=stages.send_to,
                             initargs=(events.put,)) as pool:
        pending = {pool.submit(_in_process, fn, s, quiet, Path(work)): s for s in seeds}
        try:
            while pending:
                finished, _ = wait(pending, timeout=1, return_when=FIRST_COMPLETED)
                _print_events(events, lines, cfg.progress)
                for future in finished:
                    s = pending.pop(future)
                    done[s] = future.result()
                    if line is not None:
                        print(line(s, done[s]), flush=True)
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    _print_events(events, lines, cfg.progress)
    return [done[s] for s in cfg.seeds]


def _print_events(events, lines: stages.StageLines, show: bool) -> None:
    while True:
        try:
            event = events.get_nowait()
        except queue.Empty:
            return
        text = lines.line(event)
        if show:
            print(text, flush=True)


def with_demo_settings(run_seed: Callable, cfg: Any, seed: int, demo: DemoConfig, work: Path):
    """`run_seed(seed, cfg, work)` for an experiment whose settings `cfg` hold its demo
    settings, with `cfg.demo` the ones `map_seeds` hands this seed (quiet in a process of
    its own): give `map_seeds` `partial(with_demo_settings, run_seed, cfg)`."""
    return run_seed(seed, replace(cfg, demo=demo), work)


def _in_process(fn: Callable, seed: int, cfg: DemoConfig, work: Path):
    log = work / f"seed{seed}" / LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), \
            torch_settings(cfg.threads), stages.for_seed(seed):
        return fn(seed, cfg, work)
