"""StepRewardModel: formulations, probabilities, losses, masks, save/load, errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from prmkit.errors import PrmkitError
from prmkit.models.backbones import tiny_random
from prmkit.models.config import CONFIG_NAME, RewardModelConfig
from prmkit.models.reward_model import HEAD_WEIGHTS, StepRewardModel

PROBLEM = "How many apples? 2x + 3 = 11."
STEPS_A = ["Let x be a number.", "Then 2x + 3 = 11, so x = 4.", "The answer is 4."]
STEPS_B = ["First, compute 3 * 4 = 12.", "Next, 12 - 5 = 7."]


def spread(model: torch.nn.Module, seed: int = 1, std: float = 0.3) -> None:
    """Random weights with a wide spread, so that probabilities are far from 0.5."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def make_model(seed: int = 0, **config) -> StepRewardModel:
    backbone, tok = tiny_random(seed=seed)
    spread(backbone, seed + 1)
    model = StepRewardModel.from_backbone(backbone, tok, RewardModelConfig(**config))
    if model.head is not None:
        spread(model.head, seed + 2, std=0.5)
    return model.eval()


def untied_model(seed: int = 0, **config) -> StepRewardModel:
    """A tiny Llama whose LM head is NOT tied to the input embeddings (like Llama-3-8B
    or Qwen2.5-7B), with the test tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    _, tok = tiny_random(seed=seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    torch.manual_seed(seed)
    backbone = LlamaForCausalLM(cfg)
    spread(backbone, seed + 1)
    assert backbone.get_output_embeddings().weight is not backbone.get_input_embeddings().weight
    model = StepRewardModel.from_backbone(backbone, tok, RewardModelConfig(**config))
    if model.head is not None:
        spread(model.head, seed + 2, std=0.5)
    return model.eval()


def run(model: StepRewardModel, steps=STEPS_A) -> tuple[torch.Tensor, list[int], list[int]]:
    enc = model.encoder.encode(PROBLEM, steps)
    ids = torch.tensor([enc.input_ids])
    pos = torch.tensor([[0, p] for p in enc.label_positions])
    with torch.no_grad():
        return model(ids, pos), enc.input_ids, enc.label_positions


# ---- formulations -----------------------------------------------------------------------
@pytest.mark.parametrize("num_classes,tokens", [(2, ["+", "-"]), (3, ["+", "0", "-"])])
def test_token_formulation_reads_lm_head_at_label_tokens(num_classes, tokens):
    model = make_model(num_classes=num_classes)
    logits, ids, positions = run(model)
    assert logits.shape == (len(STEPS_A), num_classes) and logits.dtype == torch.float32
    token_ids = [model.tokenizer.convert_tokens_to_ids(t) for t in tokens]
    with torch.no_grad():
        full = model.backbone(torch.tensor([ids])).logits[0]
    expected = full[positions][:, token_ids]
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    assert logits.std() > 0.5  # the test model is not trivially uniform


@pytest.mark.parametrize("head", ["linear", "mlp"])
@pytest.mark.parametrize("num_classes", [2, 3])
def test_head_formulation(head, num_classes):
    model = make_model(formulation="head", head=head, num_classes=num_classes)
    logits, ids, positions = run(model)
    assert logits.shape == (len(STEPS_A), num_classes)
    with torch.no_grad():
        hidden = model.hidden_states(torch.tensor([ids]))[0, positions]
        torch.testing.assert_close(logits, model.head(hidden))
    assert all(p.dtype == torch.float32 for p in model.head.parameters())


def test_correct_probability_two_and_three_classes():
    logits2 = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    m2 = make_model()
    torch.testing.assert_close(m2.correct_probability(logits2), logits2.softmax(-1)[:, 0])
    logits3 = torch.tensor([[1.0, 0.5, -1.0], [-2.0, 3.0, 0.0]])
    p3 = logits3.softmax(-1)
    m3 = make_model(num_classes=3)
    torch.testing.assert_close(m3.correct_probability(logits3), p3[:, 0] + p3[:, 1])
    m3.config.neutral_is_correct = False
    torch.testing.assert_close(m3.correct_probability(logits3), p3[:, 0])


def test_three_classes_default_label_tokens():
    assert RewardModelConfig(num_classes=3).label_tokens == ("+", "0", "-")
    with pytest.raises(PrmkitError, match="3 classes need 3 label tokens"):
        RewardModelConfig(num_classes=3, label_tokens=("a", "b"))


# ---- loss -------------------------------------------------------------------------------
def test_loss_hard_targets_equals_cross_entropy():
    logits = torch.tensor([[2.0, -1.0], [0.3, 0.1], [-1.0, 1.5]])
    classes = torch.tensor([0, 1, 1])
    hard = F.one_hot(classes, 2).float()
    torch.testing.assert_close(StepRewardModel.loss(logits, hard), F.cross_entropy(logits, classes))


def test_loss_soft_targets_and_weights():
    logits = torch.tensor([[2.0, -1.0], [0.3, 0.1], [-1.0, 1.5]])
    soft = torch.tensor([[0.25, 0.75], [1.0, 0.0], [0.5, 0.5]])
    logp = logits.log_softmax(-1)
    per = -(soft * logp).sum(-1)
    torch.testing.assert_close(StepRewardModel.loss(logits, soft), per.mean())
    w = torch.tensor([1.0, 0.0, 3.0])
    torch.testing.assert_close(StepRewardModel.loss(logits, soft, w), (per * w).sum() / 4.0)
    # a soft target is not its rounded (or bool-cast) version
    assert not torch.isclose(StepRewardModel.loss(logits[:1], soft[:1]),
                             StepRewardModel.loss(logits[:1], torch.tensor([[1.0, 0.0]])))


def _label_position_gradients(model: StepRewardModel):
    """Backward a loss on every step; return (d loss / d final hidden states [L, H], the
    encoding). The hook reads the decoder's output inside model.forward itself."""
    seen = []

    def keep(_module, _args, out):
        out.last_hidden_state.retain_grad()
        seen.append(out.last_hidden_state)

    enc = model.encoder.encode(PROBLEM, STEPS_A)
    handle = model.backbone.get_decoder().register_forward_hook(keep)
    try:
        logits = model(torch.tensor([enc.input_ids]), torch.tensor([[0, p] for p in enc.label_positions]))
    finally:
        handle.remove()
    loss = model.loss(logits, torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.3, 0.7]]))
    assert torch.isfinite(loss)
    model.zero_grad(set_to_none=True)
    loss.backward()
    (hidden,) = seen
    return hidden.grad[0], enc


