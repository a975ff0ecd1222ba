"""OpenRLHF entry points, written against OpenRLHF 0.11.2's reward interface (OpenRLHF pins
transformers==5.15.0, so prmkit's tests run its own `SingleTurnAgentExecutor` from a side
folder installed without its dependencies; see docs/rl.md).

This file is itself a `--remote_rm_url` reward file: OpenRLHF loads it by path and calls
``reward_func(queries, prompts, labels)`` (one sample per call, in a thread), where each
query is the decoded prompt + response WITH special tokens. Settings come from the
environment: PRMKIT_MODEL (the PRM folder), PRMKIT_VERIFIER_WEIGHT (0), PRMKIT_NULL_REWARD
(0.0: OpenRLHF has no "no reward"), PRMKIT_AGGREGATION, PRMKIT_POLICY_TOKENIZER (a folder
whose special tokens are stripped from responses; common end-of-text tokens otherwise).

A query's response is what follows its prompt (`prmkit.rewards.contract.response_text`:
OpenRLHF cuts the start of a prompt longer than its budget, and then what follows the
prompt's remaining end); a query that holds none of its prompt gets the null reward,
flagged in extra_logs as prm_prompt_missing, never an error (the reward server follows the
same rule). `openrlhf_rewards` is the same computation on lists, the body of OpenRLHF's
remote protocol ``{"query", "prompts", "labels"} -> {"rewards", "scores", "extra_logs"}``
(`openrlhf_answer` builds it; the server answers with it too).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from prmkit.rewards.contract import (
    END_TOKENS,
    CompletionRewards,
    compute_step_rewards,
    response_text,
)
from prmkit.rewards.diagnostics import verifier_rewards
from prmkit.rewards.engines import cached_scorer, check_engine_version, setting

TESTED_OPENRLHF = ("0.11",)
__all__ = ["END_TOKENS", "openrlhf_answer", "openrlhf_rewards", "response_text", "reward_func"]


@functools.lru_cache(maxsize=4)
def _special_tokens(folder: str | None) -> tuple[str, ...]:
    if not folder:
        return END_TOKENS
    from transformers import AutoTokenizer

    return tuple(AutoTokenizer.from_pretrained(folder).all_special_tokens)


def openrlhf_answer(results: Sequence[CompletionRewards], prompt_missing: Sequence[bool],
                    verdicts: Sequence[float | None] | None = None,
                    verifier_weight: float = 0.0, null_reward: float = 0.0) -> dict:
    """OpenRLHF's {"rewards", "scores", "extra_logs"} for scored responses, lists in input
    order: scores = each PRM score (`null_reward` when no step is gradable); rewards =
    scores + verifier_weight x the grader's verdict (0 when ungraded); extra_logs: one
    number per response, never NaN (OpenRLHF logs their means): prm_score, prm_steps,
    prm_null_score (1.0 for a null score), prm_prompt_missing (1.0 when the query did not
    hold its prompt: no response, the null reward), and with verdicts verifier (0.0 when
    ungraded) and verifier_graded."""
    prm = [null_reward if r.score is None else r.score for r in results]
    logs = {"prm_score": prm, "prm_steps": [float(len(r.steps)) for r in results],
            "prm_null_score": [float(r.score is None) for r in results],
            "prm_prompt_missing": [float(m) for m in prompt_missing]}
    rewards = list(prm)
    if verdicts is not None:
        rewards = [p + verifier_weight * (v or 0.0) for p, v in zip(prm, verdicts, strict=True)]
        logs["verifier"] = [v or 0.0 for v in verdicts]
        logs["verifier_graded"] = [float(v is not None) for v in verdicts]
    return {"rewards": rewards, "scores": prm, "extra_logs": logs}


def openrlhf_rewards(scorer, queries: Sequence[str], prompts: Sequence[str],
                     labels: Sequence[str | None] | None = None, *, verifier_weight: float = 0.0,
                     null_reward: float = 0.0, aggregation: str | None = None,
                     special: Sequence[str] = END_TOKENS) -> dict:
    """`openrlhf_answer` for OpenRLHF queries: each response is `response_text(query,
    prompt)` (a query without its prompt gets the null reward), graded against its label
    when verifier_weight is not 0."""
    texts = [response_text(q, p, special) for q, p in zip(queries, prompts, strict=True)]
    rewards = compute_step_rewards(scorer, list(prompts), texts, aggregation=aggregation)
    verdicts = (verifier_rewards(texts, labels or [None] * len(texts)) if verifier_weight
                else None)
    return openrlhf_answer(rewards, [t is None for t in texts], verdicts, verifier_weight,
                           null_reward)


def reward_func(queries, prompts, labels):
    """OpenRLHF's reward-file function (see the module docstring); tensors, as OpenRLHF's
    own examples return."""
    import torch

    check_engine_version("openrlhf", TESTED_OPENRLHF)
    kw: dict = {}
    out = openrlhf_rewards(
        cached_scorer(kw), queries, prompts, labels,
        verifier_weight=float(setting(kw, "verifier_weight", 0.0, float)),
        null_reward=float(setting(kw, "null_reward", 0.0, float)),
        aggregation=setting(kw, "aggregation"),
        special=_special_tokens(setting(kw, "policy_tokenizer")))
    as_tensor = functools.partial(torch.tensor, dtype=torch.float32)
    return {"rewards": as_tensor(out["rewards"]), "scores": as_tensor(out["scores"]),
            "extra_logs": {k: as_tensor(v) for k, v in out["extra_logs"].items()}}
