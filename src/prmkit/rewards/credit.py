"""Credit assignment: pure functions from step rewards to step- and token-level credit.

Every rule works in two stages, so that the arithmetic can be checked by hand:

1. step advantages: one value per step of every completion (`step_advantages`), from the
   step rewards of a group (the G completions of one prompt);
2. placement on policy tokens (`spread_to_tokens`): a token gets the advantage of the step it
   belongs to (the first step ending at or after it; tokens after the last step's end, such
   as the EOS, belong to the last step); `rewards_at_step_ends` instead puts each step's
   reward on its end token (token-level rewards for GAE) and `reward_on_last_token` puts one
   scalar on the last token (outcome reward).

Rules (a null step, cut by the PRM's max_length, counts as NULL_STEP_SCORE, prmkit's null
rule; a completion without steps gets no process credit: all its tokens get 0):

- ``process`` (DeepSeekMath §4.1.3): every step reward of a group is normalised by the mean
  and standard deviation (population) of all the group's step rewards; a step's advantage
  is the sum of the normalised rewards of the steps from it to the end.
- ``min`` and ``softmin`` (PURE, arXiv 2504.15275, as PURE's code computes them): a step's
  reward is r = 2p - 1 (PURE's P(correct) - P(wrong)); ``softmin`` weights each step's r by
  softmax(-r / temperature) over the completion's steps (PURE's T = 0.1, on r) and ``min``
  is its limit T -> 0 (all the weight on the worst step; tied worst steps share it), so
  the weighted rewards of a completion sum to its min-form return R. The baseline is
  RLOO's, from the other completions of the group: ``baseline="step"`` (PURE's default)
  takes their mean return per step, ``"token"`` (PURE's runs) their return per policy
  token times the step's tokens (`tokens_per_step`); each step's weighted reward less its
  baseline, summed from the step to the end, is its advantage. A completion alone in its
  group is its own baseline; identical completions get 0 at their first step.
- ``clip_delta`` (arXiv 2410.15115): Clip: c = min(r - eta, 0); Delta: c_k = r_k - r_{k+1}
  (the last step keeps c_n = r_n); both by default. A step's advantage is the sum of c from
  it to the end, bounded above (by 0 with Clip; by the step's own reward with Delta), so
  repeating correct but useless steps earns nothing. With Delta the credits telescope: a
  step's sum is its own clipped reward, and a completion's total is its first step's, so
  the rule needs per-token returns (GAE, REINFORCE++) or per-step advantages as here, never
  an advantage from the row sum (GRPO, RLOO).
- ``outcome``: the completion's score (prmkit's aggregation) group-normalised, every step
  of the completion getting it (GRPO's outcome supervision).

`mix_verifier` adds a group-normalised verifiable reward (prmkit's grader against the gold
answer) at a weight to every step of a completion.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

import numpy as np

from prmkit.errors import PrmkitError
from prmkit.scoring.aggregate import fill_null_steps

Steps = Sequence[float | None]


class Credit(StrEnum):
    OUTCOME = "outcome"
    PROCESS = "process"
    MIN = "min"
    SOFTMIN = "softmin"
    CLIP_DELTA = "clip_delta"


CREDITS = tuple(c.value for c in Credit)
DEFAULT_EPS = 1e-4  # added to the group standard deviation, as in GRPO


def credit_rule(rule: str | Credit) -> Credit:
    try:
        return Credit(rule)
    except ValueError:
        raise PrmkitError(f"unknown credit rule {rule!r}; choose one of {', '.join(CREDITS)}") from None


def group_normalise(values: Sequence[float], eps: float = DEFAULT_EPS) -> np.ndarray:
    """(v - mean) / (std + eps), population std; all-equal values (or one value) give 0."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return v
    centred = v - v.mean()
    std = v.std()
    if std == 0.0:
        return np.zeros_like(v)
    return centred / (std + eps)


def _groups(n: int, group_ids: Sequence | None) -> list[list[int]]:
    ids = list(range(n)) if group_ids is None else list(group_ids)
    if len(ids) != n:
        raise PrmkitError(f"{len(ids)} group ids for {n} completions")
    out: dict = {}
    for i, g in enumerate(ids):
        out.setdefault(g, []).append(i)
    return list(out.values())


