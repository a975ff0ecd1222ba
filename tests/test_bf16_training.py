"""bf16 autocast (what the training recipes run) against fp32, on tree-packed and plain
batches, and the dtype of the tree attention mask the backbone receives."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from prmkit.data.records import StepExample
from prmkit.models import unit_attention
from prmkit.models.attention import TreeMask
from prmkit.models.backbones import tiny_random
from prmkit.models.config import RewardModelConfig
from prmkit.models.reward_model import StepRewardModel
from prmkit.training.batching import Batch, collate
from prmkit.training.packing import pack_examples, unpacked_rows

# bf16 keeps 8 significant bits (relative rounding 2^-8 ~ 4e-3 per operation). Through this
# 2-layer model the loss moves by ~3e-3 relative and the gradient direction by a cosine
# of ~0.9999 (measured), so rtol 2e-2 on the loss and cosine > 0.99 on the gradients
# leave a wide margin while a leaking or missing tree mask moves the loss far more.
LOSS_RTOL = 2e-2
GRAD_COSINE = 0.99
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

P1 = "Let x be a number with 2x + 3 = 11. Find x."
P2 = "How many apples? We have 17 and 25."
S1 = "Subtract 3 from both sides: 2x = 8."
# two problems, shared prefixes, alternative next steps, a soft and a conflicting label
EXAMPLES = [
    StepExample(P1, (S1, "x = 4."), (1.0, 1.0)),
    StepExample(P1, (S1, "x = 5."), (1.0, 0.0)),
    StepExample(P1, (S1, "Divide both sides by 2.", "So x = 3."), (1.0, 1.0, 0.0)),
    StepExample(P1, ("First, compute 3 * 4 = 12.",), (0.3,)),
    StepExample(P2, ("We add 17 and 25 to get 42.", "The answer is 42."), (1.0, None)),
    StepExample(P2, ("We add 17 and 25 to get 42.", "Yes, 42 apples."), (0.0, 1.0)),
]


def _model(formulation: str) -> StepRewardModel:
    backbone, tok = tiny_random(seed=1)
    model = StepRewardModel.from_backbone(backbone, tok, RewardModelConfig(formulation=formulation))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # std 0.1: logits spread well beyond bf16 rounding
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model.to(DEVICE).train()


def _batch(model: StepRewardModel, packing: str) -> Batch:
    rows = (pack_examples(EXAMPLES, model.encoder, 4096) if packing == "tree"
            else unpacked_rows(EXAMPLES, model.encoder))
    batch = collate(rows, model.tokenizer.pad_token_id).to(DEVICE)
    assert isinstance(batch.attention_mask, TreeMask) == (packing == "tree")
    return batch


def _loss_and_grads(model: StepRewardModel, batch: Batch, bf16: bool):
    model.zero_grad(set_to_none=True)
    with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=bf16):
        logits = model(batch.input_ids, batch.label_positions, batch.attention_mask,
                       batch.position_ids)
    assert logits.dtype == torch.float32
    loss = model.loss(logits, batch.targets, batch.weights)
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])
    return loss.item(), grads


def _assert_close_bf16(ref, got) -> None:
    (loss_ref, grad_ref), (loss_got, grad_got) = ref, got
    assert loss_got == pytest.approx(loss_ref, rel=LOSS_RTOL)
    assert torch.isfinite(grad_got).all()
    assert F.cosine_similarity(grad_ref, grad_got, dim=0).item() > GRAD_COSINE


@pytest.mark.parametrize("formulation", ["token", "head"])
@pytest.mark.parametrize("packing", ["tree", "plain"])
def test_bf16_autocast_loss_and_gradients_match_fp32(packing, formulation):
    model = _model(formulation)
    batch = _batch(model, packing)
    _assert_close_bf16(_loss_and_grads(model, batch, bf16=False),
                       _loss_and_grads(model, batch, bf16=True))


@pytest.mark.parametrize("formulation", ["token", "head"])
def test_bf16_autocast_tree_batch_matches_fp32_plain_batch(formulation):
    """The recipe's path (tree packing under bf16) against the plain fp32 reference."""
    model = _model(formulation)
    reference = _loss_and_grads(model, _batch(model, "plain"), bf16=False)
    _assert_close_bf16(reference, _loss_and_grads(model, _batch(model, "tree"), bf16=True))


