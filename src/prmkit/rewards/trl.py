"""TRL adapter: a `reward_funcs` callable and a `GRPOTrainer` with per-token process credit.

    from prmkit.rewards.trl import ProcessReward, ProcessRewardGRPOTrainer
    prm = ProcessReward(scorer, policy_tokenizer=tok)
    trainer = ProcessRewardGRPOTrainer(model=policy, reward_funcs=[prm], credit="min",
                                       args=GRPOConfig(...), train_dataset=ds)

Tested with TRL 1.16.0 (constraints.txt). What this relies on, checked when the trainer is
built (a TRL whose interface changed gets `TRLInterfaceError`, never a silent wrong reward):

- reward functions are called as ``f(prompts=, completions=, completion_ids=, **columns)``
  with one row per completion; a None becomes NaN, and TRL leaves a row out of its own
  baselines only when every reward function returns None for it (beside another reward
  function, a None counts as 0 in TRL's weighted sum);
- a conversational completion is a list of messages whose ``content`` is TRL's parsed
  response (a reasoning block and tool calls taken out), while ``completion_ids`` are every
  token TRL trains on (the reasoning block, every turn, tool results included): step ends
  are placed on those ids by finding each assistant message's content in their decoding;
- ``GRPOTrainer._generate_and_score_completions(inputs)`` returns a dict whose
  "advantages" is (B,) and whose "completion_ids" / "completion_mask" are (B, T), rows in
  the order the reward functions saw them, groups of `num_generations` consecutive rows;
- ``GRPOTrainer._compute_loss`` accepts advantages of shape (B, T) (it unsqueezes only 1-D).
"""

from __future__ import annotations

import bisect
import dataclasses
import inspect
import logging
from collections.abc import Sequence

import numpy as np

from prmkit.errors import PrmkitError
from prmkit.rewards.contract import CompletionRewards, PolicyTokens, compute_step_rewards
from prmkit.rewards.credit import (
    DEFAULT_EPS,
    credit_rule,
    mix_verifier,
    spread_to_tokens,
    step_advantages,
    tokens_per_step,
)
from prmkit.rewards.diagnostics import batch_diagnostics, verifier_rewards

log = logging.getLogger("prmkit.rewards")
TESTED_TRL = ("1.16",)  # major.minor versions whose GRPOTrainer internals were tested


class TRLInterfaceError(PrmkitError):
    """The installed TRL does not have the interface this adapter was tested against."""


def _text(message_or_text) -> str | None:
    """A plain string, or the content of the last message of a conversation."""
    if isinstance(message_or_text, str):
        return message_or_text
    if isinstance(message_or_text, list) and message_or_text:
        last = message_or_text[-1]
        if isinstance(last, dict) and isinstance(last.get("content"), str):
            return last["content"]
    return None


def _turns(completion) -> list[str] | None:
    """What the policy wrote, as TRL passes it: a string, or the non-empty content of each
    assistant message of a conversational completion (None: neither)."""
    if isinstance(completion, str):
        return [completion]
    if not isinstance(completion, list):
        return None
    return [m["content"] for m in completion
            if isinstance(m, dict) and m.get("role", "assistant") == "assistant"
            and isinstance(m.get("content"), str) and m["content"].strip()]


def _segments(decoded: str, turns: list[str], sep: str) -> list[tuple[int, int, int]] | None:
    """Where each turn of the PRM's text (the turns joined by `sep`) lies in the decoded
    ids: (start in the text, start in the decoding, length) per turn, or None when a turn
    is not found there in order."""
    out, at, pos = [], 0, 0
    for turn in turns:
        found = decoded.find(turn, at)
        if found < 0:
            return None
        out.append((pos, found, len(turn)))
        at, pos = found + len(turn), pos + len(turn) + len(sep)
    return out


