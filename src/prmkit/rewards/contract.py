"""The step-reward contract: (prompt, completion) -> per-step rewards, which every adapter
(TRL, verl, OpenRLHF, the reward server) calls.

A completion is split into steps by the PRM's own step separator (`split_steps`, the one
formatting module), its prompt read without surrounding whitespace or trailing separators
(`strip_prompt`), all steps of a completion are scored in one forward pass and many
completions in token-budgeted batches (`Scorer`). Each step gets its probability of being
correct, its character span in the completion and, when the caller gives the policy's
tokenizer (and optionally the generated token ids), the index of the policy token that
ends the step: the PRM's tokenizer may differ from the policy's, so positions go through
characters, never through PRM token indices.

Null rule (prmkit.scoring.aggregate): a step cut by the PRM's max_length has probability
None and counts as NULL_STEP_SCORE in the completion's score; a completion without steps
(empty, whitespace, not a string) has no steps and score None, as has one whose every step
is None. Nothing raises mid-batch: input types are checked before any scoring.
"""

from __future__ import annotations

import bisect
import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from prmkit.errors import PrmkitError
from prmkit.models.formatting import split_steps, strip_prompt
from prmkit.scoring.aggregate import Aggregation, aggregate

log = logging.getLogger("prmkit.rewards")


@dataclass(frozen=True)
class StepReward:
    probability: float | None  # P(step correct); None under prmkit's null rule
    char_start: int  # the step's span in the completion text
    char_end: int
    policy_token_end: int | None = None  # the policy token ending the step, when known


@dataclass(frozen=True)
class CompletionRewards:
    steps: list[StepReward]
    score: float | None  # the configured aggregation over steps; None: no gradable step

    @property
    def probabilities(self) -> list[float | None]:
        return [s.probability for s in self.steps]


def step_spans(text: str, separator: str) -> list[tuple[int, int]]:
    """Character spans of `split_steps(text, separator)` in `text` (same steps, same
    order): each stripped piece between separators; a merged final `# Answer` step spans
    from the heading to the end of the answer."""
    spans, pos = [], 0
    for piece in text.split(separator):
        stripped = piece.strip()
        if stripped:
            lead = len(piece) - len(piece.lstrip())
            spans.append((pos + lead, pos + lead + len(stripped)))
        pos += len(piece) + len(separator)
    n = len(split_steps(text, separator)) if spans else 0
    if n < len(spans):  # split_steps merged the answer heading with what follows it
        spans = [*spans[: n - 1], (spans[n - 1][0], spans[-1][1])]
    return spans


class PolicyTokens:
    """Maps character positions of completions to policy token indices.

    With token ids, positions come from decoding prefixes of the ids exactly as the
    completion text was decoded (`skip_special_tokens=True`, as TRL and verl decode); with
    the tokenizer alone, from the offset mapping of the completion re-tokenised.
    """

    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens

    def token_ends_from_text(self, text: str, char_ends: Sequence[int]) -> list[int | None]:
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        token_ends = [e for _, e in enc["offset_mapping"]]  # non-decreasing
        if not token_ends:
            return [None] * len(char_ends)
        return [min(bisect.bisect_left(token_ends, end), len(token_ends) - 1)
                for end in char_ends]

    def token_ends_from_ids(self, ids: Sequence[int], char_ends: Sequence[int]) -> list[int | None]:
        """For each char end, the first token i such that decoding ids[:i+1] reaches it
        (binary search over prefix decodes; prefix lengths never shrink)."""
        ids = list(ids)
        cache: dict[int, int] = {}

        def reach(i: int) -> int:
            if i not in cache:
                cache[i] = len(self.tokenizer.decode(
                    ids[: i + 1], skip_special_tokens=self.skip_special_tokens))
            return cache[i]

        out: list[int | None] = []
        for end in char_ends:
            lo, hi = 0, len(ids) - 1
            if hi < 0:
                out.append(None)
                continue
            if reach(hi) < end:  # the text has more than the ids decode to
                out.append(hi)
                continue
            while lo < hi:
                mid = (lo + hi) // 2
                if reach(mid) >= end:
                    hi = mid
                else:
                    lo = mid + 1
            out.append(lo)
        return out


