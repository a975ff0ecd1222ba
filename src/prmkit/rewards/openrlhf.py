"""OpenRLHF entry points, written against OpenRLHF 0.11.2's reward interface (OpenRLHF pins
transformers==5.15.0, so prmkit's tests run its own `SingleTurnAgentExecutor` from a side
folder installed without its dependencies; see docs/rl.md).

This file is itself a `--remote_rm_url` reward file: OpenRLHF loads it by path and calls
``reward_func(queries, prompts, labels)`` (one sample per call, in a thread), where each
query is the decoded prompt + response WITH special tokens. Settings come from the
environment: PRMKIT_MODEL (the PRM folder), PRMKIT_VERIFIER_WEIGHT (0), PRMKIT_NULL_REWARD
(0.0: OpenRLHF has no "no reward"), PRMKIT_AGGREGATION, PRMKIT_POLICY_TOKENIZER (a folder
whose special tokens are stripped from responses; common end-of-text tokens otherwise).

`openrlhf_rewards` is the same computation on lists, the body of OpenRLHF's remote
protocol ``{"query", "prompts", "labels"} -> {"rewards", "scores", "extra_logs"}``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from prmkit.rewards.contract import compute_step_rewards
from prmkit.rewards.diagnostics import verifier_rewards
from prmkit.rewards.engines import cached_scorer, check_engine_version, setting

TESTED_OPENRLHF = ("0.11",)
END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|end|>",
              "</s>", "<eos>", "<pad>", "<|pad|>")


@functools.lru_cache(maxsize=4)
def _special_tokens(folder: str | None) -> tuple[str, ...]:
    if not folder:
        return END_TOKENS
    from transformers import AutoTokenizer

    return tuple(AutoTokenizer.from_pretrained(folder).all_special_tokens)


def response_text(query: str, prompt: str, special: Sequence[str] = END_TOKENS) -> str | None:
    """The response in an OpenRLHF query (prompt + response decoded with special tokens):
    what follows the prompt, without trailing special tokens; None when the prompt is not
    in the query (nothing to grade)."""
    at = query.find(prompt)
    if at < 0:
        return None
    text = query[at + len(prompt):]
    stripped = True
    while stripped:
        stripped = False
        text = text.rstrip()
        for tok in special:
            if tok and text.endswith(tok):
                text, stripped = text[: -len(tok)], True
    return text


def openrlhf_rewards(scorer, queries: Sequence[str], prompts: Sequence[str],
                     labels: Sequence[str | None] | None = None, *, verifier_weight: float = 0.0,
                     null_reward: float = 0.0, aggregation: str | None = None,
                     special: Sequence[str] = END_TOKENS) -> dict:
    """{"rewards", "scores", "extra_logs"} as lists in input order: reward = the PRM score
    (`null_reward` when no step is gradable) + verifier_weight x the grader's verdict against
    the label; scores = the PRM score alone; extra_logs: prm_score, prm_steps, verifier
    (NaN when not graded)."""
    texts = [response_text(q, p, special) for q, p in zip(queries, prompts, strict=True)]
    rewards = compute_step_rewards(scorer, list(prompts), texts, aggregation=aggregation)
    prm = [null_reward if r.score is None else r.score for r in rewards]
    verdicts = (verifier_rewards(texts, labels) if verifier_weight and labels is not None
                else [None] * len(texts))
    total = [p + verifier_weight * (v or 0.0) for p, v in zip(prm, verdicts)]
    return {"rewards": total, "scores": prm,
            "extra_logs": {"prm_score": prm, "prm_steps": [len(r.steps) for r in rewards],
                           "verifier": [math.nan if v is None else v for v in verdicts]}}


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