def _decoded_end(segments: list[tuple[int, int, int]], end: int) -> int:
    """A character end in the PRM's text as a character end in the decoded ids."""
    k = max(0, bisect.bisect_left([start for start, _, _ in segments], end) - 1)
    start, at, length = segments[k]
    return at + min(end - start, length)


def _problem(prompt) -> str:
    """The problem text of a TRL prompt: the string itself, or the last user message."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        for message in reversed(prompt):
            if isinstance(message, dict) and message.get("role") == "user":
                return str(message.get("content", ""))
    return ""


class ProcessReward:
    """TRL `reward_funcs` entry: each completion's PRM score (prmkit's aggregation), None
    when no step is gradable. The step rewards of the last call stay in `last` (with the
    policy token ends when the policy tokenizer is given) for `ProcessRewardGRPOTrainer`.

    The PRM reads a plain completion as it is, a conversational one as the content of its
    assistant messages joined by the PRM's step separator (each turn ends a step; character
    spans refer to that text). With `completion_ids`, each step's end is the token of those
    ids (what TRL trains on: a reasoning block and tool results included) where that step's
    text ends; tokens before a turn's content belong to its first step.

    problem_key: a dataset column holding the problem text the PRM should see (TRL passes
    every column as a keyword); without it the prompt (or its last user message) is used.
    """

    __name__ = "prm"

    def __init__(self, scorer, *, policy_tokenizer=None, problem_key: str | None = "problem",
                 aggregation: str | None = None, max_tokens_per_batch: int | None = None):
        self.scorer = scorer
        self.policy_tokenizer = policy_tokenizer
        self.problem_key = problem_key
        self.aggregation = aggregation
        self.max_tokens_per_batch = max_tokens_per_batch
        self.last: list[CompletionRewards] = []
        self.last_lengths: list[int] = []

    def __call__(self, prompts, completions, completion_ids=None, **kwargs) -> list[float | None]:
        problems = kwargs.get(self.problem_key) if self.problem_key else None
        if problems is None:
            problems = [_problem(p) for p in prompts]
        sep = self.scorer.encoder.fmt.step_separator
        turns = [_turns(c) for c in completions]
        texts = [None if t is None else sep.join(t) for t in turns]
        on_ids = completion_ids is not None and self.policy_tokenizer is not None
        segments: list = [None] * len(texts)
        if on_ids:
            mapper = PolicyTokens(self.policy_tokenizer)
            ids = [list(map(int, row)) for row in completion_ids]
            for i, (row, t) in enumerate(zip(ids, turns, strict=True)):
                decoded = mapper.decode(row)
                segments[i] = _segments(decoded, t or [], sep)
                if segments[i] is None:  # a parser that rewrote the text: grade what was trained
                    log.warning("completion %d: its messages are not in its decoded ids; the "
                                "PRM grades the decoded ids", i)
                    texts[i], segments[i] = decoded, [(0, 0, len(decoded))]
        self.last = compute_step_rewards(
            self.scorer, [str(p) for p in problems], texts,
            policy_tokenizer=None if on_ids else self.policy_tokenizer,
            max_tokens_per_batch=self.max_tokens_per_batch, aggregation=self.aggregation)
        if on_ids:
            self.last = [_placed(r, mapper, row, seg)
                         for r, row, seg in zip(self.last, ids, segments, strict=True)]
        self.last_lengths = [len(r) for r in completion_ids] if completion_ids is not None else []
        return [r.score for r in self.last]


def _placed(rewards: CompletionRewards, mapper: PolicyTokens, ids: list[int],
            segments: list[tuple[int, int, int]]) -> CompletionRewards:
    """`rewards` with each step's end on the policy token that ends it in `ids`."""
    if not rewards.steps:
        return rewards
    ends = mapper.token_ends_from_ids(ids, [_decoded_end(segments, s.char_end)
                                            for s in rewards.steps])
    return dataclasses.replace(rewards, steps=[dataclasses.replace(s, policy_token_end=e)
                                               for s, e in zip(rewards.steps, ends, strict=True)])


