"""A reward model that keeps some language-modelling loss while it learns its labels.

`LMKeepingRewardModel.forward` returns the same class logits as `StepRewardModel`; while
gradients are on, it also computes the next-token loss of the base's own LM head on the
batch's tokens (the problem and the solution, as the reward model reads them), and adds
`lm_loss_weight` times it to the loss the trainer backpropagates, through the logits. The
trainer is unchanged: its label loss of a window is a mean over the window's labels, so with
one micro-batch per optimizer step (`grad_accum=1`, the demo's setting) the step minimises
label loss + `lm_loss_weight` x mean next-token loss exactly. Only consecutive tokens of one
sequence are predicted (same packed segment, position + 1), so packing adds no
cross-document targets. Weight 0 is a plain `StepRewardModel`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from prmkit.models.attention import TreeMask
from prmkit.models.reward_model import StepRewardModel


class _WithAuxLoss(torch.autograd.Function):
    """Identity on `logits`; backward also sends gradient `weight` to the scalar `aux`."""

    @staticmethod
    def forward(ctx, logits, aux, weight: float):
        ctx.weight = weight
        return logits.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, torch.full((), ctx.weight, dtype=torch.float32, device=grad.device), None


def next_token_pairs(attention_mask, position_ids: torch.Tensor) -> torch.Tensor:
    """[B, L-1] bool: token t+1 of a row is the next token of the sequence token t is in."""
    step = position_ids[:, 1:] == position_ids[:, :-1] + 1
    if attention_mask is None:
        return step
    if isinstance(attention_mask, TreeMask):
        seg = attention_mask.segments
        return step & (seg[:, 1:] == seg[:, :-1])
    if attention_mask.dim() == 3:  # [B, L, L] True = may attend
        idx = torch.arange(attention_mask.shape[1] - 1, device=attention_mask.device)
        return step & attention_mask[:, idx + 1, idx].bool()
    real = attention_mask.bool()
    return step & real[:, 1:] & real[:, :-1]


def lm_loss(model: StepRewardModel, hidden: torch.Tensor, input_ids: torch.Tensor,
            attention_mask, position_ids: torch.Tensor | None) -> torch.Tensor:
    """Mean next-token cross-entropy of the backbone's LM head over the batch's sequences."""
    if position_ids is None:
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    keep = next_token_pairs(attention_mask, position_ids)
    logits = model.backbone.get_output_embeddings()(hidden[:, :-1][keep])
    return F.cross_entropy(logits.float(), input_ids[:, 1:][keep])


class LMKeepingRewardModel(StepRewardModel):
    """StepRewardModel trained with label loss + lm_loss_weight x next-token loss."""

    lm_loss_weight: float = 0.0
    last_lm_loss: float | None = None  # the latest training batch's next-token loss

    def forward(self, input_ids, label_positions, attention_mask=None, position_ids=None):
        hidden = self.hidden_states(input_ids, attention_mask, position_ids)
        logits = self.label_logits(hidden, input_ids, label_positions, attention_mask,
                                   position_ids)
        if self.lm_loss_weight <= 0 or not torch.is_grad_enabled():
            return logits
        aux = lm_loss(self, hidden, input_ids, attention_mask, position_ids)
        self.last_lm_loss = float(aux.detach())
        return _WithAuxLoss.apply(logits, aux, float(self.lm_loss_weight))
