"""prmkit.rewards.credit against hand-computed tables (eps=0 unless said)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prmkit.errors import PrmkitError
from prmkit.rewards.credit import (
    clip_delta_credits,
    min_form,
    mix_verifier,
    outcome_advantages,
    reward_on_last_token,
    rewards_at_step_ends,
    spread_to_tokens,
    step_advantages,
    tokens_per_step,
)

R15 = math.sqrt(1.5)
# One group: steps 0.9, 0.5 | 0.1 -> mean 0.5, population std sqrt(0.32/3), normalised
# (+sqrt(1.5), 0 | -sqrt(1.5)).
GROUP = [[0.9, 0.5], [0.1]]
# min / softmin (PURE): r = 2p - 1 = (0.8, 0.0 | -0.8). min: the worst step keeps its r:
# (0, 0 | -0.8), returns 0 | -0.8; leave-one-out per-step baselines -0.8 | 0 / 2 = 0.
# softmin at T = 1: w = softmax(-r) = (1, e^0.8) / (1 + e^0.8), weighted (S, 0) with
# S = 0.8 / (1 + e^0.8), return S; the other's baseline S / 2.
S = 0.8 / (1 + math.exp(0.8))
TABLE = {
    "process": [[R15 + 0.0, 0.0], [-R15]],
    "min": [[0.0 + 0.8 + 0.0 + 0.8, 0.0 + 0.8], [-0.8 - 0.0]],
    "softmin": [[S + 0.8 + 0.0 + 0.8, 0.0 + 0.8], [-0.8 - S / 2]],
}


def approx_rows(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == pytest.approx(w, abs=1e-9)


@pytest.mark.parametrize("rule", sorted(TABLE))
def test_group_rules_match_the_hand_table(rule):
    got = step_advantages(rule, GROUP, ["q", "q"], eps=0.0, temperature=1.0)
    approx_rows(got, TABLE[rule])


def test_a_null_step_counts_as_zero_reward():
    # (0.8, 0.0): mean 0.4, std 0.4 -> normalised (1, -1)
    approx_rows(step_advantages("process", [[0.8, None]], eps=0.0), [[0.0, -1.0]])
    # min: r = (0.6, -1), the worst keeps its r: (0, -1); alone, its own baseline -0.5 a step
    approx_rows(step_advantages("min", [[0.8, None]], eps=0.0), [[0.0, -0.5]])


@pytest.mark.parametrize("rule", ["process", "min", "softmin"])
def test_one_step_groups_and_all_equal_rewards_give_zero_advantage(rule):
    approx_rows(step_advantages(rule, [[0.7]]), [[0.0]])
    approx_rows(step_advantages(rule, [[0.6, 0.6], [0.6, 0.6]], [0, 0]), [[0.0, 0.0]] * 2)


@pytest.mark.parametrize("rule", ["min", "softmin"])
def test_identical_completions_get_no_min_form_credit(rule):
    # four identical completions (0.9, 0.9, 0.5): before, each step was normalised by the
    # group's mean step reward and then minimised, giving -1.414 on every token
    got = step_advantages(rule, [[0.9, 0.9, 0.5]] * 4, [0] * 4)
    for row in got:
        assert row[0] == pytest.approx(0.0, abs=1e-12)  # the completion's return, centred
        assert np.abs(row).max() < 2e-4  # PURE: each step's share of the baseline
    if rule == "min":
        approx_rows(got, [[0.0, 0.0, 0.0]] * 4)


def test_softmin_temperature_applies_to_pures_2p_minus_1():
    # p = (0.9, 0.5) -> r = (0.8, 0.0): PURE's weights softmax(-r / 0.1) = (0.0003, 0.9997)
    weighted = min_form([0.9, 0.5], temperature=0.1)
    weights = weighted[0] / 0.8
    assert weights == pytest.approx(1 / (1 + math.exp(8)), rel=1e-9)
    assert weights == pytest.approx(0.000335, abs=1e-6)
    assert min_form([0.9, 0.5], temperature=None).tolist() == [0.0, 0.0]  # min: the worst
    assert min_form([0.3, 0.3]).tolist() == pytest.approx([-0.2, -0.2])  # ties share
    assert min_form([0.8, None], temperature=None).tolist() == [0.0, -1.0]  # null: p = 0


def test_min_form_baseline_per_token_uses_the_other_completions_return_per_token():
    # min: returns 0 (A: 0.9, 0.5 over 3 + 1 tokens) | -0.8 (B: 0.1 over 4 tokens).
    # A's baseline: -0.8 / 4 per token -> steps (0 + 0.6, 0 + 0.2): advantages (0.8, 0.2);
    # B's: 0 / 4 -> -0.8.
    got = step_advantages("min", GROUP, [0, 0], baseline="token", tokens_per_step=[[3, 1], [4]])
    approx_rows(got, [[0.8, 0.2], [-0.8]])
    with pytest.raises(PrmkitError, match="needs tokens_per_step"):
        step_advantages("min", GROUP, [0, 0], baseline="token")
    with pytest.raises(PrmkitError, match="choose step or token"):
        step_advantages("min", GROUP, [0, 0], baseline="sequence")
    assert tokens_per_step([[2, 4], [0], []], [7, 3, 2]) == [[3, 4], [3], []]


def test_groups_are_normalised_apart():
    got = step_advantages("process", GROUP + [[0.3, 0.3]], ["q", "q", "r"], eps=0.0)
    approx_rows(got, [*TABLE["process"], [0.0, 0.0]])
    alone = step_advantages("process", GROUP, None, eps=0.0)  # each its own group
    approx_rows(alone, [[0.0, -1.0], [0.0]])  # (0.9, 0.5): normalised (1, -1), summed on


def test_completion_without_steps_gets_no_advantage():
    got = step_advantages("process", [[0.9, 0.1], []], [0, 0], eps=0.0)
    approx_rows(got, [[0.0, -1.0], []])
    tokens = spread_to_tokens(got, [[1, 3], []], [5, 4])
    assert tokens[1].tolist() == [0.0] * 5


def test_softmin_at_low_temperature_keeps_only_the_worst_step():
    group = [[0.9, 0.1, 0.5], [0.7, 0.6]]
    approx_rows(step_advantages("softmin", group, [0, 0], temperature=1e-3),
                step_advantages("min", group, [0, 0]))
    with pytest.raises(PrmkitError, match="temperature"):
        step_advantages("softmin", [[0.5]], temperature=0)


def test_clip_and_delta_match_the_hand_table():
    r = [0.9, 0.3, 0.6]
    assert clip_delta_credits(r, eta=0.5).tolist() == pytest.approx([0.2, -0.2, 0.0])
    assert clip_delta_credits(r, eta=0.5, delta=False).tolist() == pytest.approx([0.0, -0.2, 0.0])
    assert clip_delta_credits(r, clip=False).tolist() == pytest.approx([0.6, -0.3, 0.6])
    approx_rows(step_advantages("clip_delta", [r], eta=0.5), [[0.0, -0.2, 0.0]])
    approx_rows(step_advantages("clip_delta", [r], eta=0.5, delta=False), [[-0.2, -0.2, 0.0]])
    approx_rows(step_advantages("clip_delta", [r], clip=False), [[0.9, 0.3, 0.6]])


def test_repeating_correct_steps_earns_nothing_under_clip_delta():
    short = step_advantages("clip_delta", [[0.95, 0.9]], eta=0.5)[0]
    padded = step_advantages("clip_delta", [[0.95] * 20 + [0.9]], eta=0.5)[0]
    assert short[0] == padded[0] == 0.0
    summed = step_advantages("clip_delta", [[0.95] * 20 + [0.9]], clip=False, delta=False)[0]
    assert summed[0] == pytest.approx(19.9)  # what plain summation would pay instead


def test_outcome_normalises_scores_per_group_and_skips_null_scores():
    adv = outcome_advantages([0.2, 0.6, None, 1.0], ["a", "a", "a", "b"], eps=0.0)
    assert adv.tolist() == pytest.approx([-1.0, 1.0, 0.0, 0.0])
    got = step_advantages("outcome", [[0.2, 0.1], [0.6]], [0, 0], scores=[0.2, 0.6], eps=0.0)
    approx_rows(got, [[-1.0, -1.0], [1.0]])
    with pytest.raises(PrmkitError, match="one score per completion"):
        step_advantages("outcome", [[0.2]])


def test_mix_verifier_adds_the_weighted_normalised_verifiable_reward():
    got = mix_verifier([np.zeros(2), np.zeros(1), np.ones(1)], [1.0, 0.0, None], [0, 0, 0],
                       weight=0.5, eps=0.0)
    approx_rows(got, [[0.5, 0.5], [-0.5], [1.0]])


def test_spread_to_tokens_fills_each_step_and_gives_the_tail_to_the_last_step():
    out = spread_to_tokens([np.array([1.0, 2.0])], [[2, 4]], [7], width=8)
    assert out.tolist() == [[1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 0.0]]
    with pytest.raises(PrmkitError, match="no policy token end"):
        spread_to_tokens([np.array([1.0])], [[None]], [3])


def test_step_rewards_sit_on_their_end_tokens_and_the_outcome_on_the_last():
    out = rewards_at_step_ends([[0.5, 0.7], [None], []], [[2, 4], [0], []], [7, 3, 2], width=7)
    assert out[0].tolist() == [0, 0, 0.5, 0, 0, 0, 0.7]
    assert out[1].tolist() == [0, 0, 0.0, 0, 0, 0, 0]
    assert out[2].tolist() == [0.0] * 7
    last = reward_on_last_token([0.3, None], [2, 4], width=5, null=-1.0)
    assert last.tolist() == [[0, 0.3, 0, 0, 0], [0, 0, 0, -1.0, 0]]


def test_unknown_rule_names_the_choices():
    with pytest.raises(PrmkitError, match="process, min"):
        step_advantages("sum", [[0.5]])
