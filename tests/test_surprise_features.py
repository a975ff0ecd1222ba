"""The head's surprise features: which tokens they read, and the same values in every layout."""

import pytest
import torch
from test_packing import _examples, _max_diff, _separate_logits

from prmkit.errors import PrmkitError
from prmkit.models.backbones import tiny_random
from prmkit.models.config import RewardModelConfig
from prmkit.models.reward_model import StepRewardModel
from prmkit.models.surprise import (
    LOGPROB_FLOOR,
    all_predecessors,
    predecessors,
    surprise_features,
)
from prmkit.scoring import IncrementalScorer, Scorer
from prmkit.training.batching import collate
from prmkit.training.packing import pack_examples, unpacked_rows

W = 4


@pytest.fixture(scope="module")
def model():
    backbone, tok = tiny_random(seed=3, hidden_size=64, layers=2)
    cfg = RewardModelConfig(formulation="head", head="mlp", surprise_window=W)
    return StepRewardModel.from_backbone(backbone, tok, cfg).eval()


def test_features_are_the_backbones_log_probs_of_the_labels_last_tokens(model):
    ex = _examples()[2]
    enc = model.encoder.encode(ex.problem, ex.steps)
    ids = torch.tensor([enc.input_ids])
    with torch.no_grad():
        logp = model.backbone(input_ids=ids).logits.float().log_softmax(-1)[0]
        hidden = model.hidden_states(ids)
        pos = torch.tensor([[0, p] for p in enc.label_positions])
        got = surprise_features(model.backbone.get_output_embeddings(), hidden, ids, pos, W)
    for k, p in enumerate(enc.label_positions):
        # token p - j is predicted at p - j - 1: the label's own token first
        want = torch.tensor([logp[p - j - 1, ids[0, p - j]].item() for j in range(W)])
        want = want.clamp_min(LOGPROB_FLOOR)
        assert torch.allclose(got[k, W:], want / -LOGPROB_FLOOR, atol=1e-5)
        assert torch.allclose(got[k, :W], want.exp(), atol=1e-5)


def test_first_token_of_a_sequence_has_no_surprise(model):
    ids = torch.tensor([[5, 6, 7]])
    hidden = model.hidden_states(ids)
    got = surprise_features(model.backbone.get_output_embeddings(), hidden, ids,
                            torch.tensor([[0, 1]]), W)
    # tokens 1 and 0 are read; token 0 has no predecessor, nor do the two before it
    assert got[0, W + 1:].eq(0).all() and got[0, 0] < 1
    assert got[0, 1:W].eq(1).all()


def test_every_tokens_predecessor_is_the_one_the_token_by_token_rule_finds(model):
    """`all_predecessors` (t - 1 where the token may attend to it, the general rule for the
    rest) equals `predecessors` at every token: in trees (compact and dense masks), with
    rows of two tries and padding, and in padded rows."""
    examples = _examples()
    trees = collate(pack_examples(examples, model.encoder, row_tokens=4096)
                    + pack_examples(examples[:2], model.encoder, row_tokens=4096), pad_id=0)
    plain = collate(unpacked_rows(examples, model.encoder), pad_id=0)
    for batch, masks in ((trees, (trees.attention_mask, trees.attention_mask.dense())),
                         (plain, (plain.attention_mask, None))):
        b, n = batch.input_ids.shape
        rows = torch.arange(b).repeat_interleave(n)
        t = torch.arange(n).repeat(b)
        for mask in masks:
            want = predecessors(rows, t, mask, batch.position_ids, n).view(b, n)
            got = all_predecessors(mask, batch.position_ids, batch.input_ids.shape, t.device)
            assert torch.equal(got, want)
        if batch is trees:  # some tokens follow another branch: their predecessor is further back
            assert ((want >= 0) & (want != torch.arange(-1, n - 1))).any()


def test_tree_packed_rows_give_the_padded_rows_logits(model):
    examples = _examples()
    rows = pack_examples(examples, model.encoder, row_tokens=4096)
    assert _max_diff(model, examples, rows) < 1e-4