def _check_inputs(prompts, completions, policy_token_ids, policy_tokenizer) -> None:
    if len(prompts) != len(completions):
        raise PrmkitError(f"{len(prompts)} prompts but {len(completions)} completions")
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise PrmkitError(f"prompts[{i}] is {type(p).__name__}, not str")
    if (policy_tokenizer is not None and policy_token_ids is None
            and not getattr(policy_tokenizer, "is_fast", False)):
        raise PrmkitError("a slow policy tokenizer has no offset mapping: give policy_token_ids "
                          "too, or a fast tokenizer")
    if policy_token_ids is not None:
        if policy_tokenizer is None:
            raise PrmkitError("policy_token_ids need policy_tokenizer (to decode them)")
        if len(policy_token_ids) != len(completions):
            raise PrmkitError(f"{len(policy_token_ids)} policy_token_ids rows but "
                              f"{len(completions)} completions")


def _score_all(scorer, items: list) -> list[list[float | None]]:
    """Step probabilities of every item; when the batch fails on an item the PRM cannot
    encode (PrmkitError), the items are scored one by one and that one's steps are null."""
    try:
        return scorer.score(items)
    except PrmkitError as e:
        log.warning("scoring the batch failed (%s); scoring its items one by one", e)
    out = []
    for problem, steps in items:
        try:
            out.append(scorer.score([(problem, steps)])[0])
        except PrmkitError as e:
            log.warning("a completion the PRM cannot encode gets null steps: %s", e)
            out.append([None] * (1 if steps and scorer.config.objective == "orm" else len(steps)))
    return out


def scorer_aggregation(scorer, aggregation: str | Aggregation | None = None) -> Aggregation:
    """The aggregation to use: the given one, else the PRM's configured one; an outcome
    model's single score is its own (last)."""
    if scorer.config.objective == "orm":
        return Aggregation.LAST
    return Aggregation(aggregation or scorer.config.aggregation)


def compute_step_rewards(scorer, prompts: Sequence[str], completions: Sequence[str], *,
                         policy_tokenizer=None, policy_token_ids=None,
                         max_tokens_per_batch: int | None = None,
                         aggregation: str | Aggregation | None = None
                         ) -> list[CompletionRewards]:
    """Per-step rewards of each completion, in input order (see the module docstring).

    scorer: a `prmkit.scoring.Scorer`. prompts: the problem text the PRM sees before the
    steps (surrounding whitespace and trailing step separators aside: `strip_prompt`, so
    that a prompt as a policy's template renders it, "...?\n\n", gets the rewards of the
    bare problem). max_tokens_per_batch: the scorer's token budget for this call. aggregation:
    overrides the PRM's configured aggregation for `score`.
    """
    _check_inputs(prompts, completions, policy_token_ids, policy_tokenizer)
    method = scorer_aggregation(scorer, aggregation)
    if max_tokens_per_batch is not None and max_tokens_per_batch != scorer.token_budget:
        if max_tokens_per_batch < 1:
            raise PrmkitError(f"max_tokens_per_batch must be positive, got {max_tokens_per_batch}")
        scorer = copy.copy(scorer)  # same model, another budget
        scorer.token_budget = int(max_tokens_per_batch)
    sep = scorer.encoder.fmt.step_separator
    problems = [strip_prompt(p, sep) for p in prompts]
    texts = [c if isinstance(c, str) else "" for c in completions]
    steps = [split_steps(t, sep) for t in texts]
    spans = [step_spans(t, sep) for t in texts]
    probs = _score_all(scorer, list(zip(problems, steps, strict=True)))
    mapper = PolicyTokens(policy_tokenizer) if policy_tokenizer is not None else None
    out = []
    for i, (text, sp, p) in enumerate(zip(texts, spans, probs, strict=True)):
        if scorer.config.objective == "orm" and sp:  # one score for the whole completion
            sp = [(sp[0][0], sp[-1][1])]
        ends: list[int | None] = [None] * len(sp)
        if mapper is not None and sp:
            char_ends = [e for _, e in sp]
            ends = (mapper.token_ends_from_ids(policy_token_ids[i], char_ends)
                    if policy_token_ids is not None
                    else mapper.token_ends_from_text(text, char_ends))
        rewards = [StepReward(q, s, e, t) for q, (s, e), t in zip(p, sp, ends, strict=True)]
        gradable = any(q is not None for q in p)
        out.append(CompletionRewards(rewards, aggregate(p, method) if gradable else None))
    return out
