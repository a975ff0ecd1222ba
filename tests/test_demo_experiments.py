"""The small-scale experiments in the demo world: labels, selections, the efficiency
measure, and a tiny end-to-end run through `prmkit demo --experiment`."""

from __future__ import annotations

import json
import math
import shutil
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from prmkit.active.efficiency import efficiency, ratio_undefined
from prmkit.active.selection import Candidate, dedupe_key
from prmkit.demo import world
from prmkit.demo.core.labels import examples_for, uniform_picks
from prmkit.demo.core.seed import models_folder, seed_world
from prmkit.demo.core.small_scale import (
    SeedSetup,
    SmallScaleConfig,
    prepare_seed,
    quick_small_scale,
    selector_problems,
)
from prmkit.demo.core.thresholds import THRESHOLDS
from prmkit.demo.recipes.active import active_picks, figure_title, iterative_picks
from prmkit.demo.recipes.active import run as run_active
from prmkit.demo.recipes.active.picks import candidates, picks_name, selector_model, selector_name


def _setup(probs_rng: int = 0, problems: int = 10, pool: int = 12) -> SeedSetup:
    """A seed's small-scale data with made-up PRM_large probabilities (no models)."""
    cfg = replace(quick_small_scale(), problems=problems, pool_size=pool, sizes=(1, 2, 4))
    probs = world.make_problems(problems, seed=7, difficulty="medium")
    pools = world.sample_pools(probs, pool, seed=7)

    def made_up(p, steps):  # a function of the text, as a scorer's output is
        rng = np.random.default_rng([probs_rng, zlib.crc32((p.text + "\n".join(steps)).encode())])
        return rng.uniform(0.5, 1.0, len(steps)).tolist()

    return SeedSetup(
        seed=0, cfg=cfg, folder=Path("unused"), large=None, test=[], test_pools=[],
        problems=probs, pools=pools,
        checks=[[world.check_solution(p, s) for s in pl] for p, pl in zip(probs, pools)],
        large_probs=[[made_up(p, s) for s in pl] for p, pl in zip(probs, pools)], threshold=0.2)


def test_process_labels_of_small_models_come_from_prm_large_through_the_threshold():
    setup = _setup()
    picks = uniform_picks(setup, 4)
    examples = examples_for(setup, "process", picks)
    probs = [setup.large_probs[k][i] for k, idx in enumerate(picks) for i in idx]
    assert len(examples) == len(probs) > 0
    marked = 0
    for ex, p in zip(examples, probs):
        first = next((j for j, v in enumerate(p) if 1 - v > setup.threshold), None)
        want = [1.0] * len(p) if first is None else [1.0] * first + [0.0]
        assert list(ex.labels[: len(want)]) == want
        assert all(v is None for v in ex.labels[len(want):])
        marked += first is not None
    assert 0 < marked < len(examples)  # both kinds of label occur with these probabilities


def test_outcome_labels_from_prm_large_ignore_the_final_answer():
    setup = _setup()
    picks = uniform_picks(setup, 4)
    examples = examples_for(setup, "outcome", picks)
    probs = [setup.large_probs[k][i] for k, idx in enumerate(picks) for i in idx]
    want = [float(all(1 - v <= setup.threshold for v in p)) for p in probs]
    assert [ex.outcome for ex in examples] == want
    # Raising the threshold calls more solutions right: the labels follow it.
    looser = examples_for(replace(setup, threshold=0.45), "outcome", picks)
    assert sum(ex.outcome for ex in looser) > sum(want)


def test_final_answer_labels_are_the_graders_verdict_on_the_world_answer():
    setup = _setup()
    picks = uniform_picks(setup, 4)
    examples = examples_for(setup, "final_answer", picks)
    want = [float(setup.checks[k][i].final_correct) for k, idx in enumerate(picks) for i in idx]
    assert [ex.outcome for ex in examples] == want
    assert 0 < sum(want) < len(want)


def test_checker_control_labels_are_the_checkers_up_to_the_first_wrong_step():
    setup = _setup()
    picks = uniform_picks(setup, 4)
    examples = examples_for(setup, "checker", picks)
    checks = [setup.checks[k][i] for k, idx in enumerate(picks) for i in idx]
    for ex, c in zip(examples, checks):
        n = len(c.labels) if c.first_error < 0 else c.first_error + 1
        assert list(ex.labels) == [1.0] * (n - 1) + [1.0 if c.first_error < 0 else 0.0] + [None] * (len(c.labels) - n)
    assert any(c.first_error >= 0 for c in checks) and any(c.first_error < 0 for c in checks)