@pytest.mark.parametrize("formulation", ["token", "head"])
def test_loss_gradient_reaches_label_logits_only(formulation):
    """The loss sees the final hidden state at the label positions and nowhere else; the
    token formulation reads only the label tokens' rows of the LM head."""
    model = untied_model(formulation=formulation)
    grad, enc = _label_position_gradients(model)
    nonzero = grad.abs().sum(-1) > 0
    assert nonzero.nonzero().flatten().tolist() == enc.label_positions
    assert len(enc.label_positions) == len(STEPS_A) < len(enc.input_ids) // 4
    lm_head = model.backbone.get_output_embeddings().weight.grad
    if formulation == "token":
        rows = (lm_head.abs().sum(-1) > 0).nonzero().flatten().tolist()
        assert rows == sorted(model.label_token_ids.tolist())
    else:
        assert lm_head is None  # the LM head is not used at all
        assert all((p.grad.abs() > 0).any() for p in model.head.parameters())
    # the input embeddings learn from every token up to the last label (causal attention)
    emb = model.backbone.get_input_embeddings().weight.grad
    assert set((emb.abs().sum(-1) > 0).nonzero().flatten().tolist()) == set(enc.input_ids)


def test_loss_gradient_with_tied_embeddings_reaches_label_rows():
    """Tied: the label rows get gradient through the head; other rows only as inputs."""
    model = make_model()
    assert model.backbone.get_output_embeddings().weight is model.backbone.get_input_embeddings().weight
    grad, enc = _label_position_gradients(model)
    assert (grad.abs().sum(-1) > 0).nonzero().flatten().tolist() == enc.label_positions
    shared = model.backbone.get_input_embeddings().weight.grad
    rows = set((shared.abs().sum(-1) > 0).nonzero().flatten().tolist())
    label_ids = set(model.label_token_ids.tolist())
    assert rows == set(enc.input_ids) | label_ids
    assert not label_ids <= set(enc.input_ids)  # some label row is reached through the head only