def test_left_padded_rows_do_not_read_the_padding(model):
    examples = _examples()
    ref = _separate_logits(model, examples)
    rows = unpacked_rows(examples, model.encoder)
    batch = collate(rows, model.tokenizer.pad_token_id)
    # shift every row right by 3 padding tokens: a padding token must not count as a
    # predecessor of a sequence's first token
    pad = model.tokenizer.pad_token_id
    ids = torch.cat([torch.full((batch.input_ids.shape[0], 3), pad), batch.input_ids], 1)
    mask = torch.cat([torch.zeros(ids.shape[0], 3, dtype=torch.long),
                      torch.ones_like(batch.input_ids)], 1)
    for r, row in enumerate(rows):
        mask[r, 3 + len(row):] = 0
    pos = batch.label_positions + torch.tensor([0, 3])
    position_ids = (mask.cumsum(1) - 1).clamp_min(0)
    with torch.no_grad():
        logits = model(ids, pos, mask, position_ids)
    got = {s: logits[k] for k, s in enumerate(s for r in rows for srcs in r.sources
                                                for s in srcs[:1])}
    assert max((got[k] - ref[k]).abs().max().item() for k in got) < 1e-4


def test_saved_model_reloads_with_its_window(model, tmp_path):
    model.save_pretrained(tmp_path / "m")
    again = StepRewardModel.from_pretrained(tmp_path / "m")
    assert again.config.surprise_window == W
    a = Scorer(model, dtype=None).score([(_examples()[0].problem, list(_examples()[0].steps))])
    b = Scorer(again, dtype=None).score([(_examples()[0].problem, list(_examples()[0].steps))])
    assert a[0] == pytest.approx(b[0], abs=1e-6)


def test_surprise_window_needs_the_head_formulation():
    with pytest.raises(PrmkitError, match="surprise_window needs formulation='head'"):
        RewardModelConfig(formulation="token", surprise_window=4)


def test_incremental_scorer_refuses_a_surprise_model(model):
    with pytest.raises(PrmkitError, match="score it with Scorer"):
        IncrementalScorer(model, dtype=None)


@pytest.fixture(scope="module")
def step_model():
    backbone, tok = tiny_random(seed=3, hidden_size=64, layers=2)
    cfg = RewardModelConfig(formulation="head", head="mlp", surprise_window=8,
                            surprise_step=True)
    return StepRewardModel.from_backbone(backbone, tok, cfg).eval()


def test_step_features_sum_the_labels_own_step(step_model):
    """Hand-built: labels at 3 and 6 read separator token 9; the second label's step is
    tokens 4..6 (token 3 is the separator before it), the first one's 1..3 (the window
    reaches the sequence's first token, which has no predecessor)."""
    ids = torch.tensor([[5, 6, 7, 9, 4, 8, 9]])
    with torch.no_grad():
        hidden = step_model.hidden_states(ids)
        logp = step_model.backbone(input_ids=ids).logits.float().log_softmax(-1)[0]
        got = surprise_features(step_model.backbone.get_output_embeddings(), hidden, ids,
                                torch.tensor([[0, 3], [0, 6]]), 8, step=True)
    assert got.shape == (2, 2 * 8 + 3)
    for k, tokens in enumerate(([1, 2, 3], [4, 5, 6])):
        lps = torch.tensor([logp[t - 1, ids[0, t]].item() for t in tokens])
        step = got[k, 16:]
        assert torch.allclose(step[0], lps.sum().exp(), atol=1e-5)
        assert torch.allclose(step[1], lps.sum().clamp_min(LOGPROB_FLOOR) / -LOGPROB_FLOOR,
                              atol=1e-5)
        assert torch.allclose(step[2], lps.min() / -LOGPROB_FLOOR, atol=1e-5)


def test_step_features_are_the_same_tree_packed(step_model):
    examples = _examples()
    rows = pack_examples(examples, step_model.encoder, row_tokens=4096)
    assert _max_diff(step_model, examples, rows) < 1e-4


def test_surprise_step_needs_a_window():
    with pytest.raises(PrmkitError, match="surprise_step reads the surprise window"):
        RewardModelConfig(formulation="head", surprise_step=True)
