"""A packed row's attention one unit at a time (prmkit.models.unit_attention): the same
hidden states and gradients as the dense tree mask, used only where it is exact."""

from __future__ import annotations

import pytest
import torch

from prmkit.data.records import StepExample
from prmkit.models import attention, unit_attention
from prmkit.models.attention import TreeMask
from prmkit.models.backbones import tiny_random
from prmkit.models.config import RewardModelConfig
from prmkit.models.reward_model import StepRewardModel
from prmkit.training.batching import collate
from prmkit.training.packing import pack_examples

PROBLEMS = ["Let 2x + 3 = 11. Find x.", "How many apples? We have 17 and 25.",
            "Tom has 9 shells and finds 4 more. How many now?"]


def _examples() -> list[StepExample]:
    out = []
    for k, p in enumerate(PROBLEMS):
        for j in range(3):  # three solutions sharing a first step: a tree per problem
            steps = (f"First step of {k}.", f"Then {j + k} more.", f"Answer: {j * 7 + k}")
            out.append(StepExample(p, steps, (1.0, float(j != 1), 1.0), group=str(k)))
    return out


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    backbone, tok = tiny_random(seed=3, hidden_size=64, layers=2)
    return StepRewardModel.from_backbone(backbone, tok, RewardModelConfig())


def _batch(model):
    rows = pack_examples(_examples()[:6], model.encoder, 4096)  # two trees in one row
    rows += pack_examples(_examples()[6:], model.encoder, 4096)  # one tree: a shorter row
    return collate(rows, model.tokenizer.pad_token_id)


def _forward(model, batch, blocks: bool, monkeypatch):
    with monkeypatch.context() as m:
        if not blocks:
            m.setattr(unit_attention, "applies", lambda *a: False)
        model.zero_grad()
        h = model.hidden_states(batch.input_ids, batch.attention_mask, batch.position_ids)
        real = batch.input_ids != model.tokenizer.pad_token_id
        weights = torch.linspace(-1, 1, h.shape[-1])
        (h * weights).sum(-1)[real].sum().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return h.detach(), grads


def test_blocks_give_the_dense_masks_hidden_states_and_gradients(model, monkeypatch):
    batch = _batch(model)
    spans = unit_attention.unit_spans(batch.attention_mask)
    # the longer row: two trees; the shorter: one tree, then padding
    assert [len(r) for r in spans] == [2, 2] and spans[1][-1][1] == batch.input_ids.shape[1]
    assert (batch.input_ids[1, spans[1][1][0]:] == model.tokenizer.pad_token_id).all()
    dense_h, dense_g = _forward(model, batch, False, monkeypatch)
    built = []
    monkeypatch.setattr("prmkit.models.reward_model.decoder_attention_mask",
                        lambda *a: built.append(1))
    h, g = _forward(model, batch, True, monkeypatch)
    assert not built  # no [B, 1, L, L] mask on the blocks' path
    real = batch.input_ids != model.tokenizer.pad_token_id
    assert (h - dense_h)[real].abs().max().item() < 1e-5
    assert ((g - dense_g).norm() / dense_g.norm()).item() < 1e-5
    assert model.backbone.config._attn_implementation == "sdpa"  # restored


def test_unit_spans_follow_roots_and_refuse_a_unit_split_in_two():
    # row: unit A (segments 0, 1 child of 0), unit B (segment 2), padding (segment 3)
    ancestry = torch.eye(4, dtype=torch.bool)
    ancestry[1, 0] = True
    segments = torch.tensor([[0, 0, 1, 1, 2, 2, 2, 3]])
    assert unit_attention.unit_spans(TreeMask(segments, ancestry[None])) == [
        [(0, 4), (4, 7), (7, 8)]]
    interleaved = torch.tensor([[0, 0, 2, 1, 1, 2, 3, 3]])  # unit A resumes after B
    assert unit_attention.unit_spans(TreeMask(interleaved, ancestry[None])) is None


def test_the_attention_setting_comes_back_when_the_forward_fails(model):
    batch = _batch(model)
    with pytest.raises(RuntimeError, match="boom"):
        with unit_attention.unit_blocks(model.backbone, batch.attention_mask, torch.float32):
            assert model.backbone.config._attn_implementation == unit_attention.NAME
            raise RuntimeError("boom")
    assert model.backbone.config._attn_implementation == "sdpa"


def test_blocks_apply_only_where_exact(model, monkeypatch):
    mask = _batch(model).attention_mask
    assert unit_attention.applies(model.backbone, mask)
    assert not unit_attention.applies(model.backbone, mask.dense())  # a [B, L, L] mask
    model.backbone.gradient_checkpointing_enable()
    try:
        assert not unit_attention.applies(model.backbone, mask)  # recompute runs outside
    finally:
        model.backbone.gradient_checkpointing_disable()
    monkeypatch.setattr(unit_attention, "layer_windows", lambda b: {"sliding": 4})
    assert not unit_attention.applies(model.backbone, mask)
    monkeypatch.undo()
    monkeypatch.setattr(unit_attention, "attn_implementation_of", lambda b: "eager")
    assert not unit_attention.applies(model.backbone, mask)
    assert attention.attn_implementation_of(model.backbone) == "sdpa"


def test_the_attention_function_refuses_to_run_outside_its_context(model):
    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(RuntimeError, match="unit_blocks"):
        unit_attention._attention(model.backbone, q, q, q, None)
