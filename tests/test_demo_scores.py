"""The demo's scores of its test pools: each distinct solution scored once."""

from __future__ import annotations

import io
import json

import pytest

from prmkit.demo import world
from prmkit.demo.core import scores as demo_scores
from prmkit.demo.core.scores import cached_scores, score_pools
from prmkit.models.backbones import tiny_random
from prmkit.models.config import RewardModelConfig
from prmkit.models.formatting import StepFormat
from prmkit.models.reward_model import StepRewardModel
from prmkit.scoring import Scorer


@pytest.fixture(scope="module")
def tiny_prm(tmp_path_factory):
    backbone, tok = tiny_random(seed=0)
    fmt = StepFormat(step_separator="\n", prompt_template="{problem}\n", max_length=512)
    model = StepRewardModel.from_backbone(backbone, tok, RewardModelConfig(step_format=fmt))
    folder = tmp_path_factory.mktemp("prm")
    model.save_pretrained(folder)
    return folder


def test_scores_of_distinct_solutions_fan_out_to_repeats_as_scoring_every_sample(
        tiny_prm, monkeypatch):
    problems = world.make_problems(3, seed=0)
    pools = world.sample_pools(problems, 16, seed=0)
    flat = [(p.text, sol) for p, pool in zip(problems, pools) for sol in pool]
    distinct = {(text, tuple(sol)) for text, sol in flat}
    assert len(distinct) < len(flat)  # the pools repeat solutions
    full = Scorer.from_pretrained(tiny_prm, dtype=None).score(flat)
    assert len({p for steps in full for p in steps}) > 10  # scores that tell solutions apart

    scored = []
    iter_scores = Scorer.iter_scores
    monkeypatch.setattr(Scorer, "iter_scores", lambda self, items, **kw: scored.append(
        len(items)) or iter_scores(self, items, **kw))
    deduped = score_pools(tiny_prm, pools, problems, progress=False)
    assert scored == [len(distinct)]
    # score_pools runs each problem's prompt once (shared prefixes): same scores to float error
    fanned = [s for pool in deduped for s in pool]
    assert len(fanned) == len(full)
    for got, want in zip(fanned, full):
        assert got == pytest.approx(want, abs=1e-6)
    assert [len(s) for s in deduped] == [16] * 3


class HalfThenInterrupt:
    """A file whose first write puts half its text on disk, then stops as Ctrl-C would."""

    def __init__(self, file):
        self.file = file

    def write(self, text):
        self.file.write(text[: len(text) // 2])
        self.file.flush()
        raise KeyboardInterrupt

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def __getattr__(self, name):
        return getattr(self.file, name)


def test_interrupted_score_cache_write_leaves_no_truncated_file(tiny_prm, monkeypatch):
    problems = world.make_problems(2, seed=0)
    pools = world.sample_pools(problems, 4, seed=0)
    folder = tiny_prm.parent / "score_cache"
    path = folder / "test_scores.json"
    real_open, real_score_pools, runs = io.open, score_pools, []

    def open_interrupted(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        return HalfThenInterrupt(f) if set(mode) & set("wax+") else f

    def scored_then_stopped(*args, **kwargs):
        runs.append(1)
        scores = real_score_pools(*args, **kwargs)
        if len(runs) == 1:  # stop the first run's cache write midway
            monkeypatch.setattr(io, "open", open_interrupted)
        return scores

    monkeypatch.setattr(demo_scores, "score_pools", scored_then_stopped)
    with pytest.raises(KeyboardInterrupt):
        cached_scores(path, tiny_prm, pools, problems)
    monkeypatch.setattr(io, "open", real_open)
    assert len(runs) == 1
    assert not path.exists()
    assert list(folder.iterdir()) == []  # no temporary file left either

    scores = cached_scores(path, tiny_prm, pools, problems)  # the rerun scores again
    assert len(runs) == 2
    assert json.loads(path.read_text()) == scores
    assert [len(pool) for pool in scores] == [4, 4]
    assert cached_scores(path, tiny_prm, pools, problems) == scores  # now read, not scored
    assert len(runs) == 2
