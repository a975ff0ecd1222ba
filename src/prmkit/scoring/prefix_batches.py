"""Scoring batches in which the completions of one prompt reuse the prompt's keys and values.

Best-of-N pools and RL rollouts reach a reward model with several completions of each
prompt. With `Scorer(share_prefixes=True)` a shared prompt runs once, with the key/value
cache on (`PromptCache`), and each of its completions then runs in a row of its own on
top of that cache: the prompt's keys and values right-aligned as the row's past (rows of
shorter prompts left-padded, masked out), a 2D attention mask over past + completion,
positions continuing after the prompt. Each completion is computed as in a row of its own
(the same scores within float rounding) while its prompt's tokens are not run again, and
attention covers prompt x completion pairs only (no completion sees a sibling).

When prompts are shared (`pays`): the prompts of a wave run in forwards of their own,
and a forward costs a fixed part (every weight read once) plus its tokens; sharing saves
(n - 1) x p tokens for n completions of a p-token prompt. So the prompts of a wave are
shared when the tokens they save reach the fixed part of a forward, in tokens
(`MIN_SAVED_TOKENS`; measured with SmolLM2-135M on one CPU thread: 23 to 29 tokens,
`benchmarks/bench_scoring_throughput.py`). A prompt with a single completion is never
shared.

Works for prefix-stable encodings (`SegmentEncoder`: the encoding of a solution starts
with the encoding of its prompt), which is why the key of a group is the prompt's token
ids, not its text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

MIN_SAVED_TOKENS = 32  # prompt tokens a wave must save to share its prompts (measured)


def pays(groups: dict[tuple[int, ...], list[int]], min_saved_tokens: int = MIN_SAVED_TOKENS
         ) -> bool:
    """Whether sharing the prompts of `groups` ({prompt ids: items}) saves enough tokens."""
    saved = sum((len(items) - 1) * len(prompt) for prompt, items in groups.items())
    return saved > 0 and saved >= min_saved_tokens


@dataclass
class PromptCache:
    """Distinct prompts (token ids) whose keys/values the batches of one wave read: run
    by the first batch that needs them, dropped after the last (`users` batches)."""

    prompts: list[tuple[int, ...]]
    batches: list[list[int]] = field(default_factory=list)  # prompt indices per forward
    users: int = 0
    kv: list[torch.Tensor] = field(default_factory=list)  # per prompt [2, layers, kv, p, d]
    tails: list[torch.Tensor] = field(default_factory=list)  # per prompt: last hidden states

    def plan(self, token_budget: int) -> None:
        """Prompt forwards, longest first, each within the token budget (rows x longest):
        padding costs a prompt forward little beside its fixed part."""
        order = sorted(range(len(self.prompts)), key=lambda g: -len(self.prompts[g]))
        self.batches = []
        for g in order:
            last = self.batches[-1] if self.batches else None
            if last and (len(last) + 1) * len(self.prompts[last[0]]) <= token_budget:
                last.append(g)
            else:
                self.batches.append([g])

    def ensure(self, decoder, pad_id: int, keep: int, device: torch.device) -> None:
        """Run the prompts (in `batches`, right-padded) unless done; keep each prompt's
        keys/values and its last `keep` hidden states."""
        if self.kv:
            return
        kv: list[torch.Tensor | None] = [None] * len(self.prompts)
        tails: list[torch.Tensor | None] = [None] * len(self.prompts)
        for group in self.batches:
            lengths = [len(self.prompts[g]) for g in group]
            width = max(lengths)
            ids = torch.full((len(group), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(group), width), dtype=torch.long)
            for r, g in enumerate(group):
                ids[r, : lengths[r]] = torch.tensor(self.prompts[g], dtype=torch.long)
                mask[r, : lengths[r]] = 1
            padded = not bool(mask.all())
            out = decoder(input_ids=ids.to(device),
                          attention_mask=mask.to(device) if padded else None, use_cache=True)
            layers = out.past_key_values.layers
            both = torch.stack([torch.stack([layer.keys, layer.values]) for layer in layers],
                               dim=1)  # [2, layers, rows, kv, width, d]
            for r, g in enumerate(group):
                kv[g] = both[:, :, r, :, : lengths[r]].clone()
                if keep:
                    tails[g] = out.last_hidden_state[r, max(0, lengths[r] - keep): lengths[r]]
        self.kv, self.tails = kv, tails

    def release(self) -> None:
        """One batch fewer reads the cache; the last one frees it."""
        self.users -= 1
        if self.users <= 0:
            self.kv, self.tails = [], []

    def past(self, which: list[int], width: int):
        """A DynamicCache for rows reading prompts `which`, right-aligned in `width`
        columns (left-padded)."""
        from transformers import DynamicCache

        ref = self.kv[which[0]]
        two, layers, heads, _, dim = ref.shape
        kv = ref.new_zeros((two, layers, len(which), heads, width, dim))
        for r, g in enumerate(which):
            p = self.kv[g].shape[-2]
            kv[:, :, r, :, width - p:] = self.kv[g]
        return DynamicCache([(kv[0, i], kv[1, i]) for i in range(layers)])

    def tail_states(self, which: list[int], keep: int, dim: int):
        """The last `keep` hidden states of each row's prompt [B, keep, H] (left-padded)
        and which of them are real [B, keep]."""
        ref = self.tails[which[0]]
        hidden = ref.new_zeros((len(which), keep, dim))
        real = torch.zeros((len(which), keep), dtype=torch.long, device=ref.device)
        for r, g in enumerate(which):
            n = self.tails[g].shape[0]
            hidden[r, keep - n:] = self.tails[g]
            real[r, keep - n:] = 1
        return hidden, real


@dataclass
class SharedRows:
    """One batch of completions run on their prompts' cached keys/values."""

    cache: PromptCache
    which: list[int]  # the prompt (index in cache.prompts) of each row
    prompt_lens: list[int]
    input_ids: torch.Tensor  # [B, S] the completions' tokens, right-padded
    real: torch.Tensor  # [B, S] 1 = a real token
    label_positions: torch.Tensor  # [K, 2] (row, index in the completion)
    owners: list[tuple[int, int]]  # (item, slot) per label

    @property
    def num_tokens(self) -> int:
        return int(self.real.sum())