class VerifierReward:
    """TRL `reward_funcs` entry: 1.0 / 0.0 from prmkit's grader against the dataset column
    `answer_key`; None when undecided. The last call's values stay in `last`."""

    __name__ = "verifier"

    def __init__(self, answer_key: str = "answer"):
        self.answer_key = answer_key
        self.last: list[float | None] = []

    def __call__(self, prompts, completions, **kwargs) -> list[float | None]:
        if self.answer_key not in kwargs:
            raise PrmkitError(f"the dataset has no {self.answer_key!r} column for the verifier")
        self.last = verifier_rewards([_text(c) for c in completions], kwargs[self.answer_key])
        return self.last


def check_trl_interface(trainer_cls=None) -> str:
    """The installed TRL's version, after checking the internals this adapter relies on."""
    try:
        import trl
        from trl import GRPOTrainer
    except ImportError as e:
        raise TRLInterfaceError("TRL is not installed: pip install 'prmkit[rl]'") from e
    cls = trainer_cls or GRPOTrainer
    version = trl.__version__
    if ".".join(version.split(".")[:2]) not in TESTED_TRL:
        raise TRLInterfaceError(f"TRL {version} is untested (tested: {', '.join(TESTED_TRL)}.x); "
                                "install the version in constraints.txt")
    needed = {"_generate_and_score_completions": ["inputs"], "_calculate_rewards":
              ["inputs", "prompts", "completions", "completion_ids_list"]}
    for name, params in needed.items():
        fn = getattr(cls, name, None)
        if fn is None or list(inspect.signature(fn).parameters)[1:] != params:
            raise TRLInterfaceError(f"TRL {version}: GRPOTrainer.{name} is not ({', '.join(params)})")
    loss = inspect.getsource(cls._compute_loss)
    if "advantages.dim() == 1" not in loss:
        raise TRLInterfaceError(f"TRL {version}: GRPOTrainer._compute_loss may not accept "
                                "(B, T) advantages")
    return version


def _gather(values: list) -> list:
    from accelerate.utils import gather_object

    return list(gather_object(values))


