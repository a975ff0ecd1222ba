"""What the engine runs: `compute_step_rewards` on a loaded `Scorer`, and token bounds.

The engine's budgets count an item's tokens before it is tokenised, by an upper bound from
its bytes (`token_bounds`): every token of a byte-level BPE tokenizer (GPT-2, Llama 3,
Qwen 2, SmolLM2 and the tiny models prmkit builds) stands for at least one byte of UTF-8
text, so the tokens the PRM reads of an item are at most the UTF-8 bytes of its prompt and
completion plus what prmkit's format adds: the prompt template's own bytes, a BOS token and
one step separator after the last step (the separators between steps are in the text
already). A SentencePiece tokenizer (Llama 2, Mistral) prepends a word-start token to
each segment it encodes ("1" -> "▁", "1") and encodes the 2 bytes of "\n\n" in 3 tokens,
so there the bound is an estimate, short by at most 2 tokens a step and 1 for the prompt
(checked on a SentencePiece-style tokenizer). Each item is then tokenised once, when its
batch is scored; the encoder's caches are kept small so that a large request's steps do
not stay in memory after it (`bound_caches`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from prmkit.errors import PrmkitError
from prmkit.rewards.contract import CompletionRewards, compute_step_rewards
from prmkit.rewards.serving.engine import Item

STEP_CACHE = (2048, 1024)  # the encoder's step cache on a server: entries, longest step
PROMPT_CACHE = (256, 8192)  # and its prompt cache


def utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def format_overhead(scorer) -> int:
    """Tokens prmkit's format adds to an item's texts, bounded as the texts are: the prompt
    template's bytes (a chat template's too), a BOS token and one step separator's bytes;
    at least what an empty prompt with a one-byte step encodes to, less that byte."""
    from prmkit.models.formatting import render_prompt

    encoder, fmt = scorer.encoder, scorer.encoder.fmt
    tok = encoder.tokenizer
    if fmt.use_chat_template and getattr(tok, "chat_template", None):
        template = tok.apply_chat_template([{"role": "user", "content": ""}],
                                           add_generation_prompt=True, tokenize=False)
    else:
        template = render_prompt(fmt.prompt_template, "")
    by_bytes = utf8_length(template) + 1 + utf8_length(fmt.step_separator)
    try:
        probe = len(encoder.encode("", ["x"]).input_ids) - 1
    except PrmkitError:  # a layout that refuses an empty prompt
        probe = 0
    return max(by_bytes, probe)


def bound_caches(encoder, steps: tuple[int, int] = STEP_CACHE,
                 prompts: tuple[int, int] = PROMPT_CACHE) -> None:
    """Keep `encoder`'s step and prompt caches small: (entries, longest text cached) each.
    Training caches a million steps (PRM800K repeats them); a server's requests rarely
    repeat a step, and a long text's ids would stay in memory long after its request."""
    for name, (size, longest) in (("step_ids", steps), ("prompt_ids", prompts)):
        cached = getattr(encoder, name, None)
        if getattr(cached, "prmkit_bounded", False) or not hasattr(cached, "__wrapped__"):
            continue
        setattr(encoder, name, _small_cache(cached.__wrapped__, size, longest))


def _small_cache(fn, size: int, longest: int):
    cached = lru_cache(maxsize=size)(fn)

    def lookup(text: str):
        return cached(text) if len(text) <= longest else fn(text)

    lookup.cache_info, lookup.cache_clear = cached.cache_info, cached.cache_clear
    lookup.__wrapped__, lookup.prmkit_bounded = fn, True
    return lookup


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
        self.overhead = format_overhead(scorer)
        bound_caches(scorer.encoder)

    @classmethod
    def from_pretrained(cls, folder: str | Path, *, token_budget: int = 16384,
                        dtype: str | None = "auto", device: str | None = "auto",
                        policy_tokenizer=None, aggregation: str | None = None,
                        share_prefixes: bool = True) -> ScorerBackend:
        from prmkit.scoring import Scorer

        scorer = Scorer.from_pretrained(folder, token_budget=token_budget, dtype=dtype,
                                        device=device, share_prefixes=share_prefixes)
        return cls(scorer, policy_tokenizer=policy_tokenizer, aggregation=aggregation)

    def token_bounds(self, items: Sequence[Item]) -> list[int]:
        """An upper bound on the tokens the PRM reads of each item (module docstring),
        without tokenising; when the scorer shares prefixes, a prompt repeated within
        `items` counts once."""
        sharing = getattr(self.scorer, "shares_prefixes", False)
        seen: set[str] = set()
        out = []
        for it in items:
            n = self.overhead + utf8_length(it.completion or "")
            if not (sharing and it.prompt in seen):
                n += utf8_length(it.prompt)
                seen.add(it.prompt)
            out.append(n)
        return out

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
