"""Best-of-N, weighted best-of-N, beam search and DVTS, and the runner that drives them.

Each method is a generator over one problem: it yields the expansions it needs, receives
the children (one list per expansion, in order), scores and selects, and returns the
problem's `SearchResult`. `run_search` drives the methods of several problems at once so
that their requests share one sampler call per round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Sequence

from tqdm import tqdm

from prmkit.errors import PrmkitError
from prmkit.generation.base import Sampler
from prmkit.search.config import TREE_APPROACHES, SearchConfig
from prmkit.search.core import (
    Candidate,
    Expand,
    ProblemRun,
    PromptBuilder,
    SearchResult,
    StepScorer,
    top,
)
from prmkit.selection.vote import AnswerClusterer

Method = Generator[list[Expand], list[list[Candidate]], SearchResult]
log = logging.getLogger("prmkit.search")


def best_of_n(run: ProblemRun) -> Method:
    """N whole solutions; the top aggregated score wins."""
    children = (yield [Expand(None, run.config.n, full=True)])[0]
    run.score(children)
    run.rounds.append({"sampled": len(children), "kept": len(children)})
    return run.result(children, run.config.approach)


def beam_search(run: ProblemRun) -> Method:
    """Round 0 samples N first steps. Every round, completed candidates leave the beam and
    the top N/M open ones (by aggregated score; all of them when fewer are open) are kept
    and each expanded into M next steps: N new candidates while at least N/M are open,
    fewer after. The search ends once N have completed, none is open, or after
    max_steps rounds (the last round samples each kept candidate to its end). The final
    pool is the N best completed candidates."""
    cfg = run.config
    finished: list[Candidate] = []
    kept: list[Candidate] = []
    for rnd in range(cfg.max_steps):
        last = rnd == cfg.max_steps - 1
        if rnd == 0:
            expands = [Expand(None, cfg.n, full=last)]
        else:
            expands = [Expand(c, cfg.beam_width, full=last) for c in kept]
        children = [c for kids in (yield expands) for c in kids]
        run.score(children)
        finished += [c for c in children if c.completed]
        still_open = [c for c in children if not c.completed]
        kept = top(still_open, cfg.beams)
        run.rounds.append({"sampled": len(children), "kept": len(kept),
                           "completed": len(finished)})
        if len(finished) >= cfg.n or not kept:
            break
    return run.result(top(finished, cfg.n), cfg.approach)


def dvts(run: ProblemRun) -> Method:
    """Diverse verifier tree search: N/M independent subtrees. Each round, each subtree's
    current candidate is expanded into M next steps and only its best child is kept
    (greedy within the subtree), until that best child is complete. The final pool holds
    each subtree's M last-round children (the finished best and its siblings): N
    candidates, as search-and-learn's DVTS, so the weighted vote runs over N answers."""
    cfg = run.config
    current: list[Candidate | None] = [None] * cfg.beams
    last_children: list[list[Candidate]] = [[] for _ in range(cfg.beams)]
    finished = [False] * cfg.beams
    for rnd in range(cfg.max_steps):
        last = rnd == cfg.max_steps - 1
        live = [t for t in range(cfg.beams) if not finished[t]]
        expands = [Expand(current[t], cfg.beam_width, full=last, subtree=t) for t in live]
        kids_per_tree = yield expands
        run.score([c for kids in kids_per_tree for c in kids])
        for t, kids in zip(live, kids_per_tree):
            best = top(kids, 1)[0]
            last_children[t] = kids
            current[t] = best
            finished[t] = best.completed
        run.rounds.append({"sampled": sum(map(len, kids_per_tree)), "kept": len(live),
                           "completed": sum(finished)})
        if all(finished):
            break
    return run.result([c for kids in last_children for c in kids], cfg.approach)


# One name-to-function table; weighted best-of-N samples as best-of-N and picks by vote.
METHODS: dict[str, Callable[[ProblemRun], Method]] = {
    "best_of_n": best_of_n,
    "weighted_best_of_n": best_of_n,
    "beam_search": beam_search,
    "dvts": dvts,
}


def run_search(problems: Sequence[tuple[str, str]], sampler: Sampler, scorer: StepScorer,
               prompts: PromptBuilder, config: SearchConfig, progress: bool = True,
               clusterer: AnswerClusterer | None = None,
               on_result: Callable[[SearchResult], None] | None = None) -> list[SearchResult]:
    """Search every (key, problem text) with `config.approach`; results in input order.

    `config.batch_problems` problems are searched together; `on_result` is called with
    each result as soon as its batch is done (to write it out before the next batch).
    Answers are grouped for the weighted vote with `clusterer` (default: prmkit's grader).
    """
    keys = [str(k) for k, _ in problems]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise PrmkitError(f"problem key {dup!r} appears more than once")
    warn_single_beam(config)
    method = METHODS[config.approach]
    clusterer = clusterer or AnswerClusterer()
    results: list[SearchResult] = []
    with tqdm(total=len(problems), desc=config.approach, unit="problem",
              disable=not progress, dynamic_ncols=True) as bar:
        for start in range(0, len(problems), config.batch_problems):
            batch = problems[start:start + config.batch_problems]
            runs = [ProblemRun(str(k), text, scorer, prompts, config, clusterer)
                    for k, text in batch]
            done = _drive(runs, [method(r) for r in runs], sampler, config, bar)
            for r in runs:
                if hasattr(scorer, "forget"):
                    scorer.forget(r.problem)
            for res in done:
                if on_result is not None:
                    on_result(res)
            results += done
    return results


def warn_single_beam(config: SearchConfig) -> None:
    """A tree search whose n / beam_width is 1 keeps one beam (one DVTS subtree): say so."""
    if config.approach in TREE_APPROACHES and config.beams == 1:
        what = "beam" if config.approach == "beam_search" else "subtree"
        log.warning("%s with n=%d and beam_width=%d keeps a single %s (n / beam_width = 1): "
                    "a greedy search over %d children per step; lower beam_width or raise n "
                    "for several %ss", config.approach, config.n, config.beam_width, what,
                    config.beam_width, what)


def _drive(runs: list[ProblemRun], methods: list[Method], sampler: Sampler,
           config: SearchConfig, bar) -> list[SearchResult]:
    """Advance every method round by round; one sampler call per kind of expansion."""
    results: list[SearchResult | None] = [None] * len(runs)
    pending: dict[int, list[Expand]] = {}

    def advance(i: int, sent) -> None:
        try:
            pending[i] = methods[i].send(sent)
        except StopIteration as stop:
            results[i] = stop.value
            pending.pop(i, None)
            bar.update(1)

    for i in range(len(runs)):
        advance(i, None)
    while pending:
        children: dict[int, list[list[Candidate]]] = {i: [None] * len(e)
                                                      for i, e in pending.items()}
        for full in (False, True):
            todo = [(i, j, e) for i, expands in pending.items()
                    for j, e in enumerate(expands) if e.full == full]
            if not todo:
                continue
            requests = [runs[i].request(e) for i, _, e in todo]
            params = config.full_params() if full else config.step_params()
            outputs = sampler.generate(requests, params)
            if len(outputs) != len(requests):
                raise PrmkitError(f"the sampler returned {len(outputs)} outputs for "
                                  f"{len(requests)} requests")
            for (i, j, e), req, out in zip(todo, requests, outputs):
                if out.key != req.key:
                    raise PrmkitError("the sampler returned outputs out of request order")
                children[i][j] = runs[i].children(e, out)
        for i in list(pending):
            advance(i, children[i])
    return results
