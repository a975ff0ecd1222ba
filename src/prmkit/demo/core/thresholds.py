"""How PRM_large's labels at a threshold compare with the checker's, and the threshold a
rule chooses on problems no model was trained on.

PRM_large calls a step wrong when its P(wrong) is above the threshold. The paper used 0.2
for its PRM_large; the demo's leans another way, so the threshold is chosen per seed on
fresh problems (the small-scale experiments' dev problems): the one whose first wrong step
matches the checker's exactly most often.
"""

from __future__ import annotations

from collections.abc import Sequence

THRESHOLDS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5)


def label_agreement(checks: Sequence[Sequence], probs: Sequence[Sequence[Sequence[float]]],
                    threshold: float) -> dict[str, float]:
    """Over pools of checked solutions and PRM_large's step probabilities: the first wrong
    step found exactly (process labels), a solution called right exactly when every step
    is (outcome labels), and how often the final answer alone agrees with the process
    (what the grader's labels get right)."""
    first = outcome = answer = n = 0
    for pool_checks, pool_probs in zip(checks, probs, strict=True):
        for chk, p in zip(pool_checks, pool_probs, strict=True):
            p_first = next((j for j, v in enumerate(p) if 1 - v > threshold), -1)
            first += p_first == chk.first_error
            outcome += (p_first < 0) == chk.process_correct
            answer += chk.final_correct == chk.process_correct
            n += 1
    n = max(n, 1)
    return {"process_first_error_exact": first / n, "outcome_agrees_with_process": outcome / n,
            "final_answer_agrees_with_process": answer / n}


def choose_threshold(checks: Sequence[Sequence], probs: Sequence[Sequence[Sequence[float]]],
                     thresholds: Sequence[float] = THRESHOLDS) -> tuple[float, dict[str, dict]]:
    """The threshold whose first wrong step matches the checker's most often (the smaller on
    ties), and the agreement at each threshold."""
    table = {str(t): label_agreement(checks, probs, t) for t in thresholds}
    best = max(thresholds, key=lambda t: (table[str(t)]["process_first_error_exact"], -t))
    return best, table
