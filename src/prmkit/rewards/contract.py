"""The step-reward contract: (prompt, completion) -> per-step rewards, which every adapter
(TRL, verl, OpenRLHF, the reward server) calls.

A completion is split into steps by the PRM's own step separator (`split_steps`, the one
formatting module), its prompt read without surrounding whitespace or trailing separators
(`strip_prompt`), all steps of a completion are scored in one forward pass and many
completions in token-budgeted batches (`Scorer`). Each step gets its probability of being
correct, its character span in the completion and, when the caller gives the policy's
tokenizer (and optionally the generated token ids), the index of the policy token that
ends the step: the PRM's tokenizer may differ from the policy's, so positions go through
characters, never through PRM token indices. Generated ids must be the policy
tokenizer's and decode to their completion (checked before scoring); they are decoded
once, token after token, so many short steps cost no more than a few long ones.

`response_text` is the one rule for a query that is prompt + response (OpenRLHF's reward
file and the reward server's /get_reward): the response follows the prompt, or the end of
a prompt whose start was cut; a query holding none of its prompt has no response (no
steps, the null score), never an error.

Null rule (prmkit.scoring.aggregate): a step cut by the PRM's max_length has probability
None and counts as NULL_STEP_SCORE in the completion's score; a completion without steps
(empty, whitespace, not a string) has no steps and score None, as has one whose every step
is None. Nothing raises mid-batch: input types are checked before any scoring.
"""

from __future__ import annotations

import bisect
import copy
import functools
import itertools
import logging
import operator
from collections.abc import Sequence
from dataclasses import dataclass

from prmkit.errors import PrmkitError
from prmkit.models.formatting import split_steps, strip_prompt
from prmkit.scoring.aggregate import Aggregation, aggregate

try:  # tokenizers >= 0.21
    from tokenizers.decoders import DecodeStream as _DecodeStream