def _normalised_steps(rewards: Sequence[Steps], group_ids, eps) -> list[np.ndarray]:
    """Each group's step rewards normalised by the mean and std over all its steps."""
    filled = [np.asarray(fill_null_steps(r), dtype=np.float64) for r in rewards]
    out: list[np.ndarray] = [np.zeros(0)] * len(filled)
    for members in _groups(len(filled), group_ids):
        flat = np.concatenate([filled[i] for i in members]) if members else np.zeros(0)
        norm = group_normalise(flat, eps)
        at = 0
        for i in members:
            out[i] = norm[at: at + len(filled[i])]
            at += len(filled[i])
    return out


def _suffix(values: np.ndarray, op) -> np.ndarray:
    return op.accumulate(values[::-1])[::-1] if values.size else values


def clip_delta_credits(rewards: Steps, *, eta: float = 0.5, clip: bool = True,
                       delta: bool = True) -> np.ndarray:
    """Per-step credits of Clip and/or Delta (see the module docstring)."""
    c = np.asarray(fill_null_steps(rewards), dtype=np.float64)
    if clip:
        c = np.minimum(c - eta, 0.0)
    if delta and c.size:
        c = np.append(c[:-1] - c[1:], c[-1])
    return c


def step_advantages(rule: str | Credit, rewards: Sequence[Steps], group_ids=None, *,
                    scores: Sequence[float | None] | None = None, eps: float = DEFAULT_EPS,
                    temperature: float = 0.1, eta: float = 0.5, clip: bool = True,
                    delta: bool = True, baseline: str = "step",
                    tokens_per_step: Sequence[Sequence[int]] | None = None) -> list[np.ndarray]:
    """One advantage per step of every completion under `rule`.

    rewards[i]: the step probabilities of completion i (None: null step). group_ids[i]:
    the prompt completion i answers (None: each completion its own group). scores: the
    completions' aggregated scores, for ``outcome`` (None: no gradable step, advantage 0).
    baseline, tokens_per_step: ``min`` and ``softmin`` only (see the module docstring).
    """
    rule = credit_rule(rule)
    if rule is Credit.OUTCOME:
        if scores is None or len(scores) != len(rewards):
            raise PrmkitError("the outcome rule needs one score per completion")
        adv = outcome_advantages(scores, group_ids, eps=eps)
        return [np.full(len(r), a) for r, a in zip(rewards, adv)]
    if rule is Credit.CLIP_DELTA:
        return [_suffix(clip_delta_credits(r, eta=eta, clip=clip, delta=delta), np.add)
                for r in rewards]
    if rule is Credit.PROCESS:
        return [_suffix(n, np.add) for n in _normalised_steps(rewards, group_ids, eps)]
    if rule is Credit.SOFTMIN and temperature <= 0:
        raise PrmkitError(f"softmin temperature must be positive, got {temperature}")
    weighted = [min_form(r, temperature if rule is Credit.SOFTMIN else None) for r in rewards]
    units = _baseline_units(baseline, rewards, tokens_per_step)
    out = [np.zeros(0)] * len(rewards)
    for members in _groups(len(rewards), group_ids):
        scored = [i for i in members if weighted[i].size]
        returns = {i: weighted[i].sum() for i in scored}
        for i in scored:
            others = [j for j in scored if j != i] or [i]
            if baseline == "token":
                total = sum(units[j].sum() for j in others)
                rate = sum(returns[j] for j in others) / total if total else 0.0
            else:
                rate = float(np.mean([returns[j] / weighted[j].size for j in others]))
            out[i] = _suffix(weighted[i] - rate * units[i], np.add)
    return out


def min_form(rewards: Steps, temperature: float | None = 0.1) -> np.ndarray:
    """PURE's weighted step rewards of one completion: r = 2p - 1 (a null step: p =
    NULL_STEP_SCORE) times softmax(-r / temperature) over its steps; temperature None: the
    limit T -> 0, the worst step's r on it (shared by tied worst steps), 0 elsewhere. They
    sum to the completion's min-form return."""
    r = 2.0 * np.asarray(fill_null_steps(rewards), dtype=np.float64) - 1.0
    if r.size == 0:
        return r
    if temperature is None:
        w = (r == r.min()).astype(np.float64)
    else:
        w = np.exp(-(r - r.min()) / temperature)
    return w / w.sum() * r


