"""verl entry points, written against verl 0.9.1's reward interfaces (verl pins
transformers<5.11, so prmkit's tests run verl's own loaders, agent loop and `DataProto` from
a side folder installed without its dependencies; see docs/rl.md).

- `compute_score(data_source, solution_str, ground_truth, extra_info)`: a
  ``custom_reward_function`` (one scalar per response, placed by verl on its last token);
  the PRM folder comes from ``custom_reward_function.reward_kwargs.model`` or $PRMKIT_MODEL.
- `PRMRewardManager`: a reward-loop manager (``reward.reward_manager.source=importlib``).
  Where verl scores depends on ``reward.reward_model``: by default (``enable=False``, or
  with ``enable_resource_pool``) each response is scored inside verl's agent loop, which
  keeps ONE float per response (a pydantic ``Optional[float]``) and puts it on the
  response's last token; there `run_single` returns the PRM score (``placement:
  outcome``, the only placement that fits). Only verl's colocated reward loop
  (``reward_model.enable=True`` without ``enable_resource_pool``) calls
  `assemble_rm_scores`, which writes step rewards at their step-end tokens of
  ``rm_scores`` (``placement: steps`` or ``clip_delta``); those need an advantage
  estimator with per-token returns (``gae``, ``reinforce_plus_plus``, ``remax``): GRPO,
  RLOO and the others sum a response's token rewards into one number, which turns step
  rewards into summed credit and Clip-Delta credits (which telescope) into the first
  step's alone. Other combinations raise when the manager is built.

Settings of the manager: ``+reward.prmkit.model=...`` (and placement, aggregation,
token_budget, eta, null_score), else $PRMKIT_MODEL, $PRMKIT_PLACEMENT, ...
"""

from __future__ import annotations

import asyncio

from prmkit.errors import PrmkitError
from prmkit.rewards.contract import compute_step_rewards
from prmkit.rewards.credit import clip_delta_credits
from prmkit.rewards.diagnostics import verifier_rewards
from prmkit.rewards.engines import (
    EngineInterfaceError,
    cached_scorer,
    check_engine_version,
    setting,
)

TESTED_VERL = ("0.9",)
PLACEMENTS = ("steps", "clip_delta", "outcome")
PER_TOKEN_RETURNS = ("gae", "reinforce_plus_plus", "remax")  # verl estimators not summing rows


def _problem(extra_info) -> str:
    info = extra_info or {}
    for key in ("problem", "question"):
        if isinstance(info.get(key), str):
            return info[key]
    raise PrmkitError("verl extra_info has no 'problem' or 'question': the PRM needs the "
                      "problem text (add it to extra_info in the data preprocessing)")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    """verl custom reward function: {"score": the PRM score (prmkit's aggregation; a
    completion without a gradable step gets `null_score`, 0.0) plus `verifier_weight` times
    the grader's verdict against ground_truth, "prm_score", "prm_steps", "prm_null_score"
    (1.0 for a null score), and with a verifier weight "verifier" (1.0 / 0.0; 0.0 when
    ungraded) and "verifier_graded"}: every value a number, never NaN."""
    check_engine_version("verl", TESTED_VERL)
    scorer = cached_scorer(kwargs)
    weight = float(setting(kwargs, "verifier_weight", 0.0, float))
    null = float(setting(kwargs, "null_score", 0.0, float))
    rewards = compute_step_rewards(scorer, [_problem(extra_info)], [solution_str],
                                   aggregation=setting(kwargs, "aggregation"))[0]
    prm = null if rewards.score is None else rewards.score
    out = {"score": prm, "prm_score": prm, "prm_steps": len(rewards.steps),
           "prm_null_score": float(rewards.score is None)}
    if weight:
        verdict = verifier_rewards([solution_str], [ground_truth])[0]
        out |= {"score": prm + weight * (verdict or 0.0), "verifier": verdict or 0.0,
                "verifier_graded": float(verdict is not None)}
    return out


def _settings(config) -> dict:
    try:
        section = config["reward"].get("prmkit") or {}
    except (AttributeError, KeyError, TypeError):
        section = {}
    return dict(section)


def _get(config, *keys):
    for key in keys:
        try:
            config = config[key]
        except (KeyError, TypeError, IndexError):
            return None
    return config


def _colocated(config) -> bool:
    """Whether verl 0.9 scores in its colocated reward loop (`assemble_rm_scores`, rewards
    per token) rather than in its agent loop (one float per response)."""
    return bool(_get(config, "reward", "reward_model", "enable")) and \
        not _get(config, "reward", "reward_model", "enable_resource_pool")


def _estimator(config) -> str | None:
    value = _get(config, "algorithm", "adv_estimator")
    return None if value is None else str(getattr(value, "value", value))


def _check_placement(placement: str, per_token: bool, estimator: str | None) -> None:
    if placement not in PLACEMENTS:
        raise PrmkitError(f"placement {placement!r}: choose one of {', '.join(PLACEMENTS)}")
    if placement == "outcome":
        return
    if not per_token:
        raise PrmkitError(
            f"placement {placement!r} puts rewards on step-end tokens, but verl scores in its "
            "agent loop here (reward.reward_model.enable=False, or enable_resource_pool), "
            "which keeps one float per response: use placement=outcome (aggregation=min for "
            "the worst step), or verl's colocated reward loop")
    if estimator is not None and estimator not in PER_TOKEN_RETURNS:
        raise PrmkitError(
            f"placement {placement!r} with algorithm.adv_estimator={estimator}: that "
            "estimator sums a response's token rewards into one number (clip_delta's credits "
            "then keep only the first step's, steps pay for more steps); use placement="
            f"outcome, or an estimator with per-token returns ({', '.join(PER_TOKEN_RETURNS)})")


