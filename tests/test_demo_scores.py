"""The demo's scores of its test pools: each distinct solution scored once."""

from __future__ import annotations

import pytest

from prmkit.demo import world
from prmkit.demo.core.scores import score_pools
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
