import torch
import torch.nn.functional as F

from prmkit.demo.lm.lm_loss import LMKeepingRewardModel, lm_loss, next_token_pairs
from prmkit.models.config import RewardModelConfig
from prmkit.models.reward_model import StepRewardModel
from prmkit.training.batching import label_losses


def _models(tiny_lm, weight):
    cfg = RewardModelConfig(objective="prm", head="mlp")
    torch.manual_seed(0)
    plain = StepRewardModel.from_backbone(str(tiny_lm), config=cfg)
    torch.manual_seed(0)
    keeping = LMKeepingRewardModel.from_backbone(str(tiny_lm), config=cfg)
    keeping.load_state_dict(plain.state_dict())
    keeping.lm_loss_weight = weight
    return plain, keeping


def _batch():
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18, 0, 0]])
    mask = torch.tensor([[1] * 8, [1] * 6 + [0, 0]])
    # row 0 packs two sequences (positions restart at 4)
    pos = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 0, 0]])
    labels = torch.tensor([[0, 3], [0, 7], [1, 5]])
    targets = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    return ids, mask, pos, labels, targets


def test_next_token_pairs_skip_packed_boundaries_and_padding():
    _, mask, pos, _, _ = _batch()
    keep = next_token_pairs(mask, pos)
    assert keep[0].tolist() == [True, True, True, False, True, True, True]
    assert keep[1].tolist() == [True] * 5 + [False, False]


def test_weight_adds_the_next_token_loss_to_the_gradient(tiny_lm):
    ids, mask, pos, labels, targets = _batch()
    plain, keeping = _models(tiny_lm, 0.5)
    # the trainer's loss through the keeping model ...
    label_losses(keeping(ids, labels, mask, pos), targets).mean().backward()
    assert keeping.last_lm_loss is not None and keeping.last_lm_loss > 0
    # ... equals label loss + 0.5 x next-token loss written out on the plain model
    hidden = plain.hidden_states(ids, mask, pos)
    logits = plain.classify(hidden[labels[:, 0], labels[:, 1]])
    keep = next_token_pairs(mask, pos)
    lm_logits = plain.backbone.get_output_embeddings()(hidden[:, :-1][keep]).float()
    lm = F.cross_entropy(lm_logits, ids[:, 1:][keep])
    assert torch.allclose(lm, lm_loss(plain, hidden, ids, mask, pos))
    (label_losses(logits, targets).mean() + 0.5 * lm).backward()
    emb_k = keeping.backbone.get_input_embeddings().weight.grad
    emb_p = plain.backbone.get_input_embeddings().weight.grad
    assert torch.allclose(emb_k, emb_p, atol=1e-6)
    assert emb_k.abs().sum() > 0


def test_weight_zero_and_no_grad_give_the_plain_models_logits(tiny_lm):
    ids, mask, pos, labels, _ = _batch()
    plain, keeping = _models(tiny_lm, 0.0)
    with torch.no_grad():
        assert torch.equal(plain(ids, labels, mask, pos), keeping(ids, labels, mask, pos))
        keeping.lm_loss_weight = 1.0
        assert torch.equal(plain(ids, labels, mask, pos), keeping(ids, labels, mask, pos))
    assert keeping.last_lm_loss is None  # nothing computed without gradients