def _mask_seen_by_backbone(model: StepRewardModel, batch: Batch, bf16: bool) -> torch.Tensor:
    """The dense tree mask the decoder gets (per-unit attention, which builds none, off)."""
    seen = []

    def hook(_module, _args, kwargs):
        seen.append(kwargs["attention_mask"])

    handle = model.backbone.get_decoder().register_forward_pre_hook(hook, with_kwargs=True)
    applies, unit_attention.applies = unit_attention.applies, lambda *a: False
    try:
        with torch.no_grad(), torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=bf16):
            logits = model(batch.input_ids, batch.label_positions, batch.attention_mask,
                           batch.position_ids)
    finally:
        handle.remove()
        unit_attention.applies = applies
    assert torch.isfinite(logits).all()
    (mask,) = seen
    return mask


@pytest.mark.parametrize("bf16,dtype", [(True, torch.bfloat16), (False, torch.float32)])
def test_per_unit_attention_masks_have_the_compute_dtype(bf16, dtype, monkeypatch):
    model = _model("token").eval()
    batch = _batch(model, "tree")
    built = []
    block_masks = unit_attention.block_masks
    monkeypatch.setattr(unit_attention, "block_masks",
                        lambda *a: built.append(block_masks(*a)) or built[-1])
    with torch.no_grad(), torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=bf16):
        logits = model(batch.input_ids, batch.label_positions, batch.attention_mask,
                       batch.position_ids)
    assert torch.isfinite(logits).all()
    (masks,) = built
    for m in (m for row in masks for m in row):
        assert m.dtype == dtype and torch.isfinite(m).all()
        assert ((m == 0) | (m == torch.finfo(dtype).min)).all()


def _assert_additive_mask(mask: torch.Tensor, allowed: torch.Tensor, dtype: torch.dtype) -> None:
    assert mask.dtype == dtype
    assert mask.shape == (allowed.shape[0], 1, *allowed.shape[1:])
    # 0 where attention is allowed, the dtype's finite minimum elsewhere: no -inf (a row
    # of -inf gives NaN) and no value outside the dtype's range
    assert torch.isfinite(mask).all()
    assert torch.equal(mask[:, 0] == 0, allowed)
    assert (mask[:, 0][~allowed] == torch.finfo(dtype).min).all()


@pytest.mark.parametrize("bf16,dtype", [(True, torch.bfloat16), (False, torch.float32)])
def test_tree_mask_has_the_compute_dtype_under_autocast(bf16, dtype):
    model = _model("token").eval()
    batch = _batch(model, "tree")
    allowed = batch.attention_mask.dense()
    assert (~allowed).any()  # a tree: some pairs are masked
    mask = _mask_seen_by_backbone(model, batch, bf16)
    _assert_additive_mask(mask, allowed, dtype)


def test_tree_mask_has_the_weights_dtype_for_a_bf16_model():
    """Weights cast to bf16 without autocast (how the scorer runs): mask in bf16 too, and
    logits still those of the fp32 model within bf16 tolerance."""
    model = _model("token").eval()
    batch = _batch(model, "tree")
    bf16_model = copy.deepcopy(model)
    bf16_model.backbone.to(torch.bfloat16)
    assert bf16_model.compute_dtype == torch.bfloat16
    mask = _mask_seen_by_backbone(bf16_model, batch, bf16=False)
    _assert_additive_mask(mask, batch.attention_mask.dense(), torch.bfloat16)
    with torch.no_grad():
        args = (batch.input_ids, batch.label_positions, batch.attention_mask, batch.position_ids)
        ref, got = model(*args), bf16_model(*args)
    # bf16 weights AND activations: a looser bound than autocast (weights stay fp32 there)
    assert (got - ref).abs().max().item() < 0.1 * ref.std().item()


@pytest.mark.parametrize("formulation", ["token", "head"])
def test_class_logits_are_computed_in_fp32_under_bf16_autocast(formulation):
    """Regression: autocast ran the fp32 head (and the label rows of the LM head) in bf16,
    returning bf16 logits from the head formulation."""
    model = _model(formulation).eval()
    hidden = torch.randn(5, model.backbone.config.hidden_size, device=DEVICE)
    with torch.no_grad():
        expected = model.classify(hidden)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            got = model.classify(hidden)
    assert got.dtype == torch.float32
    assert torch.equal(got, expected)