except ImportError:
    _DecodeStream = None

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

    With token ids, positions come from decoding the ids one after another, as the
    completion text was decoded (`skip_special_tokens=True`, as TRL and verl decode): one
    pass, so the cost grows with the ids, not with ids x steps; with the tokenizer alone,
    from the offset mapping of the completion re-tokenised.
    """

    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=self.skip_special_tokens)

    def token_ends_from_text(self, text: str, char_ends: Sequence[int]) -> list[int | None]:
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        token_ends = [e for _, e in enc["offset_mapping"]]  # non-decreasing
        if not token_ends:
            return [None] * len(char_ends)
        return [min(bisect.bisect_left(token_ends, end), len(token_ends) - 1)
                for end in char_ends]

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The text each token adds when `ids` are decoded one after another (empty for a
        token that only starts a character, or a skipped special token): the tokenizer's
        own stream decoder, or, without one, each token decoded after the few before it."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None and _DecodeStream is not None:
            stream = _DecodeStream(skip_special_tokens=self.skip_special_tokens)
            return [stream.step(backend, i) or "" for i in ids]
        out, start, read = [], 0, 0  # ids[start:read]: context already turned into text
        for i in range(len(ids)):
            before, after = self.decode(ids[start:read]), self.decode(ids[start: i + 1])
            if len(after) > len(before) and not after.endswith("\ufffd") \
                    and after.startswith(before):
                out.append(after[len(before):])
                start, read = read, i + 1
            else:
                out.append("")
        return out

    def token_ends_from_ids(self, ids: Sequence[int], char_ends: Sequence[int]) -> list[int | None]:
        """For each char end, the first token whose decoding reaches it (the last token when
        the ids decode to less text than that)."""
        ids = [int(t) for t in ids]
        if not ids:
            return [None] * len(char_ends)
        pieces, text = self.pieces(ids), self.decode(ids)
        if "\ufffd" in text:  # broken bytes: prefix lengths need not grow, scan them in order
            return self._ends_by_prefix_scan(ids, char_ends)
        if "".join(pieces) != text:  # a decoder the stream cannot follow
            return self._ends_by_prefix_decoding(ids, char_ends)
        reach = list(itertools.accumulate(map(len, pieces)))
        return [min(bisect.bisect_left(reach, end), len(ids) - 1) for end in char_ends]

    def _ends_by_prefix_scan(self, ids: list[int], char_ends: Sequence[int]) -> list[int]:
        """The first token whose decoded prefix reaches each end, in token order: exact
        where a prefix may decode to a replacement character (quadratic; such text only)."""
        out, i = [], 0
        for end in char_ends:
            while i < len(ids) - 1 and len(self.decode(ids[: i + 1])) < end:
                i += 1
            out.append(i)
        return out

    def _ends_by_prefix_decoding(self, ids: list[int], char_ends: Sequence[int]) -> list[int]:
        """Binary search over decoded prefixes: exact for any decoder, O(n log n) decodes."""
        reach = functools.lru_cache(maxsize=None)(lambda i: len(self.decode(ids[: i + 1])))
        out = []
        for end in char_ends:
            lo, hi = 0, len(ids) - 1
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if reach(mid) >= end else (mid + 1, hi)
            out.append(lo)
        return out

    def ids_problem(self, ids, text: str | None) -> str | None:
        """Why `ids` cannot be the policy's tokens of `text` (None when they can): an id that
        is not an int in the tokenizer's range, or a decoding other than the text (trailing
        whitespace aside)."""
        size, checked = len(self.tokenizer), []
        for k, t in enumerate(ids):
            try:
                checked.append(operator.index(t))
            except TypeError:
                checked.append(-1)
            if not 0 <= checked[-1] < size:
                return (f"id {t!r} at position {k} is not a token id of the policy tokenizer "
                        f"(0 to {size - 1})")
        decoded = self.decode(checked)
        if isinstance(text, str) and decoded.rstrip() != text.rstrip():
            return (f"they decode to {_excerpt(decoded)}, not to the completion "
                    f"{_excerpt(text)} (decoded with skip_special_tokens=True)")
        return None


def _excerpt(text: str, n: int = 40) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")


# End-of-turn and padding tokens that end a decoded response (OpenRLHF decodes with them).
END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|end|>",
              "</s>", "<eos>", "<pad>", "<|pad|>")
MIN_PROMPT_TAIL = 16  # characters of a left-truncated prompt that identify it


def _tail_overlap(prompt: str, head: str) -> int:
    """The length of the longest end of `prompt` that `head` starts with (KMP: linear)."""
    pattern = head[: len(prompt)]
    if not pattern:
        return 0
    fail, k = [0] * len(pattern), 0
    for i in range(1, len(pattern)):
        while k and pattern[i] != pattern[k]:
            k = fail[k - 1]
        k += pattern[i] == pattern[k]
        fail[i] = k
    k = 0
    for ch in prompt:
        while k and (k == len(pattern) or ch != pattern[k]):
            k = fail[k - 1]
        k += k < len(pattern) and ch == pattern[k]
    return k


def response_text(query: str, prompt: str, special: Sequence[str] = END_TOKENS) -> str | None:
    """The response in a query that is prompt + response decoded with special tokens (as
    OpenRLHF sends it), without trailing special tokens: what follows the prompt; where the
    query holds only the prompt's end (OpenRLHF cuts a long prompt's start, and the first
    token may decode to a broken character), what follows that end, if it is at least
    MIN_PROMPT_TAIL characters (or the whole prompt). None when the query holds neither:
    there is no response to grade."""
    at = query.find(prompt)
    if at >= 0:
        start = at + len(prompt)
    else:
        head = query.lstrip("\ufffd")
        overlap = _tail_overlap(prompt, head)
        if overlap < min(MIN_PROMPT_TAIL, len(prompt)):
            return None
        start = len(query) - len(head) + overlap
    text, stripped = query[start:], True
    while stripped:
        stripped = False
        text = text.rstrip()
        for tok in special:
            if tok and text.endswith(tok):
                text, stripped = text[: -len(tok)], True
    return text


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
        mapper = PolicyTokens(policy_tokenizer)
        for i, (ids, text) in enumerate(zip(policy_token_ids, completions, strict=True)):
            problem = mapper.ids_problem(list(ids), text)
            if problem is not None:
                raise PrmkitError(f"policy_token_ids[{i}]: {problem}")


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
