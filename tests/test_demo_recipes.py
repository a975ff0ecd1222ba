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
    """diagnose, search and base-skill on quick settings in one folder, with the seeds
    whose models were trained (not read back)."""
    out = tmp_path_factory.mktemp("recipes")
    trained = []
    real = seed_mod.train_seed_models

    def counted(seed, cfg, sw, folder):
        trained.append(seed)
        return real(seed, cfg, sw, folder)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(seed_mod, "train_seed_models", counted)
        for name in ("diagnose", "search", "base-skill"):
            argv = ["demo", "--experiment", name, "--quick", "--seeds", "0", "--out", str(out),
                    "--no-progress"]
            assert main(argv) == 0, name
    return out, trained


def test_diagnose_search_and_base_skill_run_quick_from_the_cli(quick_runs):
    out, _ = quick_runs
    diagnosis = json.loads((out / "diagnose" / "diagnosis-seed0.json").read_text())
    assert set(diagnosis["curves"]) >= {"PRM min", "ORM", "majority", "pass", "true steps"}
    assert all(0 <= v <= 1 for curve in diagnosis["curves"].values() for v in curve)
    search = json.loads((out / "search" / "search_world.json").read_text())
    assert set(search) == {"best_of_n", "weighted_best_of_n", "majority_vote", "pass@n",
                           "beam_search", "dvts", "meta"}
    assert search["best_of_n"]["n"] == [4] and search["beam_search"]["n"] == [2]
    assert (out / "search" / "search_world.png").stat().st_size > 0
    skill = json.loads((out / "base_skill.json").read_text())
    assert 0 <= skill["skill"]["all"]["exact"] <= 1 and skill["skill"]["all"]["steps"] > 0


def test_experiments_read_a_seeds_models_trained_by_another(quick_runs):
    _, trained = quick_runs
    assert trained == [0]  # diagnose trained seed 0's models, search read them back


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
