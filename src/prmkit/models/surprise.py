"""What the backbone's own language model thinks of the tokens a label reads.

`surprise_features` gives, for each label position, the backbone's log-probability of
each of the last W tokens of the sequence up to and including that position (the step's
own tokens for a step label: its result, the operands before it), read from the LM head
at each token's predecessor. A reward model whose head sees these (`surprise_window`
in RewardModelConfig) can check a step's arithmetic the way its backbone computes it,
without first learning, from a few thousand labels, a circuit that compares a written
value with the one it expects: small backbones do not learn that circuit (the demo's
measurements, docs/demo-world.md), large ones can.

With `step` (`surprise_step` in RewardModelConfig) the head also reads three numbers over
the label's own step, the tokens back to the previous token equal to the label's (the step
separator's last token; the label's own token, the end of the step, counted): the
probability of the whole step as the backbone writes it, its log-probability and that of
its least likely token. That is the base's own check of a whole step (a miscopied operand,
a skipped step) in one number, where the head would otherwise have to learn to add
per-token readings whose offsets move with the step's length.

A token's predecessor is the previous token of its own sequence: t - 1 in a padded row,
the last earlier token of the same path in a prefix tree (`TreeMask` or a [B, L, L]
mask), nothing at a sequence's first token (log-probability 0, "no surprise").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from prmkit.models.attention import TreeMask

LOGPROB_FLOOR = -20.0  # log-probabilities below this are clamped, then scaled to [-1, 0]


STEP_FEATURES = 3


def feature_size(window: int, step: bool = False) -> int:
    """Features per label: each token's probability and its scaled log-probability, and
    with `step` the step's probability, log-probability and least likely token."""
    return 2 * window + (STEP_FEATURES if step else 0)


def predecessors(rows: torch.Tensor, t: torch.Tensor, attention_mask, position_ids,
                 length: int) -> torch.Tensor:
    """Index of the previous token of the same sequence for tokens (rows[k], t[k]); -1 for
    none (a first token, padding, or t < 0)."""
    if isinstance(attention_mask, TreeMask) or (
            attention_mask is not None and attention_mask.dim() == 3):
        earlier = torch.arange(length, device=t.device)[None, :] < t[:, None]
        if isinstance(attention_mask, TreeMask):
            seg = attention_mask.segments
            own = seg[rows, t.clamp_min(0)]
            allowed = attention_mask.ancestry[rows[:, None], own[:, None], seg[rows]]
        else:
            allowed = attention_mask[rows, t.clamp_min(0)].bool()
        allowed = allowed & earlier
        idx = torch.arange(length, device=t.device).expand_as(allowed)
        prev = torch.where(allowed, idx, -1).max(dim=1).values
    else:
        prev = t - 1
        ok = prev >= 0
        if position_ids is not None:  # rows packed end to end restart their positions
            pos = position_ids[rows, t.clamp_min(0)]
            ok = ok & (pos > 0)
        if attention_mask is not None:
            ok = ok & attention_mask[rows, prev.clamp_min(0)].bool()
        prev = torch.where(ok, prev, -1)
    return torch.where(t >= 0, prev, -1)


def all_predecessors(attention_mask, position_ids, shape: torch.Size,
                     device: torch.device) -> torch.Tensor:
    """[B, L]: `predecessors` of every token. In a tree, t - 1 is the predecessor of every
    token that may attend to it (the latest earlier token); the general rule runs only for
    the others (a row's first token, a segment's first token after another branch)."""
    b, n = shape
    rows = torch.arange(b, device=device).repeat_interleave(n)
    t = torch.arange(n, device=device).repeat(b)
    if isinstance(attention_mask, TreeMask):
        seg = attention_mask.segments
        direct = attention_mask.ancestry[torch.arange(b, device=device)[:, None],
                                         seg[:, 1:], seg[:, :-1]]
    elif attention_mask is not None and attention_mask.dim() == 3:
        direct = attention_mask[:, 1:, :-1].diagonal(dim1=1, dim2=2).bool()
    else:
        return predecessors(rows, t, attention_mask, position_ids, n).view(b, n)
    direct = torch.cat([torch.zeros(b, 1, dtype=torch.bool, device=device), direct], dim=1)
    out = torch.where(direct, torch.arange(-1, n - 1, device=device).expand(b, n), -1)
    other = (~direct).flatten().nonzero().squeeze(1)
    out.view(-1)[other] = predecessors(rows[other], t[other], attention_mask, position_ids, n)
    return out


def surprise_features(lm_head: torch.nn.Module, hidden: torch.Tensor, input_ids: torch.Tensor,
                      label_positions: torch.Tensor, window: int, attention_mask=None,
                      position_ids=None, step: bool = False) -> torch.Tensor:
    """[K, 2W] fp32 (with `step` [K, 2W + 3]): per label, for its last W tokens (the label's
    own token first), the backbone's probability of the token and max(log p, -20) / 20; 0
    where the sequence has fewer tokens. With `step`, over the tokens of those W that are
    the label's own step: exp(sum of log p), max(sum, -20) / 20, min(log p) / 20."""
    rows, t = label_positions[:, 0], label_positions[:, 1]
    before = all_predecessors(attention_mask, position_ids, input_ids.shape, input_ids.device)
    tokens, prevs = [], []
    for _ in range(window):
        p = torch.where(t >= 0, before[rows, t.clamp_min(0)], -1)
        tokens.append(t)
        prevs.append(p)
        t = p
    tok = torch.stack(tokens, 1)  # [K, W] the tokens, -1 past the start
    prev = torch.stack(prevs, 1)  # [K, W] where each is predicted from
    valid = (tok >= 0) & (prev >= 0)
    r = rows[:, None].expand_as(tok)
    with torch.autocast(hidden.device.type, enabled=False):
        h = hidden[r, prev.clamp_min(0)].float()
        logp = F.log_softmax(h @ lm_head.weight.float().T + _bias(lm_head), dim=-1)
    lp = logp.gather(-1, input_ids[r, tok.clamp_min(0)].unsqueeze(-1)).squeeze(-1)
    lp = torch.where(valid, lp.clamp_min(LOGPROB_FLOOR), torch.zeros_like(lp))
    features = [lp.exp(), lp / -LOGPROB_FLOOR]
    if step:
        features.append(_step_sums(lp, input_ids[r, tok.clamp_min(0)], tok >= 0))
    return torch.cat(features, dim=-1)


def _step_sums(lp: torch.Tensor, ids: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """[K, 3] from a window's log-probabilities and token ids [K, W] (label's token first):
    the tokens before the first earlier token equal to the label's own are its step."""
    separator = ids[:, 1:] == ids[:, :1]
    own = torch.cat([real[:, :1], real[:, 1:] & (separator.cumsum(1) == 0)], dim=1)
    mine = torch.where(own, lp, torch.zeros_like(lp))
    total = mine.sum(1)
    return torch.stack([total.exp(), total.clamp_min(LOGPROB_FLOOR) / -LOGPROB_FLOOR,
                        mine.min(1).values / -LOGPROB_FLOOR], dim=1)


def _bias(lm_head: torch.nn.Module):
    bias = getattr(lm_head, "bias", None)
    return 0.0 if bias is None else bias.float()