# ---- attention masks ---------------------------------------------------------------------
def _separate(model, steps_list):
    return torch.cat([run(model, s)[0] for s in steps_list])


def test_packed_rows_match_separate_runs():
    """Two solutions in one row, block-diagonal causal mask, restarted position ids."""
    model = make_model()
    a = model.encoder.encode(PROBLEM, STEPS_A)
    b = model.encoder.encode("What is 3 * 4 - 5?", STEPS_B)
    la, lb = len(a.input_ids), len(b.input_ids)
    mask = torch.zeros(1, la + lb + 3, la + lb + 3, dtype=torch.bool)  # 3 padding tokens
    mask[0, :la, :la] = torch.ones(la, la).tril().bool()
    mask[0, la:la + lb, la:la + lb] = torch.ones(lb, lb).tril().bool()
    ids = torch.tensor([a.input_ids + b.input_ids + [0, 0, 0]])
    position_ids = torch.tensor([list(range(la)) + list(range(lb)) + [0, 0, 0]])
    pos = torch.tensor([[0, p] for p in a.label_positions] + [[0, la + p] for p in b.label_positions])
    with torch.no_grad():
        packed = model(ids, pos, attention_mask=mask, position_ids=position_ids)
        sep = torch.cat([run(model, STEPS_A)[0],
                         model(torch.tensor([b.input_ids]),
                               torch.tensor([[0, p] for p in b.label_positions]))])
    assert packed.dtype == torch.float32
    assert (packed - sep).abs().max() < 1e-4
    # and the mask matters: plain causal attention over the row gives other logits for b
    with torch.no_grad():
        leaky = model(ids[:, : la + lb], pos)
    assert (leaky[len(STEPS_A):] - sep[len(STEPS_A):]).abs().max() > 1e-3


def test_tree_mask_matches_separate_runs():
    """A shared prefix (prompt + step 0) with two alternative next steps in one row."""
    model = make_model(formulation="head", num_classes=3)
    enc = model.encoder
    prefix = enc.encode(PROBLEM, STEPS_A[:1]).input_ids
    alt1 = list(enc.step_ids(STEPS_A[1]))
    alt2 = list(enc.step_ids(STEPS_B[1]))
    p, n1, n2 = len(prefix), len(alt1), len(alt2)
    total = p + n1 + n2
    allowed = torch.zeros(total, total, dtype=torch.bool)
    allowed[:p, :p] = torch.ones(p, p).tril().bool()
    allowed[p:p + n1, :p] = True
    allowed[p:p + n1, p:p + n1] = torch.ones(n1, n1).tril().bool()
    allowed[p + n1:, :p] = True
    allowed[p + n1:, p + n1:] = torch.ones(n2, n2).tril().bool()
    position_ids = list(range(p)) + list(range(p, p + n1)) + list(range(p, p + n2))
    ids = torch.tensor([prefix + alt1 + alt2])
    pos = torch.tensor([[0, p - 1], [0, p + n1 - 1], [0, total - 1]])
    with torch.no_grad():
        tree = model(ids, pos, attention_mask=allowed[None], position_ids=torch.tensor([position_ids]))
        path1 = run(model, STEPS_A[:2])[0]
        path2 = run(model, [STEPS_A[0], STEPS_B[1]])[0]
    expected = torch.stack([path1[0], path1[1], path2[1]])
    assert (tree - expected).abs().max() < 1e-4