class _Base:
    """Mixin over TRL's GRPOTrainer (built by `ProcessRewardGRPOTrainer`)."""

    def _init_credit(self, credit, verifier_weight, credit_kwargs):
        self.credit = credit_rule(credit)
        self.verifier_weight = float(verifier_weight)
        self.credit_kwargs = {"eps": DEFAULT_EPS, **(credit_kwargs or {})}
        prms = [f for f in self.reward_funcs if isinstance(f, ProcessReward)]
        if len(prms) != 1:
            raise PrmkitError("reward_funcs needs exactly one prmkit ProcessReward")
        self.process_reward = prms[0]
        if self.process_reward.policy_tokenizer is None:
            self.process_reward.policy_tokenizer = self.processing_class
        verifiers = [f for f in self.reward_funcs if isinstance(f, VerifierReward)]
        self.verifier = verifiers[0] if verifiers else None
        if self.verifier_weight and self.verifier is None:
            raise PrmkitError("verifier_weight needs a VerifierReward among reward_funcs")

    def token_advantages(self, rewards: Sequence[CompletionRewards], lengths: Sequence[int],
                         group_size: int, width: int,
                         verifier: Sequence[float | None] | None = None) -> np.ndarray:
        """(B, width) advantages of the whole (gathered) batch under the trainer's credit."""
        groups = [i // group_size for i in range(len(rewards))]
        ends = [[s.policy_token_end for s in r.steps] for r in rewards]
        kwargs = dict(self.credit_kwargs)
        if kwargs.get("baseline") == "token":
            kwargs["tokens_per_step"] = tokens_per_step(ends, lengths)
        adv = step_advantages(self.credit, [r.probabilities for r in rewards], groups,
                              scores=[r.score for r in rewards], **kwargs)
        if verifier is not None and self.verifier_weight:
            adv = mix_verifier(adv, verifier, groups, self.verifier_weight,
                               eps=self.credit_kwargs["eps"])
        return spread_to_tokens(adv, ends, lengths, width)

    def _generate_and_score_completions(self, inputs):
        import torch

        out = super()._generate_and_score_completions(inputs)
        base = out.get("advantages")
        mask = out.get("completion_mask")
        if base is None or mask is None or base.dim() != 1 or mask.dim() != 2:
            raise TRLInterfaceError("GRPOTrainer._generate_and_score_completions no longer "
                                    "returns (B,) advantages and a (B, T) completion_mask")
        local = self.process_reward.last
        if len(local) != base.size(0) or len(self.process_reward.last_lengths) != len(local):
            raise TRLInterfaceError(f"{len(local)} process rewards for {base.size(0)} rows: TRL "
                                    "no longer scores the rows it trains on")
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = _gather(local)
        lengths = _gather(self.process_reward.last_lengths)
        verifier = _gather(self.verifier.last) if self.verifier is not None else None
        width = mask.size(1)
        table = self.token_advantages(rewards, lengths, group, width, verifier)
        start = self.accelerator.process_index * len(local)
        mine = torch.as_tensor(table[start: start + len(local)], dtype=torch.float32,
                               device=base.device)
        out["advantages"] = mine * mask.to(mine.dtype)
        mine_verifier = None if verifier is None else verifier[start: start + len(local)]
        signals = batch_diagnostics(local, self.process_reward.last_lengths, mine_verifier)
        for name, value in signals.items():
            if not np.isnan(value):
                self._metrics[mode][f"prm/{name}"].append(value)
        return out


def _trainer_class():
    from trl import GRPOTrainer

    from prmkit.rewards.trl_generate import DropEndedRows
    from prmkit.rewards.trl_trim import TrimmedLogps
    from prmkit.training.distributed import import_deepspeed_only_when_used

    import_deepspeed_only_when_used()

    class ProcessRewardGRPOTrainer(_Base, TrimmedLogps, DropEndedRows, GRPOTrainer):
        """GRPOTrainer whose advantages are (B, T) process credits (prmkit.rewards.credit).

        credit: "process", "min", "softmin", "clip_delta" or "outcome"; credit_kwargs: their
        settings (eps, temperature, eta, clip, delta; baseline "step" or "token" for min and
        softmin, the trainer counting each step's tokens); verifier_weight: weight of a
        `VerifierReward` among reward_funcs, mixed in group-normalised. TRL's own scalar
        rewards are still computed and logged (rewards/prm/mean, ...); the batch's hacking
        signals are logged as prm/*. The loss's log-probabilities run on length-sorted,
        trimmed chunks, each group's prompt once (`prmkit.rewards.trl_trim`; `trim_rows = 0`
        and `share_prompts = False` restore TRL's pass); its sampling takes each completion
        out of the batch as it ends (`prmkit.rewards.trl_generate`; `drop_ended_rows = False`
        restores `generate`).
        """

        def __init__(self, *args, credit: str = "min", verifier_weight: float = 0.0,
                     credit_kwargs: dict | None = None, **kwargs):
            check_trl_interface(GRPOTrainer)
            credit_rule(credit)
            funcs = kwargs.get("reward_funcs")
            funcs = funcs if isinstance(funcs, list) else [funcs]
            if sum(isinstance(f, ProcessReward) for f in funcs) != 1:
                raise PrmkitError("reward_funcs needs exactly one prmkit ProcessReward")
            super().__init__(*args, **kwargs)
            self._init_credit(credit, verifier_weight, credit_kwargs)

    return ProcessRewardGRPOTrainer


def __getattr__(name: str):
    if name == "ProcessRewardGRPOTrainer":  # built on first use: importing needs no TRL
        cls = _trainer_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module 'prmkit.rewards.trl' has no attribute {name!r}")
