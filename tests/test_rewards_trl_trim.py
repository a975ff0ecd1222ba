"""prmkit.rewards.trl_trim: GRPO's log-probability pass on length-sorted, trimmed chunks, and
with each group's prompt run once, gives TRL's own log-probabilities, entropies and
gradients on every completion token."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from test_rewards_contract import POLICY_TEXT

from prmkit.models.backbones import tiny_random
from prmkit.rewards.trl_trim import (
    TrimmedLogps,
    shared_prompts,
    trimmed_chunks,
    with_trimmed_logps,
)


def _reward(prompts, completions, **kwargs):
    return [float(len(c)) for c in completions]


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    from trl import GRPOConfig, GRPOTrainer

    model, tok = tiny_random(seed=5, hidden_size=32, corpus=POLICY_TEXT, vocab_size=300)
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("grpo")),
                      per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=8, max_steps=1, use_cpu=True, bf16=False,
                      report_to="none", save_strategy="no", gradient_checkpointing=False)
    cls = with_trimmed_logps(GRPOTrainer)
    return cls(model=model, processing_class=tok, args=args, reward_funcs=[_reward],
               train_dataset=Dataset.from_list([{"prompt": "x"}] * 4))


def _batch(vocab: int):
    """Six rows: prompts of 2-7 tokens left-padded to 7, completions of 1-9 right-padded to 9."""
    g = torch.Generator().manual_seed(0)
    prompts, completions = [7, 2, 5, 3, 6, 4], [9, 1, 4, 6, 2, 8]
    ids = torch.randint(3, vocab, (6, 16), generator=g)
    mask = torch.zeros(6, 16, dtype=torch.long)
    for r, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        mask[r, 7 - p: 7 + c] = 1
    return ids.masked_fill(mask == 0, 0), mask


def _grouped_batch(vocab: int):
    """Two prompts (5 and 4 tokens, left-padded to 7), three completions each (1-9 tokens,
    right-padded to 9): GRPO's groups."""
    ids, mask = _batch(vocab)
    for r in range(6):
        ids[r, :7], mask[r, :7] = ids[r // 3 * 3 + 2, :7], mask[r // 3 * 3 + 2, :7]
    return ids, mask


def _pass(trainer, rows: int, ids, mask, share: bool = False):
    trainer.trim_rows, trainer.share_prompts = rows, share
    trainer.model.zero_grad()
    logps, entropy, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, ids, mask, 9, compute_entropy=True)
    (logps * mask[:, 7:]).sum().backward()
    grads = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
    return logps.detach(), entropy.detach(), grads


def test_trimmed_chunks_give_trls_logps_entropies_and_gradients(trainer):
    ids, mask = _batch(trainer.model.config.vocab_size)
    ref_lp, ref_ent, ref_g = _pass(trainer, 0, ids, mask)  # TRL's own pass
    lp, ent, g = _pass(trainer, 2, ids, mask)  # three chunks of two rows
    real = mask[:, 7:] == 1
    assert lp.shape == ref_lp.shape == (6, 9)
    assert (lp - ref_lp)[real].abs().max() < 1e-5
    assert (ent - ref_ent)[real].abs().max() < 1e-5
    assert ((g - ref_g).norm() / ref_g.norm()) < 1e-5
    assert (lp[~real] == 0).all()  # cut columns: zero, and masked by TRL anyway


@pytest.mark.parametrize("rows", [0, 2])
def test_shared_prompts_give_trls_logps_entropies_and_gradients(trainer, rows):
    ids, mask = _grouped_batch(trainer.model.config.vocab_size)
    shared = shared_prompts(trainer.model, ids, mask, 9, trainer.accelerator.autocast)
    assert shared is not None and shared.row_prompt.tolist() in ([0, 0, 0, 1, 1, 1],
                                                                 [1, 1, 1, 0, 0, 0])
    assert [k.shape[0] for k, _ in shared.layers] == [2] * trainer.model.config.num_hidden_layers
    assert shared.layers[0][0].shape[2] == 6  # the prompt width but its last column
    ref_lp, ref_ent, ref_g = _pass(trainer, 0, ids, mask)  # TRL's own pass
    lp, ent, g = _pass(trainer, rows, ids, mask, share=True)
    real = mask[:, 7:] == 1
    assert lp.shape == ref_lp.shape == (6, 9)
    assert (lp - ref_lp)[real].abs().max() < 1e-5
    assert (ent - ref_ent)[real].abs().max() < 1e-5
    assert ((g - ref_g).norm() / ref_g.norm()) < 1e-5
    assert (lp[~real] == 0).all()