def test_right_padding_2d_mask_matches_separate_runs():
    model = make_model()
    a = model.encoder.encode(PROBLEM, STEPS_A)
    b = model.encoder.encode(PROBLEM, STEPS_B)
    width = max(len(a.input_ids), len(b.input_ids))
    ids = torch.zeros(2, width, dtype=torch.long)
    mask = torch.zeros(2, width, dtype=torch.long)
    for r, e in enumerate((a, b)):
        ids[r, : len(e.input_ids)] = torch.tensor(e.input_ids)
        mask[r, : len(e.input_ids)] = 1
    pos = torch.tensor([[0, p] for p in a.label_positions] + [[1, p] for p in b.label_positions])
    with torch.no_grad():
        batched = model(ids, pos, attention_mask=mask)
    assert (batched - _separate(model, [STEPS_A, STEPS_B])).abs().max() < 1e-4


# ---- save / load --------------------------------------------------------------------------
def _scores(model, steps=STEPS_A) -> torch.Tensor:
    logits, _, _ = run(model, steps)
    return model.correct_probability(logits)


@pytest.mark.parametrize("config", [
    {},
    {"num_classes": 3, "aggregation": "min"},
    {"formulation": "head", "head": "mlp"},
    {"objective": "orm", "formulation": "head", "num_classes": 3},
])
def test_save_load_full_weights_round_trip(tmp_path, config):
    model = make_model(**config)
    model.save_pretrained(tmp_path / "m")
    files = {p.name for p in (tmp_path / "m").iterdir()}
    assert {CONFIG_NAME, "config.json", "model.safetensors", "tokenizer.json"} <= files
    assert (HEAD_WEIGHTS in files) == (model.head is not None)
    loaded = StepRewardModel.from_pretrained(tmp_path / "m")
    assert loaded.config == model.config
    assert not loaded.training
    assert torch.equal(_scores(loaded), _scores(model))
    assert torch.equal(_scores(loaded, STEPS_B), _scores(model, STEPS_B))


@pytest.mark.parametrize("formulation", ["token", "head"])
def test_untied_embeddings_save_load_round_trip(tmp_path, formulation):
    model = untied_model(formulation=formulation)
    logits, ids, positions = run(model)
    if formulation == "token":  # the label logits come from the LM head, not the embeddings
        with torch.no_grad():
            full = model.backbone(torch.tensor([ids])).logits[0]
        torch.testing.assert_close(logits, full[positions][:, model.label_token_ids],
                                   atol=1e-5, rtol=1e-5)
        emb = model.backbone.get_input_embeddings().weight[model.label_token_ids]
        with torch.no_grad():
            hidden = model.hidden_states(torch.tensor([ids]))[0, positions]
        assert (hidden @ emb.T - logits).abs().max() > 1e-2
    model.save_pretrained(tmp_path / "m")
    loaded = StepRewardModel.from_pretrained(tmp_path / "m")
    assert loaded.backbone.config.tie_word_embeddings is False
    out_w = loaded.backbone.get_output_embeddings().weight
    assert out_w is not loaded.backbone.get_input_embeddings().weight
    assert torch.equal(out_w, model.backbone.get_output_embeddings().weight)
    assert torch.equal(_scores(loaded), _scores(model))
    assert torch.equal(_scores(loaded, STEPS_B), _scores(model, STEPS_B))


def _lora_model(**config) -> StepRewardModel:
    model = StepRewardModel.from_backbone("tiny-random", config=RewardModelConfig(**config))
    model.apply_lora(r=4, alpha=8)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.backbone.named_parameters():
            if "lora_B" in name:  # zero at init: make the adapter change the outputs
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    if model.head is not None:
        spread(model.head, 4, std=0.5)
    return model.eval()


@pytest.mark.parametrize("formulation", ["token", "head"])
def test_save_load_lora_merged(tmp_path, formulation):
    model = _lora_model(formulation=formulation)
    base_scores = _scores(StepRewardModel.from_backbone(
        "tiny-random", config=RewardModelConfig(formulation=formulation)))
    before = _scores(model)
    if formulation == "token":
        assert (before - base_scores).abs().max() > 1e-3  # the adapter is not a no-op
    model.save_pretrained(tmp_path / "merged", merge_adapter=True)
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    loaded = StepRewardModel.from_pretrained(tmp_path / "merged")
    assert loaded.config.adapter is False
    torch.testing.assert_close(_scores(loaded), before, atol=1e-5, rtol=0)
    # saving merged copies: the live model still has its adapter
    assert any("lora_" in n for n, _ in model.backbone.named_parameters())


