"""prmkit.rewards.diagnostics: the per-batch hacking signals, by hand."""

from __future__ import annotations

import math

import pytest

from prmkit.rewards.contract import CompletionRewards, StepReward
from prmkit.rewards.diagnostics import batch_diagnostics, verifier_rewards


def completion(*probs, score):
    return CompletionRewards([StepReward(p, 0, 1) for p in probs], score)


def test_batch_diagnostics_by_hand():
    batch = [completion(0.9, 0.8, score=0.72), completion(0.2, None, score=0.0),
             completion(score=None), completion(0.95, score=0.95)]
    d = batch_diagnostics(batch, token_lengths=[10, 6, 3, 4], verifier=[1.0, 0.0, 1.0, 0.0])
    assert d["steps_per_completion"] == pytest.approx(5 / 4)
    assert d["max_steps"] == 2
    assert d["no_step_fraction"] == pytest.approx(1 / 4)
    assert d["null_step_fraction"] == pytest.approx(1 / 5)
    assert d["tokens_per_step"] == pytest.approx((5 + 3 + 4) / 3)
    assert d["prm_score"] == pytest.approx((0.72 + 0.0 + 0.95) / 3)
    # graded pairs: (0.72, right) agree, (0.0, wrong) agree, (0.95, wrong) disagree
    assert d["prm_verifier_agreement"] == pytest.approx(2 / 3)
    assert d["prm_score_when_wrong"] == pytest.approx(0.475)
    assert d["prm_score_when_right"] == pytest.approx(0.72)


def test_figures_without_data_are_nan_not_errors():
    d = batch_diagnostics([completion(score=None)], verifier=[None])
    assert d["steps_per_completion"] == 0 and d["no_step_fraction"] == 1.0
    assert math.isnan(d["prm_score"]) and math.isnan(d["prm_verifier_agreement"])


def test_verifier_rewards_grade_against_the_gold_answer():
    got = verifier_rewards(["So x = 4.\n\n# Answer\n\n4", "The answer is 5.", None, "x"],
                           ["4", "4", "4", None])
    assert got == [1.0, 0.0, None, None]