def test_shared_prompts_through_a_lora_policy_give_trls_numbers(tmp_path):
    """PEFT wraps the policy after TRL adds its fused head; the shared pass goes through
    the wrapper (its adapters' gradients compared)."""
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    model, tok = tiny_random(seed=5, hidden_size=32, corpus=POLICY_TEXT, vocab_size=300)
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4,
                      num_generations=4, max_completion_length=8, max_steps=1, use_cpu=True,
                      bf16=False, report_to="none", save_strategy="no",
                      gradient_checkpointing=False)
    lora = LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False)
    trainer = with_trimmed_logps(GRPOTrainer)(
        model=model, processing_class=tok, args=args, reward_funcs=[_reward],
        train_dataset=Dataset.from_list([{"prompt": "x"}] * 4), peft_config=lora)
    ids, mask = _grouped_batch(trainer.model.config.vocab_size)
    assert shared_prompts(trainer.model, ids, mask, 9, trainer.accelerator.autocast) is not None
    ref_lp, ref_ent, ref_g = _pass(trainer, 0, ids, mask)
    lp, ent, g = _pass(trainer, 2, ids, mask, share=True)
    real = mask[:, 7:] == 1
    assert ref_g.numel() < sum(p.numel() for p in trainer.model.parameters())  # adapters only
    assert (lp - ref_lp)[real].abs().max() < 1e-5 and (ent - ref_ent)[real].abs().max() < 1e-5
    assert ((g - ref_g).norm() / ref_g.norm()) < 1e-5


def test_prompts_are_shared_only_where_they_repeat_and_are_left_padded(trainer):
    autocast = trainer.accelerator.autocast
    ids, mask = _batch(trainer.model.config.vocab_size)
    assert shared_prompts(trainer.model, ids, mask, 9, autocast) is None  # six prompts
    ids, mask = _grouped_batch(trainer.model.config.vocab_size)
    right_padded = mask.clone()
    right_padded[3:, 6] = 0
    assert shared_prompts(trainer.model, ids, right_padded, 9, autocast) is None
    assert shared_prompts(trainer.model, ids[:, 6:], mask[:, 6:], 9, autocast) is None
    # padding ids do not tell prompts apart
    ids[0, 0] = ids[1, 0] + 1
    assert shared_prompts(trainer.model, ids, mask, 9, autocast).layers[0][0].shape[0] == 2


def test_chunks_sort_by_completion_and_cut_each_to_its_longest():
    mask = torch.zeros(4, 10, dtype=torch.long)
    for r, (p, c) in enumerate([(3, 5), (1, 1), (2, 2), (4, 3)]):  # prompt width 4, C = 6
        mask[r, 4 - p: 4 + c] = 1
    chunks = trimmed_chunks(mask, 6, rows=2, shift_left=True)
    assert [(idx.tolist(), first, keep) for idx, first, keep in chunks] == [
        ([1, 2], 2, 2), ([3, 0], 0, 5)]
    assert [first for _, first, _ in trimmed_chunks(mask, 6, 2, shift_left=False)] == [0, 0]
    # a masked token inside a completion (a tool's output, say) does not shorten its extent
    holed = mask.clone()
    holed[0, 5] = 0
    chunks = trimmed_chunks(holed, 6, rows=4, shift_left=True)
    assert [(first, keep) for _, first, keep in chunks] == [(0, 5)]


def test_with_trimmed_logps_adds_the_mixin_once():
    from trl import GRPOTrainer

    cls = with_trimmed_logps(GRPOTrainer)
    assert issubclass(cls, TrimmedLogps) and with_trimmed_logps(cls) is cls
    from prmkit.rewards.trl import ProcessRewardGRPOTrainer
    assert with_trimmed_logps(ProcessRewardGRPOTrainer) is ProcessRewardGRPOTrainer
