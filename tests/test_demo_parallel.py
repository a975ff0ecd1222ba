"""The demo's seeds in processes of their own: the same figures as one after another."""

from __future__ import annotations

import json

import pytest

from prmkit.cli import main
from prmkit.demo.core import parallel
from prmkit.demo.core.config import DemoConfig
from prmkit.errors import PrmkitError


def _figures(value):
    """metrics.json without what says how long or how the run went."""
    if isinstance(value, dict):
        return {k: _figures(v) for k, v in value.items()
                if k not in ("seconds", "workers", "progress")}
    if isinstance(value, list):
        return [_figures(v) for v in value]
    return value


def test_quick_demo_in_two_processes_gives_the_figures_of_one_process(tmp_path, capsys):
    """...and the parent prints each seed's stages as they run (not a bar of finished
    seeds): a line when each starts and ends, with the run's time and, from the stages'
    shares, an estimate of what remains."""
    metrics = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        quiet = ["--no-progress"] if workers == 1 else []
        assert main(["demo", "--quick", "--seeds", "0,1", *quiet, "--out", str(out),
                     "--set", f"workers={workers}"]) == 0
        metrics[workers] = json.loads((out / "metrics.json").read_text())
        if workers == 1:  # --no-progress: no stage lines
            assert "PRM training" not in capsys.readouterr().out
    printed = capsys.readouterr().out
    assert "seeds 0, 1: 2 processes" in printed
    for seed in (0, 1):
        for stage in ("world", "PRM training", "ORM training", "scoring test (PRM)",
                      "scoring ood (ORM)", "evaluation"):
            assert f"[demo] seed {seed}: {stage} done in" in printed, (seed, stage)
        assert f"[demo] seed {seed}: PRM training started (5 steps)" in printed
    assert "left]" in printed  # the run's estimate once both seeds report
    assert "model saved to" in (tmp_path / "w2" / "work" / "seed1" / "output.log").read_text()
    assert metrics[2]["config"]["workers"] == 2 and metrics[2]["seconds"] > 0
    assert [r["seed"] for r in metrics[2]["per_seed"]] == [0, 1]
    assert _figures(metrics[2]) == _figures(metrics[1])


@pytest.mark.parametrize("threads, workers, seeds, expected", [
    (1, 0, (0, 1, 2), 3),  # up to twice the cores: every seed at once (1.5 seed-times, not 2)
    (1, 0, (0, 1, 2, 3, 4), 2),  # more: one process per core
    (2, 0, (0, 1, 2), 1),  # one seed's threads fill the cores: one after another
    (1, 0, (0, 0), 1),  # a repeated seed runs once
    (1, 5, (0, 1, 2), 3),  # no more processes than seeds
    (1, 1, (0, 1, 2), 1),
])
def test_seed_workers_fill_the_cores_at_the_threads_of_each(monkeypatch, threads, workers,
                                                            seeds, expected):
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    cfg = DemoConfig(seeds=seeds, threads=threads, workers=workers)
    assert parallel.seed_workers(cfg) == expected


def test_negative_workers_are_refused():
    with pytest.raises(PrmkitError, match="workers must be 0"):
        parallel.seed_workers(DemoConfig(workers=-1))


@pytest.mark.parametrize("experiment, results, line", [
    ("active", "active/metrics.json", "[active] seed 1"),  # the small-scale experiments'
    ("search", "search/search_world.json", "model saved to"),
    ("diagnose", "diagnose/diagnosis-seed1.json", "model saved to"),
])
def test_quick_experiments_in_two_processes_give_the_figures_of_one_process(
        tmp_path, experiment, results, line):
    """Experiments other than the demo run their seeds as it does: the same figures."""
    figures = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        assert main(["demo", "--experiment", experiment, "--quick", "--seeds", "0,1",
                     "--no-progress", "--out", str(out), "--set", f"workers={workers}"]) == 0
        figures[workers] = _figures(json.loads((out / results).read_text()))
    assert line in (tmp_path / "w2" / "work" / "seed1" / "output.log").read_text()
    assert figures[2] == figures[1]


def test_stage_lines_estimate_what_remains_of_the_run(monkeypatch):
    """Two seeds at once: each seed's part done from the stages' shares, the run's remainder
    the slowest seed's; a stage's own remainder from its rate."""
    from prmkit.demo.core import stages

    clock = [100.0]
    monkeypatch.setattr(stages.time, "monotonic", lambda: clock[0])
    lines = stages.StageLines([0, 1], {"a": 0.5, "b": 0.5}, workers=2, started=100.0)
    clock[0] = 110.0
    # seed 1 has not reported: its whole time taken as seed 0's (20 s)
    assert lines.line({"seed": 0, "stage": "a", "event": "end", "elapsed": 10.0}) == (
        "[demo] seed 0: a done in 10s [run 10s elapsed, about 20s left]")
    clock[0] = 120.0
    text = lines.line({"seed": 1, "stage": "a", "event": "progress", "done": 1, "total": 4,
                       "unit": "steps", "elapsed": 20.0})
    # seed 1: a quarter of its first half in 20 s: 160 s in all, 140 s left; seed 0: half
    # in 20 s (10 s of it in stage a, started at 100), 20 s left
    assert text == ("[demo] seed 1: a: 1/4 steps, 20s elapsed, about 1m00s left "
                    "[run 20s elapsed, about 2m20s left]")
