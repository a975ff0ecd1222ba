"""Token-classification PRMs through the Scorer (prmkit's own exports and foreign ones
read with --format token-classification), `prmkit export token-classification`, and the
model card written on save."""

import json
import re

import pytest
import torch

from prmkit.cli import main
from prmkit.errors import PrmkitError
from prmkit.models.backbones import tiny_random
from prmkit.models.config import RewardModelConfig
from prmkit.models.formatting import SegmentEncoder, StepFormat
from prmkit.models.reward_model import StepRewardModel
from prmkit.scoring import Scorer

PROBLEM = "Let x be a number. Then 2x + 3 = 11."
STEPS = ["First, compute 3 * 4 = 12.", "Next, 12 - 5 = 7.", "The answer is 42."]


def saved(folder, **config):
    backbone, tok = tiny_random(seed=3)
    model = StepRewardModel.from_backbone(backbone, tok, RewardModelConfig(**config))
    if model.head is not None:
        torch.manual_seed(4)
        torch.nn.init.normal_(model.head.weight, std=0.5)
    return model.save_pretrained(folder, run={"data": "prm800k/phase2_train.jsonl",
                                              "metrics": {"auroc": 0.8125}})


@pytest.mark.parametrize("config", [{"formulation": "head"}, {"num_classes": 3}])
def test_export_loads_back_through_the_scorer_with_the_same_step_probabilities(tmp_path, config):
    folder = saved(tmp_path / "prm", **config)
    out = tmp_path / "tc"
    assert main(["export", "token-classification", "--model", str(folder), "-o", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["architectures"] == [
        "LlamaForTokenClassification"]
    original = Scorer.from_pretrained(folder, dtype=None, device="cpu")
    exported = Scorer.from_pretrained(out, dtype=None, device="cpu")
    assert exported.config.family == "prmkit-token-classification"
    items = [(PROBLEM, STEPS), (PROBLEM, STEPS[:1])]
    for got, want in zip(exported.score(items), original.score(items), strict=True):
        assert got == pytest.approx(want, abs=1e-5)
    card = (out / "README.md").read_text()
    assert "ForTokenClassification" in card and "library_name: transformers" in card


def test_step_reward_model_from_pretrained_refuses_an_export_naming_its_loader(tmp_path):
    """An export carries prmkit_config.json but is no model prmkit saved: refused with
    the call that loads it, which reads it as its family."""
    from prmkit.models.loading import load_reward_model

    out = tmp_path / "tc"
    assert main(["export", "token-classification", "--model", str(saved(tmp_path / "prm")),
                 "-o", str(out)]) == 0
    with pytest.raises(PrmkitError, match=rf"^{re.escape(str(out))} is a token-classification export: .*"
                                          r"load_reward_model\("):
        StepRewardModel.from_pretrained(out)
    assert load_reward_model(out).config.family == "prmkit-token-classification"


def test_foreign_token_classification_prm_reads_its_correct_class(tmp_path):
    """A LlamaForTokenClassification without prmkit_config.json, read as the
    token-classification family: P(correct) = softmax class 0 at the last token of the
    "\\n\\n" after each step."""
    from transformers import LlamaConfig, LlamaForTokenClassification

    _, tok = tiny_random(seed=0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         num_labels=2, pad_token_id=tok.pad_token_id, initializer_range=0.2)
    torch.manual_seed(5)
    model = LlamaForTokenClassification(config).eval()
    folder = tmp_path / "tc"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    with pytest.raises(PrmkitError, match="LlamaForTokenClassification\\): pass --format"):
        Scorer.from_pretrained(folder, device="cpu")
    scorer = Scorer.from_pretrained(folder, dtype=None, device="cpu",
                                    format="token-classification")
    enc = scorer.encode(PROBLEM, STEPS)
    # prmkit's own plain format puts the labels at the same tokens
    plain = SegmentEncoder(tok, StepFormat()).encode(PROBLEM, STEPS)
    assert enc.input_ids == plain.input_ids and enc.label_positions == plain.label_positions
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([enc.input_ids])).logits[0]
    want = logits[enc.label_positions].softmax(-1)[:, 0].tolist()
    assert scorer.score([(PROBLEM, STEPS)])[0] == pytest.approx(want, abs=1e-5)


def test_saved_model_carries_a_model_card_with_the_run(tmp_path):
    folder = saved(tmp_path / "prm", formulation="head")
    card = (folder / "README.md").read_text()
    assert "prm800k/phase2_train.jsonl" in card and "| auroc | 0.8125 |" in card
    assert "Formulation: head, 2 classes" in card and "'\\n\\n'" in card


def test_a_readme_prmkit_did_not_write_is_kept(tmp_path):
    folder = tmp_path / "prm"
    folder.mkdir()
    (folder / "README.md").write_text("# my own card\n")
    saved(folder)
    assert (folder / "README.md").read_text() == "# my own card\n"
