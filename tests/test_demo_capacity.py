import json

import pytest

from prmkit.cli import main
from prmkit.demo.lm import base as base_mod
from prmkit.demo.recipes import capacity as capacity_mod
from prmkit.evaluation.plots import read_axes


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """Counts of base pretraining runs and of demo seeds run (not read from the cache)."""
    monkeypatch.setenv("PRMKIT_CACHE", str(tmp_path / "cache"))
    calls = {"pretrain": [], "seed": []}
    real_pretrain, real_seed = base_mod.pretrain_lm, capacity_mod.run_seed

    def pretrain(*args, **kwargs):
        calls["pretrain"].append(kwargs["steps"])
        return real_pretrain(*args, **kwargs)

    def seed(s, cfg, work):
        calls["seed"].append((cfg.base, s))
        return real_seed(s, cfg, work)

    monkeypatch.setattr(base_mod, "pretrain_lm", pretrain)
    monkeypatch.setattr(capacity_mod, "run_seed", seed)
    return calls


def test_capacity_resumes_from_its_cache_and_plots_best_of_n_against_base_steps(counted, tmp_path):
    out = tmp_path / "out"
    argv = ["demo", "--experiment", "capacity", "--quick", "--seeds", "0", "--out", str(out),
            "--no-progress"]
    assert main(argv) == 0
    assert sorted(counted["pretrain"]) == [0, 3]  # budgets 0 and 1 x 3 steps
    assert len(counted["seed"]) == 2
    result = json.loads((out / "capacity" / "capacity.json").read_text())
    points = result["points"]
    assert [p["steps"] for p in points] == [0, 3] and result["n"] == 8
    for p in points:
        assert 0 <= p["skill"] <= 1 and set(p["skill_per_op"]) == {"+", "-", "*", "/"}
        assert 0 <= p["prm"] <= 1 and 0 <= p["orm"] <= 1 and 0 <= p["majority"] <= 1
        assert set(p["error_kinds"]) >= {"slip", "miscopy", "skip", "trap", "cancel"}
        assert "prm_step_auroc" in p["error_kinds"]["slip"]
        assert [r["seed"] for r in p["per_seed"]] == [0]
    assert points[0]["base_key"] != points[1]["base_key"]

    (axes,) = read_axes(out / "capacity" / "capacity.png")
    assert axes["xlabel"] == "base pretraining steps on MathMix"
    assert axes["ylabel"] == "% problems solved, best-of-8"
    assert axes["legend"] == ["PRM (process supervision)", "ORM (outcome supervision)",
                              "majority vote"]
    prm = axes["lines"][0]
    assert prm["x"] == [0.0, 3.0]
    assert prm["y"] == pytest.approx([100 * p["prm"] for p in points])
    assert any(t.startswith("skill ") and "slip" in t for t in axes["texts"])

    # a second run recomputes nothing: no base pretrained, no seed run, same figures
    (out / "capacity" / "capacity.json").unlink()
    assert main(argv) == 0
    assert sorted(counted["pretrain"]) == [0, 3] and len(counted["seed"]) == 2
    again = json.loads((out / "capacity" / "capacity.json").read_text())
    assert [(p["prm"], p["orm"], p["skill"]) for p in again["points"]] == \
        [(p["prm"], p["orm"], p["skill"]) for p in points]