class PRMRewardManager:
    """verl reward-loop manager: the PRM score per response in verl's agent loop, step
    rewards at their step-end tokens in its colocated reward loop (see the module)."""

    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None,
                 reward_model_tokenizer=None, **kwargs):
        check_engine_version("verl", TESTED_VERL)
        self.config = config
        self.tokenizer = tokenizer
        self.settings = {**_settings(config), **kwargs}
        self.per_token = _colocated(config)
        self.placement = setting(self.settings, "placement",
                                 "steps" if self.per_token else "outcome")
        _check_placement(self.placement, self.per_token, _estimator(config))
        self.eta = float(setting(self.settings, "eta", 0.5, float))
        self.null_score = float(setting(self.settings, "null_score", 0.0, float))
        self.scorer = cached_scorer(self.settings)
        self._waiting: list[tuple[str, list[int], asyncio.Future]] = []
        self._tasks: set[asyncio.Task] = set()  # flushes in flight (kept from collection)

    @staticmethod
    def _field(container, key: str, where: str):
        try:
            return container[key]
        except (KeyError, TypeError):
            raise EngineInterfaceError(f"verl sample has no {where}[{key!r}]: its DataProto "
                                       "layout differs from verl 0.9") from None

    def _score(self, batch: list[tuple[str, list[int]]]) -> list[dict]:
        """One `compute_step_rewards` call (token-budgeted batches) for the samples waiting."""
        texts = [self.tokenizer.decode(ids, skip_special_tokens=True) for _, ids in batch]
        rewards = compute_step_rewards(
            self.scorer, [p for p, _ in batch], texts, policy_tokenizer=self.tokenizer,
            policy_token_ids=[ids for _, ids in batch],
            aggregation=setting(self.settings, "aggregation"))
        return [self._placed(r, ids) for r, (_, ids) in zip(rewards, batch, strict=True)]

    def _placed(self, r, ids: list[int]) -> dict:
        ends = [s.policy_token_end for s in r.steps]
        score = self.null_score if r.score is None else r.score
        info = {"prm_score": score, "prm_steps": len(r.steps),
                "prm_null_score": float(r.score is None)}
        if not self.per_token:  # verl's agent loop: one float, on the last token
            return {"reward_score": float(score), "reward_extra_info": info}
        if self.placement == "outcome" or not r.steps:
            positions = [len(ids) - 1] if ids else []
            values = [score] if ids else []
        elif self.placement == "clip_delta":
            positions, values = ends, clip_delta_credits(r.probabilities, eta=self.eta).tolist()
        else:
            positions, values = ends, [0.0 if p is None else p for p in r.probabilities]
        return {"reward_score": {"positions": positions, "values": values},
                "reward_extra_info": info}

    def _start_flush(self, loop) -> None:
        task = loop.create_task(self._flush())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush(self) -> None:
        batch, self._waiting = self._waiting, []
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(None, self._score, [(p, i) for p, i, _ in batch])
        except Exception as e:  # every waiting sample learns of it, none hangs
            for *_, fut in batch:
                fut.set_exception(e)
            return
        for (*_, fut), result in zip(batch, results, strict=True):
            fut.set_result(result)

    async def run_single(self, data) -> dict:
        """Score one sample. verl starts every sample of its chunk at once; those arriving
        in the same turn of the event loop are scored together in one call."""
        data = data[-1:]  # as verl's managers: the last sequence of a multi-sequence sample
        item = data[0]
        responses = self._field(item.batch, "responses", "batch")
        mask = self._field(item.batch, "attention_mask", "batch")
        valid = int(mask[-responses.shape[-1]:].sum())
        ids = [int(t) for t in responses[:valid].tolist()]
        problem = _problem(item.non_tensor_batch.get("extra_info"))
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if not self._waiting:  # runs once the samples started with this one have queued
            loop.call_soon(self._start_flush, loop)
        self._waiting.append((problem, ids, fut))
        return await fut

    @classmethod
    def assemble_rm_scores(cls, data, scores: list[dict]):
        """(B, response_length) rewards: each sample's values at its positions (clamped to
        its last valid response token)."""
        import torch

        responses = data.batch["responses"]
        prompt_length = data.batch["prompts"].size(1)
        valid = data.batch["attention_mask"][:, prompt_length:].sum(dim=1)
        out = torch.zeros_like(responses, dtype=torch.float32)
        for i, score in enumerate(scores):
            if not isinstance(score, dict) or "positions" not in score:
                raise EngineInterfaceError("reward_score is not what PRMRewardManager.run_single "
                                           "returned: verl routed another manager's output here")
            last = int(valid[i]) - 1
            for p, v in zip(score["positions"], score["values"], strict=True):
                if last >= 0:
                    out[i, min(int(p), last)] += float(v)
        return out
