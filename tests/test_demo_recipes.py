"""The demo's recipes from the command line on quick settings, the one cache rule for a
seed's models, and checked pools through the library's build_pools."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prmkit.cli import main
from prmkit.demo import world
from prmkit.demo.core import seed as seed_mod
from prmkit.demo.core.config import quick_config
from prmkit.demo.core.scores import checked_pools
from prmkit.search import RescoringScorer


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory):
    """diagnose, search, ood-shifts and base-skill on quick settings in one folder, with the seeds
    whose models were trained (not read back)."""
    out = tmp_path_factory.mktemp("recipes")
    trained = []
    real = seed_mod.train_seed_models

    def counted(seed, cfg, sw, folder):
        trained.append(seed)
        return real(seed, cfg, sw, folder)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(seed_mod, "train_seed_models", counted)
        for name in ("diagnose", "search", "ood-shifts", "base-skill"):
            argv = ["demo", "--experiment", name, "--quick", "--seeds", "0", "--out", str(out),
                    "--no-progress"]
            assert main(argv) == 0, name
    return out, trained


def test_diagnose_search_and_base_skill_run_quick_from_the_cli(quick_runs):
    out, _ = quick_runs
    diagnosis = json.loads((out / "diagnose" / "diagnosis-seed0.json").read_text())
    assert set(diagnosis["curves"]) >= {"PRM min", "ORM", "majority", "pass", "true steps"}
    assert all(0 <= v <= 1 for curve in diagnosis["curves"].values() for v in curve)
    lost = diagnosis["lost_problems"]
    assert lost["count"] == len(lost["problems"]) == sum(lost["why"].values())
    search = json.loads((out / "search" / "search_world.json").read_text())
    assert set(search) == {"best_of_n", "weighted_best_of_n", "majority_vote", "pass@n",
                           "beam_search", "dvts", "meta"}
    assert search["best_of_n"]["n"] == [4] and search["beam_search"]["n"] == [2]
    assert (out / "search" / "search_world.png").stat().st_size > 0
    skill = json.loads((out / "base_skill.json").read_text())
    assert 0 <= skill["skill"]["all"]["exact"] <= 1 and skill["skill"]["all"]["steps"] > 0


def test_ood_shifts_report_every_set_and_read_the_demo_s_own_out_of_distribution_scores(
        quick_runs):
    out, _ = quick_runs
    result = json.loads((out / "ood_shifts" / "ood_shifts.json").read_text())
    assert list(result["sets"]) == list(world.SHIFTS) and result["n"] == [1, 2, 4, 8]
    for summary in result["sets"].values():
        for curve in ("prm", "orm", "majority", "pass"):
            assert len(summary[curve]) == 4 and all(0 <= v <= 1 for v in summary[curve])
        assert set(summary["base_step_auroc"]) == {"slip", "miscopy", "skip", "trap", "cancel"}
    assert result["sets"]["all"]["rule"] == world.OOD_RULE
    folder = seed_mod.models_folder(0, quick_config((0,)), out / "work")
    # "all" is the demo's set: its scores are the demo's cache; the others have their own
    assert (folder / "prm_ood_scores.json").is_file()
    assert len(list(folder.glob("prm_ood-length-*_scores.json"))) == 1
    assert not list(folder.glob("prm_ood-all*"))


def test_experiments_read_a_seeds_models_trained_by_another(quick_runs):
    _, trained = quick_runs
    assert trained == [0]  # diagnose trained seed 0's models, the others read them back


def test_search_scores_a_prm_that_reads_the_base_surprise_by_full_forwards(quick_runs):
    # A cached prefix does not keep the backbone's surprise: the search used to stop there.
    from prmkit.demo.recipes.search import step_scorer

    out, _ = quick_runs
    models = seed_mod.seed_models(0, quick_config((0,)), out / "work")
    assert quick_config().surprise_window > 0
    assert isinstance(step_scorer(models.prm_dir), RescoringScorer)


def test_models_folder_without_its_record_is_trained_again(quick_runs, monkeypatch):
    out, _ = quick_runs
    cfg = quick_config((0,))
    folder = seed_mod.models_folder(0, cfg, out / "work")
    kept = json.loads((folder / seed_mod.DONE).read_text())
    (folder / seed_mod.DONE).unlink()  # as a run stopped mid-training leaves it
    (folder / "prm" / "partial").write_text("")
    calls = []
    monkeypatch.setattr(seed_mod, "train_seed_models",
                        lambda *a: calls.append(a[0]) or seed_mod.SeedModels(a[3], [1, 2], {}))
    models = seed_mod.seed_models(0, cfg, out / "work")
    assert calls == [0] and not (folder / "prm").exists()  # trained from scratch
    assert models.lm_losses == [1, 2] and kept["lm_loss"] != [1, 2]


def test_checked_pools_keep_the_slots_of_unanswered_solutions_and_aggregate_step_scores():
    prob = world.make_problems(1, seed=0)[0]
    right = prob.reference_solution()
    wrong = right[:-1] + [f"Answer: {int(prob.answer) + 1}"]
    unanswered = right[:-1]
    scores = [[[0.9] * len(right), [0.95] * (len(wrong) - 1) + [0.1], [1.0] * len(unanswered)]]
    (pool,) = checked_pools([prob], [[right, wrong, unanswered]], scores, "min")
    assert pool.n_slots == 3 and pool.problem_id == prob.id
    assert pool.correct.tolist() == [True, False]
    assert np.allclose(pool.scores, [0.9, 0.1])  # the min of each answered one's steps
    (last,) = checked_pools([prob], [[right, wrong, unanswered]], scores, "last")
    assert np.allclose(last.scores, [0.9, 0.1]) and last.clusters is None


def test_diagnose_says_why_a_wrong_pick_beat_every_right_solution():
    # regression: seed 2's "Solve 3x + 11 = 2x + 20", whose miscopied coefficient won at
    # N = 256; and a pick that won because every right solution had a doubted step
    from test_demo_error_kinds import TWO_SIDED, TWO_SIDED_MISCOPY

    from prmkit.demo.recipes.diagnose import lost_problems
    from prmkit.demo.world import check_solution

    eq = TWO_SIDED
    right = ["20 - 11 = 9", "3 - 2 = 1", "9 / 1 = 9", "Answer: 9"]  # the other valid order
    miscopy = TWO_SIDED_MISCOPY
    no_answer = ["20 - 11 = 9"]
    pools = [[right, miscopy, no_answer], [right, miscopy], [right, miscopy]]
    step_scores = [[[0.88, 0.94, 0.85, 1.0], [0.9, 0.94, 0.9, 1.0], [0.99]],  # missed
                   [[0.88, 0.94, 0.3, 1.0], [0.4, 0.94, 0.9, 1.0]],  # doubted
                   [[0.9, 0.9, 0.9, 1.0], [0.1, 0.9, 0.9, 1.0]]]  # the right one wins
    checks = [[check_solution(eq, s) for s in pool] for pool in pools]
    answered = [[0, 1], [0, 1], [0, 1]]  # the unanswered solution is never picked
    pool_scores = [[min(s) for s in sc[:2]] for sc in step_scores]
    lost = lost_problems([eq] * 3, pools, checks, step_scores, pool_scores, answered)
    assert lost["count"] == 2
    assert [e["why"] for e in lost["problems"]] == ["missed", "doubted"]
    assert lost["why"] == {"missed": 1, "doubted": 1, "both": 0, "neither": 0}
    assert lost["pick_errors"] == {"miscopy": 2}
    first = lost["problems"][0]
    assert first["pick"]["steps"] == miscopy and first["best_right"]["steps"] == right
    assert first["pick"]["scores"][0] == 0.9
