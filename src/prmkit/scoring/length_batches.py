"""Rows grouped into forward passes by length, cached-prefix tokens counted.

The Scorer batches encoded solutions (a completion on its prompt's cached keys/values
has that prompt as its past); the IncrementalScorer batches rows of new steps on top of
cached prefixes. Both use `length_batches`.
"""

from __future__ import annotations

from collections.abc import Sequence


def length_batches(lengths: Sequence[int], past: Sequence[int] | None = None, *,
                   token_budget: int, max_padding: float, past_budget: int | None = None,
                   max_batch_size: int | None = None) -> list[list[int]]:
    """Indices of `lengths` (tokens a row runs) in batches, longest first (ties keep
    their order in `lengths`). `past`: the cached tokens each row reads (default none);
    a batch pads every row to its longest and to its widest past. A row starts a new
    batch when the batch already has max_batch_size rows, when it is shorter than the
    batch's longest by more than max_padding of it, or when the batch would outgrow its
    budget: rows x (longest + widest past) > token_budget, or, with past_budget given,
    rows x longest > token_budget or rows x widest past > past_budget. A row over the
    budget alone gets a batch of its own."""
    past = past or [0] * len(lengths)
    order = sorted(range(len(lengths)), key=lambda k: -lengths[k])
    batches, group, widest = [], [], 0
    for k in order:
        longest = lengths[group[0]] if group else lengths[k]
        rows, wide = len(group) + 1, max(widest, past[k])
        full = max_batch_size is not None and len(group) >= max_batch_size
        too_short = longest - lengths[k] > max_padding * longest
        if past_budget is None:
            too_big = rows * (longest + wide) > token_budget
        else:
            too_big = rows * longest > token_budget or rows * wide > past_budget
        if group and (full or too_short or too_big):
            batches.append(group)
            group, widest = [], 0
        group.append(k)
        widest = max(widest, past[k])
    if group:
        batches.append(group)
    return batches
