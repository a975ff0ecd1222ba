"""What the RL experiment measures on held-out problems, with the checker's step truth.

At each evaluation: one greedy solution and `eval_samples` sampled ones (temperature 1) per
problem, drawn with fixed seeds (every evaluation and every reward draws the same random
numbers, so curves differ by the policy only). Figures: answer accuracy (greedy, sampled);
right process (the checker accepts every step and the answer is right); a right answer
reached through a wrong step; no answer; the PRM's and the ORM's mean score (and the PRM's
on wrong solutions); steps per solution and policy tokens per step (hacking signals); and
the wrong sampled solution the PRM scores highest. Best-of-N picks, among N samples per
problem, the one the PRM scores highest (the demo's aggregation).
"""

from __future__ import annotations

import contextlib

import numpy as np

from prmkit.demo import world
from prmkit.demo.lm.policy import sample, solution_steps
from prmkit.rewards.contract import compute_step_rewards
from prmkit.selection import best_of_n as select_best

SHARES = ("greedy_accuracy", "sampled_accuracy", "right_process", "right_answer_wrong_step",
          "no_answer", "prm_score", "orm_score", "prm_score_when_wrong")
COUNTS = ("steps_per_solution", "tokens_per_step")


class Counting:
    """A Scorer that counts reward-model forward passes (one per scored completion: all of
    a completion's steps go through one pass), apart for training and for evaluation."""

    def __init__(self, scorer):
        self.scorer = scorer
        self.training = self.eval = 0
        self._phase = "training"

    def __getattr__(self, name):
        return getattr(self.scorer, name)

    def score(self, items, *args, **kwargs):
        items = list(items)
        setattr(self, self._phase, getattr(self, self._phase) + len(items))
        return self.scorer.score(items, *args, **kwargs)

    def reset(self) -> None:
        self.training = self.eval = 0

    @contextlib.contextmanager
    def evaluating(self):
        saved, self._phase = self._phase, "eval"
        try:
            yield self
        finally:
            self._phase = saved


def mean_or_none(values) -> float | None:
    values = [float(v) for v in values if v is not None]
    return float(np.mean(values)) if values else None


def scores_of(scorer, problems, texts, aggregation=None):
    """Each text's reward (`compute_step_rewards`), counted as evaluation passes."""
    with scorer.evaluating():
        return compute_step_rewards(scorer, [p.text for p in problems], texts,
                                    aggregation=aggregation)


def evaluate(sampler, problems, prm, orm, cfg, seed: int) -> dict:
    greedy = sample(sampler, problems, 1, 0.0, cfg.max_completion, seed)
    sampled = sample(sampler, problems, cfg.eval_samples, cfg.temperature, cfg.max_completion,
                     seed + 1)
    flat = [(p, text, tokens) for p, pool in zip(problems, sampled) for text, tokens in pool]
    owners, texts = [p for p, _, _ in flat], [t for _, t, _ in flat]
    prm_r = scores_of(prm, owners, texts, cfg.demo.aggregation)
    orm_r = scores_of(orm, owners, texts)
    checks = [world.check_solution(p, solution_steps(t)) for p, t in zip(owners, texts)]
    first = [world.check_solution(p, solution_steps(pool[0][0])) for p, pool in
             zip(problems, greedy)]
    steps = [len(solution_steps(t)) for t in texts]
    out = {
        "greedy_accuracy": mean_or_none(c.final_correct for c in first),
        "sampled_accuracy": mean_or_none(c.final_correct for c in checks),
        "right_process": mean_or_none(c.process_correct for c in checks),
        "right_answer_wrong_step": mean_or_none(c.final_correct and c.first_error >= 0 for c in checks),
        "no_answer": mean_or_none(c.answer is None for c in checks),
        "prm_score": mean_or_none(r.score for r in prm_r),
        "orm_score": mean_or_none(r.score for r in orm_r),
        "prm_score_when_wrong": mean_or_none(r.score for r, c in zip(prm_r, checks)
                                             if not c.process_correct),
        "steps_per_solution": mean_or_none(steps),
        "tokens_per_step": mean_or_none(n / k for (_, _, n), k in zip(flat, steps) if k),
    }
    wrong = [i for i, c in enumerate(checks) if not c.process_correct
             and prm_r[i].score is not None]
    if wrong:
        i = max(wrong, key=lambda j: prm_r[j].score)
        out["example"] = {"problem": owners[i].text, "answer": owners[i].answer,
                          "solution": texts[i], "prm_score": prm_r[i].score,
                          "step_probs": prm_r[i].probabilities, "labels": checks[i].labels,
                          "final_correct": checks[i].final_correct}
    return out


def prompt_accuracy(sampler, problems, cfg, seed: int, n: int = 4) -> float | None:
    """Sampled final-answer accuracy on `problems` (`n` samples each, the RL temperature)."""
    pools = sample(sampler, problems, n, cfg.temperature, cfg.max_completion, seed + 4)
    return mean_or_none(world.check_solution(p, solution_steps(t)).final_correct
                        for p, pool in zip(problems, pools) for t, _ in pool)


def best_of_n(sampler, problems, cfg, seed: int, *models) -> list[dict]:
    """Best-of-`cfg.bon_n` with each of `models`, a PRM (the demo's aggregation) or an ORM,
    over one set of pools (`prmkit.selection.best_of_n`; an unscored sample is never
    picked over a scored one): accuracy and right process of its picks, beside the mean
    accuracy of a sample and pass@N (some sample right)."""
    pools = sample(sampler, problems, cfg.bon_n, cfg.temperature, cfg.max_completion, seed + 2)
    owners = [p for p, pool in zip(problems, pools) for _ in pool]
    texts = [t for pool in pools for t, _ in pool]
    checks = [[world.check_solution(p, solution_steps(t)) for t, _ in pool]
              for p, pool in zip(problems, pools)]
    mean = [np.mean([c.final_correct for c in pool]) for pool in checks]
    any_right = [any(c.final_correct for c in pool) for pool in checks]
    out = []
    for model in models:
        rewards = scores_of(model, owners, texts, cfg.demo.aggregation)
        picks, at = [], 0
        for pool in checks:
            scores = [np.nan if r.score is None else r.score for r in rewards[at: at + len(pool)]]
            at += len(pool)
            picks.append(pool[select_best(scores)])
        out.append({"n": cfg.bon_n, "accuracy": mean_or_none(c.final_correct for c in picks),
                    "right_process": mean_or_none(c.process_correct for c in picks),
                    "sample_accuracy": mean_or_none(mean), "pass": mean_or_none(any_right)})
    return out
