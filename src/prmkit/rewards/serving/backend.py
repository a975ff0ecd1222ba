"""What the engine runs: `compute_step_rewards` on a loaded `Scorer`, and token counts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prmkit.rewards.contract import CompletionRewards, compute_step_rewards
from prmkit.rewards.serving.engine import Item


class ScorerBackend:
    """The score and count functions of a `RewardEngine` over one `Scorer`.

    policy_tokenizer: the policy's tokenizer (a tokenizer or a folder), for the index of
    the policy token ending each step; aggregation: overrides the PRM's configured one.
    `from_pretrained` scores with share_prefixes (completions of one prompt in a batch
    read the prompt once, see prmkit.scoring.prefix_batches) unless told otherwise.
    """

    def __init__(self, scorer, policy_tokenizer=None, aggregation: str | None = None):
        if isinstance(policy_tokenizer, str | Path):
            from transformers import AutoTokenizer

            policy_tokenizer = AutoTokenizer.from_pretrained(str(policy_tokenizer))
        self.scorer = scorer
        self.policy_tokenizer = policy_tokenizer
        self.aggregation = aggregation
        self.tokenizer = scorer.model.tokenizer

    @classmethod
    def from_pretrained(cls, folder: str | Path, *, token_budget: int = 16384,
                        dtype: str | None = "auto", device: str | None = "auto",
                        policy_tokenizer=None, aggregation: str | None = None,
                        share_prefixes: bool = True) -> ScorerBackend:
        from prmkit.scoring import Scorer

        scorer = Scorer.from_pretrained(folder, token_budget=token_budget, dtype=dtype,
                                        device=device, share_prefixes=share_prefixes)
        return cls(scorer, policy_tokenizer=policy_tokenizer, aggregation=aggregation)

    def count_tokens(self, items: Sequence[Item]) -> list[int]:
        """Tokens of prompt + completion (a close estimate of what one forward reads); when
        the scorer shares prefixes, a prompt repeated within `items` counts once."""
        enc = self.tokenizer([it.prompt + (it.completion or "") for it in items],
                             add_special_tokens=False)["input_ids"]
        counts = [len(ids) for ids in enc]
        if not getattr(self.scorer, "shares_prefixes", False):
            return counts
        prompts = list(dict.fromkeys(it.prompt for it in items))
        enc = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        prompt_tokens = dict(zip(prompts, map(len, enc), strict=True))
        seen: set[str] = set()
        for i, it in enumerate(items):
            if it.prompt in seen:
                counts[i] = max(1, counts[i] - prompt_tokens[it.prompt])
            seen.add(it.prompt)
        return counts

    def score(self, items: Sequence[Item]) -> list[CompletionRewards]:
        """Step rewards of `items` in order: one call of the contract for the items without
        policy token ids and one for those with them."""
        out: list[CompletionRewards | None] = [None] * len(items)
        with_ids = [i for i, it in enumerate(items) if it.policy_token_ids is not None]
        without = [i for i, it in enumerate(items) if it.policy_token_ids is None]
        for group in (without, with_ids):
            if not group:
                continue
            ids = ([list(items[i].policy_token_ids) for i in group] if group is with_ids
                   else None)
            results = compute_step_rewards(
                self.scorer, [items[i].prompt for i in group],
                [items[i].completion for i in group], policy_tokenizer=self.policy_tokenizer,
                policy_token_ids=ids, aggregation=self.aggregation)
            for i, r in zip(group, results, strict=True):
                out[i] = r
        return out
