"""The hard set: the test problems with a generator that rarely solves some of them
(`prmkit.demo.world.hard`), and how the demo reads Figure 3 on it (`core.hard`)."""

import numpy as np
import pytest

from prmkit.demo import world
from prmkit.demo.core.hard import fall_past_peak, hard_table, summarise_hard
from prmkit.demo.world.hard import READ_RIGHT
from prmkit.demo.world.problems import TRAP_RATE
from prmkit.errors import PrmkitError

PROBLEMS = world.make_problems(200, seed=0, difficulty="easy")


def test_a_share_of_the_problems_with_a_trap_is_read_right_1_in_10_to_1_in_300():
    hard = world.hard_problems(PROBLEMS, 0.2, seed=0)
    made = [h for h, p in zip(hard, PROBLEMS) if h is not p]
    assert made and all(map(world.is_hard, made))
    assert all(p.trap is not None for p in made)
    assert 0.1 < len(made) / sum(p.trap is not None for p in PROBLEMS) < 0.3
    for h, p in zip(hard, PROBLEMS):
        if h is p:
            assert not world.is_hard(h)  # the world's own rates stay below a hard one's
            continue
        assert READ_RIGHT[0] <= 1 - h.propensity.trap <= READ_RIGHT[1]
        assert (h.id, h.text, h.answer, h.trap) == (p.id, p.text, p.answer, p.trap)
        assert h.propensity.slip == p.propensity.slip  # only the trap's rate changes
    assert TRAP_RATE[1] < 1 - READ_RIGHT[1]


def test_the_hard_set_is_deterministic_and_each_problems_draw_its_own():
    a = world.hard_problems(PROBLEMS, 0.2, seed=0)
    assert [p.propensity for p in a] == [p.propensity for p in world.hard_problems(PROBLEMS, 0.2, 0)]
    assert [p.propensity for p in world.hard_problems(PROBLEMS[50:], 0.2, 0)] == \
        [p.propensity for p in a[50:]]  # by (seed, problem id), not by position
    assert [p.propensity for p in world.hard_problems(PROBLEMS, 0.2, 1)] != \
        [p.propensity for p in a]
    assert all(h is p for h, p in zip(world.hard_problems(PROBLEMS, 0.0, 0), PROBLEMS))
    with pytest.raises(PrmkitError, match="hard_share must lie"):
        world.hard_problems(PROBLEMS, 1.5)


def test_hard_problems_leave_right_answers_for_large_pools_to_find():
    hard = [h for h, p in zip(world.hard_problems(PROBLEMS, 1.0, seed=0), PROBLEMS) if h is not p]
    pools = world.sample_pools(hard[:40], 256, seed=1)
    right = np.array([[world.check_solution(p, s).final_correct for s in pool]
                      for p, pool in zip(hard[:40], pools)])
    first16, all256 = right[:, :16].any(1).mean(), right.any(1).mean()
    assert first16 < 0.6 and all256 - first16 > 0.2  # the sampler alone, no model
    easy = world.sample_pools(PROBLEMS[:40], 16, seed=1)
    assert np.mean([any(world.check_solution(p, s).final_correct for s in pool)
                    for p, pool in zip(PROBLEMS[:40], easy)]) > 0.95


def test_the_demo_samples_only_the_hard_problems_pools_anew(tmp_path):
    from dataclasses import replace

    from prmkit.demo.core.config import quick_config
    from prmkit.demo.core.seed import seed_world

    sw = seed_world(0, replace(quick_config((0,)), test_problems=40))
    assert len(sw.hard) == len(sw.splits.test) == len(sw.hard_pools)
    changed = [i for i, (h, p) in enumerate(zip(sw.hard, sw.splits.test)) if h is not p]
    assert changed and len(changed) < len(sw.hard)
    for i, (pool, test_pool) in enumerate(zip(sw.hard_pools, sw.test_pools)):
        assert (pool == test_pool) == (i not in changed)
    none = seed_world(0, replace(quick_config((0,)), hard_share=0.0))
    assert none.hard == [] and none.hard_pools == []


def _curves(prm, prm_std, n=(1, 4, 16, 64, 256)):
    return {"n": list(n), "prm": prm, "prm_std": prm_std}


def test_fall_past_peak_reads_figure_3_as_the_issue_does():
    fell = fall_past_peak(_curves([0.5, 0.9, 0.995, 0.987, 0.964], [0, 0, 0.001, 0.004, 0.011]))
    assert fell["peak_n"] == 16 and fell["fall"] == pytest.approx(0.031)
    assert not fell["within_std"]
    held = fall_past_peak(_curves([0.5, 0.9, 0.995, 0.99, 0.99], [0, 0, 0.001, 0.004, 0.006]))
    assert held["within_std"] and held["last_std"] == 0.006
    rose = fall_past_peak(_curves([0.4, 0.7, 0.8, 0.85, 0.9], [0.01] * 5))
    assert rose["fall"] == 0 and rose["peak_n"] == rose["last_n"] == 256


def test_summarise_hard_averages_seeds_and_tables_every_n():
    rows = [{"hard": {"prm": [0.4, 0.8], "orm": [0.4, 0.5], "majority": [0.4, 0.4],
                      "pass": [0.4, 0.9], "step_auroc": a, "hard_problems": k}}
            for a, k in ((0.9, 20), (0.8, 25))]
    rows[1]["hard"]["prm"] = [0.4, 0.6]
    hard = summarise_hard(rows, [1, 2])
    assert hard["prm"] == pytest.approx([0.4, 0.7]) and hard["prm_std"][1] == pytest.approx(0.1)
    assert hard["hard_problems"] == [20, 25] and hard["step_auroc"] == pytest.approx(0.85)
    assert hard["rule"] == world.HARD_RULE
    table = hard_table(hard)
    assert table["columns"] == ["N", "PRM", "ORM", "majority vote", "pass@N"]
    assert table["rows"][1] == [2, "70.0 ± 10.0", "50.0 ± 0.0", "40.0 ± 0.0", "90.0 ± 0.0"]
    assert summarise_hard([{"seed": 0}], [1, 2]) is None