def test_uniform_picks_are_the_first_distinct_samples_of_each_pool():
    """As many labelled samples as active selection's distinct picks (the arms labelled
    515 and 1,132 samples at 8 per problem when uniform kept the first 8, duplicates
    dropped)."""
    setup = _setup()
    for k, idx in enumerate(uniform_picks(setup, 6)):
        pool = setup.pools[k]
        keys = [dedupe_key(pool[i]) for i in idx]
        assert len(set(keys)) == len(keys) == min(6, len({dedupe_key(s) for s in pool}))
        before = {dedupe_key(s) for s in pool[:idx[-1] + 1]}  # nothing distinct skipped
        assert before == set(keys) and idx == sorted(idx)


def test_active_selection_takes_80_percent_most_convincing_wrong_answers_then_the_best_rest():
    setup = _setup(problems=20, pool=30)
    rng = np.random.default_rng(1)
    pool = [Candidate(p.id, i, dedupe_key(steps), float(rng.random()),
                      setup.checks[k][i].final_correct)
            for k, p in enumerate(setup.problems) for i, steps in enumerate(setup.pools[k])]
    picks = active_picks(setup, pool, 5)
    checked = 0
    for k, p in enumerate(setup.problems):
        cands = {}
        for c in sorted((c for c in pool if c.problem_id == p.id), key=lambda c: -c.score):
            cands.setdefault(c.dedupe_key, c)  # distinct samples, best-scored copy
        distinct = list(cands.values())
        wrong = [c.sample_index for c in distinct if not c.correct]
        if len(wrong) < 4 or len(distinct) < 5:
            continue
        checked += 1
        assert picks[k][:4] == wrong[:4]  # the 4 most convincing wrong answers
        rest = [c.sample_index for c in distinct if c.sample_index not in wrong[:4]]
        assert picks[k][4:] == rest[:1]  # then the most convincing of the others
    assert checked >= 5


def test_flat_uniform_line_prints_no_efficiency_ratio_in_the_figure_title():
    # The demo world's measured means at 1 / 2 / 4 / 8 samples per problem: the uniform
    # line is flat (-0.20 points per doubling), and the old title read "ratio -11.58".
    sizes = [1, 2, 4, 8]
    uniform = [0.5351, 0.5504, 0.5467, 0.5298]
    active = [0.4605, 0.4854, 0.5443, 0.5165]
    e = efficiency(sizes, uniform, active)
    assert e["slope_active"] / e["slope_uniform"] == pytest.approx(-11.58, abs=0.01)
    assert e["ratio"] is None
    assert e["ratio_note"] == "the uniform line is flat (-0.20 points per doubling)"
    title = figure_title({"best_of_n": 16, "efficiency_ratio": e["ratio"],
                          "efficiency_ratio_note": e["ratio_note"]})
    assert "-11.58" not in title and "no efficiency ratio: the uniform line is flat" in title
    # Opposite signs, and a uniform line that falls: undefined too, each with its reason.
    rising = [0.40, 0.45, 0.50, 0.55]
    assert efficiency(sizes, rising, rising[::-1])["ratio"] is None
    assert ratio_undefined(0.05, -0.01).startswith("the active line does not rise")
    assert ratio_undefined(-0.03, 0.02).startswith("the uniform line falls")
    # Both rising, the uniform one clearly: the ratio, in the title.
    e = efficiency(sizes, rising, [0.40, 0.50, 0.60, 0.70])
    assert e["ratio"] == pytest.approx(2.0) and e["ratio_note"] is None
    assert figure_title({"best_of_n": 16, "efficiency_ratio": e["ratio"],
                         "efficiency_ratio_note": None}).endswith("efficiency ratio 2.00")