def _baseline_units(baseline: str, rewards: Sequence[Steps],
                    tokens_per_step: Sequence[Sequence[int]] | None) -> list[np.ndarray]:
    """What each step's share of the baseline is counted in: 1 a step, or its tokens."""
    if baseline == "step":
        return [np.ones(len(r)) for r in rewards]
    if baseline != "token":
        raise PrmkitError(f"baseline {baseline!r}: choose step or token")
    if tokens_per_step is None or len(tokens_per_step) != len(rewards) or any(
            len(t) != len(r) for t, r in zip(tokens_per_step, rewards, strict=True)):
        raise PrmkitError("baseline 'token' needs tokens_per_step: one count per step of "
                          "every completion")
    return [np.asarray(t, dtype=np.float64) for t in tokens_per_step]


def tokens_per_step(step_ends: Sequence[Sequence[int | None]], lengths: Sequence[int]
                    ) -> list[list[int]]:
    """Policy tokens of each step, as `spread_to_tokens` places them."""
    return [[stop - start for start, stop in _step_slices(ends, n)] if n else [0] * len(ends)
            for ends, n in zip(step_ends, lengths, strict=True)]


def outcome_advantages(scores: Sequence[float | None], group_ids=None,
                       eps: float = DEFAULT_EPS) -> np.ndarray:
    """Group-normalised scores; a None score (nothing gradable) gets 0 and stays out of its
    group's mean and std."""
    out = np.zeros(len(scores))
    for members in _groups(len(scores), group_ids):
        known = [i for i in members if scores[i] is not None]
        out[known] = group_normalise([scores[i] for i in known], eps)
    return out


def mix_verifier(step_adv: Sequence[np.ndarray], verifier: Sequence[float | None],
                 group_ids=None, weight: float = 1.0, eps: float = DEFAULT_EPS
                 ) -> list[np.ndarray]:
    """Step advantages plus `weight` times the group-normalised verifiable reward (1.0
    correct, 0.0 wrong; None undecided: left out, adds 0)."""
    v = outcome_advantages(verifier, group_ids, eps)
    return [np.asarray(a, dtype=np.float64) + weight * v[i] for i, a in enumerate(step_adv)]


def _check_ends(ends: Sequence[int | None], length: int) -> list[int]:
    out = []
    for e in ends:
        if e is None:
            raise PrmkitError("a step has no policy token end (give the policy tokenizer)")
        out.append(min(int(e), length - 1))
    return out


def spread_to_tokens(step_adv: Sequence[np.ndarray], step_ends: Sequence[Sequence[int | None]],
                     lengths: Sequence[int], width: int | None = None) -> np.ndarray:
    """(B, width) token advantages: token t of completion i gets the advantage of the first
    step ending at or after t; tokens after the last step's end belong to the last step;
    padding (t >= lengths[i]) and completions without steps get 0."""
    width = max(lengths, default=0) if width is None else width
    out = np.zeros((len(lengths), width))
    for i, (adv, ends, n) in enumerate(zip(step_adv, step_ends, lengths)):
        if len(adv) == 0 or n == 0:
            continue
        for a, (start, stop) in zip(adv, _step_slices(ends, n)):
            out[i, start:stop] = a
    return out


def _step_slices(ends: Sequence[int | None], length: int) -> list[tuple[int, int]]:
    """The token slice of each step: from the previous step's end to its own; the last step
    also takes the tokens after its end."""
    out, start = [], 0
    for k, e in enumerate(_check_ends(ends, length)):
        stop = length if k == len(ends) - 1 else max(start, e + 1)
        out.append((start, stop))
        start = stop
    return out


def rewards_at_step_ends(rewards: Sequence[Steps], step_ends: Sequence[Sequence[int | None]],
                         lengths: Sequence[int], width: int | None = None) -> np.ndarray:
    """(B, width) token-level rewards: each step's reward (null: NULL_STEP_SCORE) on the
    token ending it (the last step on the completion's last token); 0 elsewhere."""
    width = max(lengths, default=0) if width is None else width
    out = np.zeros((len(lengths), width))
    for i, (r, ends, n) in enumerate(zip(rewards, step_ends, lengths)):
        if len(r) == 0 or n == 0:
            continue
        ends = _check_ends(ends, n)
        ends[-1] = n - 1
        for value, e in zip(fill_null_steps(r), ends):
            out[i, e] += value
    return out


def reward_on_last_token(scores: Sequence[float | None], lengths: Sequence[int],
                         width: int | None = None, null: float = 0.0) -> np.ndarray:
    """(B, width): each completion's scalar on its last token (None: `null`)."""
    width = max(lengths, default=0) if width is None else width
    out = np.zeros((len(lengths), width))
    for i, (s, n) in enumerate(zip(scores, lengths)):
        if n > 0:
            out[i, n - 1] = null if s is None else s
    return out