def group_by_prompt(encoded: Sequence) -> tuple[list[int], dict[tuple[int, ...], list[int]]]:
    """(items alone with their prompt, {prompt ids: its items} for prompts of two or more);
    items without label positions are left out. `encoded[i]` has input_ids,
    label_positions, prompt_len."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, e in enumerate(encoded):
        if e.label_positions:
            groups.setdefault(tuple(e.input_ids[: e.prompt_len]), []).append(i)
    alone = sorted(i for p, m in groups.items() if len(m) == 1 or not p for i in m)
    return alone, {p: m for p, m in groups.items() if len(m) > 1 and p}


def waves(groups: dict[tuple[int, ...], list[int]], prompt_tokens: int
          ) -> list[dict[tuple[int, ...], list[int]]]:
    """`groups` in waves whose prompts hold at most `prompt_tokens` tokens (at least one
    prompt each): the cache of one wave is all that is held at a time."""
    out: list[dict[tuple[int, ...], list[int]]] = []
    held = prompt_tokens + 1
    for prompt, members in groups.items():
        if held + len(prompt) > prompt_tokens:
            out.append({})
            held = 0
        out[-1][prompt] = members
        held += len(prompt)
    return out


def collate_shared(rows: list[int], encoded: Sequence, cache: PromptCache,
                   pad_id: int) -> SharedRows:
    """Tensors of a batch of items whose prompts are in `cache`."""
    index = {p: g for g, p in enumerate(cache.prompts)}
    which, lens = [], []
    for i in rows:
        e = encoded[i]
        which.append(index[tuple(e.input_ids[: e.prompt_len])])
        lens.append(e.prompt_len)
    width = max(len(encoded[i].input_ids) - p for i, p in zip(rows, lens, strict=True))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    real = torch.zeros((len(rows), width), dtype=torch.long)
    positions, owners = [], []
    for r, (i, p) in enumerate(zip(rows, lens, strict=True)):
        e = encoded[i]
        n = len(e.input_ids) - p
        ids[r, :n] = torch.tensor(e.input_ids[p:], dtype=torch.long)
        real[r, :n] = 1
        positions.extend((r, t - p) for t in e.label_positions)
        owners.extend((i, s) for s in e.slots)
    cache.users += 1
    return SharedRows(cache, which, lens, ids, real, torch.tensor(positions, dtype=torch.long),
                      owners)


def shared_label_logits(model, rows: SharedRows, pad_id: int, device: torch.device
                        ) -> torch.Tensor:
    """Class logits [K, C] of a `SharedRows` batch: its prompts' cache (run if needed), then
    the completions on top of it; surprise features read the prompts' last hidden states."""
    decoder = model.backbone.get_decoder()
    keep = model.config.surprise_window
    rows.cache.ensure(decoder, pad_id, keep, device)
    try:
        width = max(rows.prompt_lens)
        b, s = rows.input_ids.shape
        past = torch.zeros((b, width), dtype=torch.long)
        for r, p in enumerate(rows.prompt_lens):
            past[r, width - p:] = 1
        start = torch.tensor(rows.prompt_lens, dtype=torch.long)[:, None]
        ids, real = rows.input_ids.to(device), rows.real.to(device)
        out = decoder(input_ids=ids, attention_mask=torch.cat([past, rows.real], 1).to(device),
                      position_ids=(start + torch.arange(s)).to(device),
                      past_key_values=rows.cache.past(rows.which, width), use_cache=True)
        hidden, labels = out.last_hidden_state, rows.label_positions.to(device)
        if not keep:
            return model.label_logits(hidden, ids, labels)
        # the prompt's last hidden states before the completion's: surprise features read
        # each token's predecessor, which for a completion's first tokens is in the prompt
        tail, tail_real = rows.cache.tail_states(rows.which, keep, hidden.shape[-1])
        tail_ids = torch.full((b, keep), pad_id, dtype=torch.long)
        for r, g in enumerate(rows.which):
            prompt = rows.cache.prompts[g][-keep:]
            tail_ids[r, keep - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        shift = torch.tensor([0, keep], device=device)
        return model.label_logits(torch.cat([tail.to(hidden.dtype), hidden], 1),
                                  torch.cat([tail_ids.to(device), ids], 1), labels + shift,
                                  torch.cat([tail_real, real], 1))
    finally:
        rows.cache.release()
