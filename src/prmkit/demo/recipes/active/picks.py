"""What the active-learning experiment labels: the selector, its scored pools, the paper's
80/20 selection once (`active_picks`) or round by round with the selector retrained on
everything labelled so far (`iterative_picks`), and what a selection holds."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from prmkit.active.selection import Candidate, SelectionConfig, dedupe_key, select_convincing
from prmkit.demo import world
from prmkit.demo.core.labels import Picks, examples_for, uniform_picks
from prmkit.demo.core.scores import cached_scores
from prmkit.demo.core.small_models import train_small
from prmkit.demo.core.small_scale import SeedSetup, selector_problems, world_checks
from prmkit.demo.core.thresholds import label_agreement
from prmkit.demo.world.error_kinds import KINDS, error_kind
from prmkit.scoring.aggregate import aggregate, fill_null_steps

SELECTOR = "uniform-process-s1"  # the uniform process model at 1 sample per problem


def selector_name(setup: SeedSetup) -> str:
    """The selector's model name: the uniform process model at 1 sample per problem, or one
    trained on `selector_problems` fresh problems."""
    n = setup.cfg.selector_problems
    return f"selector-p{n}" if n else SELECTOR


def picks_name(setup: SeedSetup, which: str) -> str:
    """`which` picks ("active", "iterative"), named by the selector that made them."""
    n = setup.cfg.selector_problems
    return f"{which}-sel{n}" if n and which != "uniform" else which


def selector_model(setup: SeedSetup) -> Path:
    name = selector_name(setup)
    if name == SELECTOR:
        return train_small(setup, name, "process",
                           examples_for(setup, "process", uniform_picks(setup, 1)))
    problems = selector_problems(setup.seed, setup.cfg)
    pools = world.sample_pools(problems, 1, seed=setup.seed + 4)
    probs = cached_scores(setup.folder / name / "large_probs.json", setup.large.prm_dir,
                          pools, problems, setup.cfg.progress)
    own = replace(setup, problems=problems, pools=pools, checks=world_checks(problems, pools),
                  large_probs=[[fill_null_steps(sp) for sp in pool] for pool in probs])
    return train_small(setup, name, "process", examples_for(own, "process", [[0]] * len(problems)))


def candidates(setup: SeedSetup, model_dir: Path,
               scores_file: str | None = None) -> list[Candidate]:
    """Every sample of the pools, scored by a selector PRM (the demo's aggregation; by
    default the seed's selector, cached by its name), with the grader's verdict on its
    final answer."""
    name = selector_name(setup)
    scores_file = scores_file or ("selector_pool_scores.json" if name == SELECTOR
                                  else f"{name}/pool_scores.json")
    scores = cached_scores(setup.folder / scores_file, model_dir, setup.pools, setup.problems,
                           setup.cfg.progress)
    agg = setup.cfg.demo.aggregation
    return [Candidate(problem_id=p.id, sample_index=i, dedupe_key=dedupe_key(steps),
                      score=aggregate(scores[k][i], agg),
                      correct=setup.checks[k][i].final_correct)
            for k, p in enumerate(setup.problems) for i, steps in enumerate(setup.pools[k])]


def active_picks(setup: SeedSetup, pool: list[Candidate], size: int) -> Picks:
    chosen = select_convincing(pool, SelectionConfig(
        per_problem=size, convincing_wrong_share=setup.cfg.convincing_wrong_share))
    index = {p.id: k for k, p in enumerate(setup.problems)}
    picks: Picks = [[] for _ in setup.problems]
    for c in chosen:
        picks[index[c.problem_id]].append(c.sample_index)
    return picks


def iterative_picks(setup: SeedSetup, first: list[Candidate]) -> dict[int, Picks]:
    """Per size, the picks of rounds that each add the 80/20 selection of the next
    `size - previous size` per problem among samples not yet labelled (duplicates
    included), scored by a selector retrained on all picks so far (PRM_large's process
    labels; the first round's pool is `first`, the first selector's `candidates`). The
    model trained on a round's picks, `iterative-process-s{size}` (named by the first
    selector: `picks_name`), selects the next round."""
    name = picks_name(setup, "iterative")
    picks: Picks = [[] for _ in setup.problems]
    scored, done, out = first, 0, {}
    for size in setup.cfg.sizes:
        labelled = {(setup.problems[k].id, dedupe_key(setup.pools[k][i]))
                    for k, idx in enumerate(picks) for i in idx}
        pool = [c for c in scored if (c.problem_id, c.dedupe_key) not in labelled]
        for k, new in enumerate(active_picks(setup, pool, size - done)):
            picks[k] = picks[k] + new
        out[size] = [list(p) for p in picks]
        if size != setup.cfg.sizes[-1]:  # the next round's selector and its scores
            model = train_small(setup, f"{name}-process-s{size}", "process",
                                examples_for(setup, "process", picks))
            scored = candidates(setup, model, f"{name}-process-s{size}/pool_scores.json")
        done = size
    return out


def composition(setup: SeedSetup, picks: Picks) -> dict[str, float]:
    """Shares of the labelled samples with a wrong final answer and with a wrong process,
    and of those whose first wrong step PRM_large finds exactly (its labels' accuracy); the
    share of each kind of mistake (`right`: none)."""
    chosen = [setup.checks[k][i] for k, idx in enumerate(picks) for i in idx]
    probs = [setup.large_probs[k][i] for k, idx in enumerate(picks) for i in idx]
    kinds = [error_kind(setup.problems[k], setup.pools[k][i], setup.checks[k][i])
             for k, idx in enumerate(picks) for i in idx]
    return {"samples": len(chosen),
            "kinds": {kind: kinds.count(kind) / max(len(kinds), 1) for kind in ("right", *KINDS)},
            "wrong_answer": float(np.mean([not c.final_correct for c in chosen])),
            "wrong_process": float(np.mean([not c.process_correct for c in chosen])),
            "large_labels_exact": label_agreement([chosen], [probs], setup.threshold)[
                "process_first_error_exact"]}