@pytest.mark.parametrize("formulation", ["token", "head"])
def test_save_load_lora_adapter_only(tmp_path, formulation):
    model = _lora_model(formulation=formulation)
    before = _scores(model)
    model.save_pretrained(tmp_path / "adapter", merge_adapter=False)
    files = {p.name for p in (tmp_path / "adapter").iterdir()}
    assert "adapter_config.json" in files and "model.safetensors" not in files
    loaded = StepRewardModel.from_pretrained(tmp_path / "adapter")
    assert loaded.config.adapter is True and loaded.config.backbone == "tiny-random"
    torch.testing.assert_close(_scores(loaded), before, atol=1e-5, rtol=0)


# ---- errors -------------------------------------------------------------------------------
def test_multi_token_label_is_a_clear_error():
    backbone, tok = tiny_random()
    with pytest.raises(PrmkitError, match=r"label token .correct. is \d+ tokens"):
        StepRewardModel.from_backbone(backbone, tok, RewardModelConfig(label_tokens=("correct", "-")))


def test_folder_without_config_is_a_clear_error(tmp_path):
    from prmkit.models.loading import load_reward_model

    backbone, tok = tiny_random()
    backbone.save_pretrained(tmp_path)
    with pytest.raises(PrmkitError, match=f"is not a reward model prmkit knows: {CONFIG_NAME} is "
                                          "missing"):
        load_reward_model(tmp_path)
    with pytest.raises(PrmkitError, match=f"has no {CONFIG_NAME}.*load_reward_model"):
        StepRewardModel.from_pretrained(tmp_path)


def test_adapter_without_backbone_is_a_clear_error(tmp_path):
    backbone, tok = tiny_random()
    model = StepRewardModel.from_backbone(backbone, tok)
    model.apply_lora(r=2)
    model.save_pretrained(tmp_path, merge_adapter=False)
    with pytest.raises(PrmkitError, match="adapter folder without a base backbone"):
        StepRewardModel.from_pretrained(tmp_path)


def test_bad_config_values_are_clear_errors():
    with pytest.raises(PrmkitError, match="objective must be"):
        RewardModelConfig(objective="outcome")
    with pytest.raises(PrmkitError, match="num_classes must be 2 or 3"):
        RewardModelConfig(num_classes=4)


def test_lora_weights_appear_once_in_state_dict():
    """Regression: the peft wrapper was registered as a submodule, doubling state_dict()."""
    from prmkit.models.reward_model import StepRewardModel

    model = StepRewardModel.from_backbone("tiny-random")
    model.apply_lora(r=4)
    keys = list(model.state_dict())
    assert not any(k.startswith("_peft_model") for k in keys)
    assert sum("lora_A" in k for k in keys) > 0


def test_concurrent_first_use_converts_smollm2_once_and_leaves_a_readable_folder(
        tmp_path, monkeypatch):
    import os
    import threading
    import time

    from prmkit.models import backbones

    monkeypatch.setenv("PRMKIT_CACHE", str(tmp_path / "cache"))
    calls = []

    def fake_convert(folder):
        calls.append(folder)
        time.sleep(0.3)  # both callers are inside smollm2_folder while this runs
        tmp = tmp_path / "converted"
        tmp.mkdir(mode=0o700)
        (tmp / "config.json").write_text("{}")
        (tmp / "model.safetensors").write_bytes(b"x")
        os.replace(tmp, folder)

    monkeypatch.setattr(backbones, "_convert_smollm2", fake_convert)
    results, errors = [], []

    def call():
        try:
            results.append(backbones.smollm2_folder())
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    assert len(calls) == 1
    assert len(set(results)) == 1 and (results[0] / "config.json").is_file()