def test_quick_experiments_run_from_the_cli_and_repeat_with_the_same_seed(tmp_path):
    from prmkit.cli import main

    assert main(["demo", "--experiment", "all", "--quick", "--seeds", "0", "--no-progress",
                 "--out", str(tmp_path / "a")]) == 0
    syn = json.loads((tmp_path / "a" / "synthetic" / "metrics.json").read_text())
    act = json.loads((tmp_path / "a" / "active" / "metrics.json").read_text())
    assert set(syn["kinds"]) == {"process", "outcome", "final_answer", "checker"}
    assert syn["seeds"] == 1 and len(syn["kinds"]["process"]["accuracy"]) == 2
    assert (tmp_path / "a" / "synthetic" / "synthetic_by_size.png").stat().st_size > 0
    assert (tmp_path / "a" / "active" / "active_learning.png").stat().st_size > 0
    # At 1 sample per problem, 80% of the budget of the problems with a wrong answer go to
    # wrong answers (round(0.8 x 1) = 1 per problem made it 100%), the rest to the best
    # scored others, right or wrong (the exact shares: tests/test_active_selection.py).
    setup = prepare_seed(0, quick_small_scale((0,)), tmp_path / "a" / "work")  # cached
    # The dev problems (threshold and N* chosen there) are fresh: in no other split.
    splits = seed_world(0, setup.cfg.demo).splits
    used = {p.key for group in (splits.test, splits.train, splits.pretrain, setup.problems)
            for p in group}
    assert setup.dev and {p.key for p in setup.dev}.isdisjoint(used)
    assert [len(pool) for pool in setup.dev_pools] == [setup.cfg.test_samples] * len(setup.dev)
    assert setup.threshold in THRESHOLDS and str(setup.threshold) in setup.threshold_agreement
    with_wrong = sum(any(not c.final_correct for c in pool) for pool in setup.checks)
    share = math.floor(0.8 * with_wrong + 0.5) / len(setup.checks)
    picks = active_picks(setup, candidates(setup, selector_model(setup)), 1)
    wrong = np.mean([not setup.checks[k][i].final_correct for k, idx in enumerate(picks)
                     for i in idx])
    assert act["methods"]["active"]["wrong_answer_share"][0] == pytest.approx(wrong, abs=1e-4)
    assert wrong >= share - 1e-4
    assert act["efficiency_ratio_interval"] is None or len(act["efficiency_ratio_interval"]) == 2
    assert act["methods"]["uniform"]["wrong_answer_share"][0] < 1.0
    # The iterative variant: each round adds to the last, never a sample already labelled
    # (nor its duplicate), the selector retrained on the rounds so far (read back, cached).
    rounds = iterative_picks(setup, candidates(setup, selector_model(setup)))
    for small, big in zip(setup.cfg.sizes, setup.cfg.sizes[1:]):
        for k, pool in enumerate(setup.pools):
            assert rounds[big][k][: len(rounds[small][k])] == rounds[small][k]
            keys = [dedupe_key(pool[i]) for i in rounds[big][k]]
            assert len(keys) == len(set(keys)) <= big
    assert (setup.folder / f"{picks_name(setup, 'iterative')}-process-s1" / "pool_scores.json").exists()
    # The selector learnt from one sample of each of its own fresh problems, in no other split.
    own = selector_problems(0, setup.cfg)
    assert len(own) == setup.cfg.selector_problems == act["selector"]["problems"]
    assert {p.key for p in own}.isdisjoint(used | {p.key for p in setup.dev})
    assert (setup.folder / selector_name(setup) / "large_probs.json").exists()
    assert act["selector"]["model"] == selector_name(setup) == "selector-p20"
    paper = replace(setup, cfg=replace(setup.cfg, selector_problems=0))
    assert selector_name(paper) == "uniform-process-s1" and picks_name(paper, "active") == "active"
    kinds = act["methods"]["active"]["kinds"]
    assert sum(kinds[kind][0] for kind in kinds) == pytest.approx(1.0, abs=1e-3)
    su, sa = (act["methods"][m]["fit"]["slope"] for m in ("uniform", "active"))
    if ratio_undefined(su, sa) is None:  # the ratio of the fitted slopes where defined
        assert act["efficiency_ratio"] == pytest.approx(sa / su, abs=1e-4)
    else:  # else null, with the reason
        assert act["efficiency_ratio"] is None
        assert act["efficiency_ratio_note"] == ratio_undefined(su, sa)

    # Same seed, fresh small-scale cache, the same PRM_large: the same figures.
    cfg = quick_small_scale((0,))
    models = models_folder(0, cfg.demo, tmp_path / "b")
    shutil.copytree(models_folder(0, cfg.demo, tmp_path / "a" / "work"), models,
                    ignore=shutil.ignore_patterns("small-scale-*"))
    again = run_active(cfg, tmp_path / "b" / "active", tmp_path / "b")
    for method in ("uniform", "active"):
        assert again["methods"][method]["accuracy"] == act["methods"][method]["accuracy"]
        assert again["methods"][method]["examples"] == act["methods"][method]["examples"]


def test_small_models_train_for_epochs_of_their_data(tmp_path):
    """A fixed step count let more labelled data add nothing: the data sets the length."""
    from prmkit.demo.core.small_models import train_small

    cfg = replace(quick_small_scale((0,)), small_steps=None, small_epochs=2.0)
    setup = prepare_seed(0, cfg, tmp_path)
    model_dir = train_small(setup, "epochs", "checker",
                            examples_for(setup, "checker", uniform_picks(setup, 2)))
    stats = json.loads((model_dir.parent / "data_stats.json").read_text())
    assert stats["total_steps"] == 2 * stats["steps_per_epoch"] > 0


def test_small_scale_pools_hold_4x_the_largest_size_in_distinct_solutions():
    """At 64 samples a pool held 12 distinct solutions: selecting 8 took most of it."""
    cfg = SmallScaleConfig()
    demo = cfg.demo
    stream = world.make_splits(0, test=demo.test_problems, train=demo.train_problems,
                               pretrain=demo.pretrain_problems + cfg.problems,
                               difficulty=demo.difficulty)
    problems = stream.pretrain[demo.pretrain_problems:]
    pools = world.sample_pools(problems, cfg.pool_size, seed=2)
    distinct = [len({dedupe_key(s) for s in pool}) for pool in pools]
    assert np.mean([d >= 4 * max(cfg.sizes) for d in distinct]) >= 0.95
