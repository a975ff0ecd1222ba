"""prmkit.rewards.trl: TRL's reward_funcs keyword contract and a real GRPOTrainer run on CPU
with a tiny policy whose tokenizer differs from the tiny PRM's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import trl
from datasets import Dataset
from test_rewards_contract import POLICY_TEXT
from test_scoring import make_model

from prmkit.models.backbones import tiny_random
from prmkit.rewards.contract import compute_step_rewards
from prmkit.rewards.credit import mix_verifier, spread_to_tokens, step_advantages
from prmkit.rewards.diagnostics import verifier_rewards
from prmkit.rewards.trl import ProcessReward, TRLInterfaceError, VerifierReward, check_trl_interface
from prmkit.scoring import Scorer

PROBLEM = "What is 2x + 3 = 11?"


@pytest.fixture(scope="module")
def scorer():
    return Scorer(make_model(), dtype=None)


@pytest.fixture(scope="module")
def policy():
    model, tok = tiny_random(seed=3, hidden_size=32, corpus=POLICY_TEXT, vocab_size=300)
    return model, tok


def test_reward_func_follows_trls_keyword_contract_plain_and_conversational(scorer, policy):
    _, tok = policy
    texts = ["Let x be a number.\n\nSo x = 4.", "", "We add 17 and 25 to get 42."]
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    prm = ProcessReward(scorer, policy_tokenizer=tok)
    plain = prm(prompts=[PROBLEM] * 3, completions=texts, completion_ids=ids,
                problem=[PROBLEM] * 3, answer=["4"] * 3, trainer_state=None)
    expected = compute_step_rewards(scorer, [PROBLEM] * 3, texts)
    assert plain == pytest.approx([r.score for r in expected[:1]] + [None]
                                  + [r.score for r in expected[2:]], nan_ok=True)
    assert plain[1] is None  # no step: TRL reads None as "no reward"
    assert [s.policy_token_end for s in prm.last[0].steps][-1] == len(ids[0]) - 2
    chat_prompts = [[{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": PROBLEM}]] * 3
    chat = prm(prompts=chat_prompts, completions=[[{"role": "assistant", "content": t}]
                                                  for t in texts], completion_ids=ids)
    assert chat == plain  # the PRM sees the user's problem, not the chat wrapper
    verifier = VerifierReward()
    assert verifier(prompts=[PROBLEM] * 3, completions=texts, answer=["4", "4", "4"]) == \
        [1.0, 0.0, 0.0]


def add(a: int, b: int) -> int:
    """Adds two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


THINK = "<think>\nLet x be a number.\n\nThen 2x + 3 = 11, so 2x = 8.\n</think>\n\n"
ANSWER = "So x = 4.\n\n# Answer\n\n4<|im_end|>"
TOOL = ('We add 17 and 25 to get 42.\n<tool_call>\n{"name": "add", "arguments": {"a": 17, '
        '"b": 25}}\n</tool_call><|im_end|>')


@pytest.fixture(scope="module")
def chat_policy():
    """A tiny policy with Qwen3's chat template, whose responses TRL parses (transformers'
    response template): reasoning blocks and tool calls come out of `content`."""
    from trl.chat_template_utils import qwen3_chat_template

    from prmkit.models.backbones import train_tokenizer

    tok = train_tokenizer(POLICY_TEXT, vocab_size=300)
    tok.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
    tok.add_tokens(["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                    "</tool_response>"])
    tok.eos_token, tok.chat_template = "<|im_end|>", qwen3_chat_template
    model, _ = tiny_random(seed=3, hidden_size=32, corpus=POLICY_TEXT, vocab_size=300)
    model.resize_token_embeddings(len(tok))
    model.config.eos_token_id = model.generation_config.eos_token_id = tok.eos_token_id
    return model, tok


def test_conversational_step_ends_land_on_the_ids_trl_trains_not_in_the_think_block(
        tmp_path, scorer, chat_policy):
    """TRL 1.16's own generation path with a parsed response: `content` lacks the reasoning
    block that `completion_ids` hold, and a tool call makes a completion of two assistant
    turns; only the sampling is scripted."""
    from trl import GRPOConfig

    from prmkit.rewards.trl import ProcessRewardGRPOTrainer

    model, tok = chat_policy

    class Scripted(ProcessRewardGRPOTrainer):
        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                                  has_tool_images=False):
            after_tool = len(prompt_ids) == 1  # the tool loop: the second turn of row 1
            texts = [ANSWER] if after_tool else [THINK + ANSWER, THINK + TOOL]
            return [tok(t, add_special_tokens=False)["input_ids"] for t in texts], None

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2,
                      num_generations=2, max_completion_length=256, use_cpu=True, bf16=False,
                      report_to="none", save_strategy="no")
    row = {"prompt": [{"role": "user", "content": PROBLEM}], "problem": PROBLEM}
    trainer = Scripted(model=model, processing_class=tok, args=args, tools=[add],
                       train_dataset=Dataset.from_list([row] * 2), credit="min",
                       reward_funcs=[ProcessReward(scorer)])
    out = trainer._generate_and_score_completions([dict(row), dict(row)])
    prm, mask = trainer.process_reward, out["completion_mask"]
    answer = ANSWER.removesuffix("<|im_end|>")
    turns = [[answer], [TOOL.split("\n<tool_call>")[0], answer]]  # what the policy wrote
    for i, r in enumerate(prm.last):
        ids = out["completion_ids"][i][: int(mask[i].sum())].tolist()
        text = "\n\n".join(turns[i])  # both turns of the tool call, not the last alone
        want = compute_step_rewards(scorer, [PROBLEM], [text])[0]
        assert [(s.char_start, s.char_end) for s in r.steps] == \
            [(s.char_start, s.char_end) for s in want.steps]
        assert r.probabilities == pytest.approx(want.probabilities, abs=1e-5)
        think_end = len(tok(THINK, add_special_tokens=False)["input_ids"]) - 1
        for s in r.steps:  # each end is the token where its step's text ends in the ids
            step = text[s.char_start: s.char_end]
            assert tok.decode(ids[: s.policy_token_end + 1], skip_special_tokens=True) \
                .rstrip().endswith(step), (i, step)
            assert not tok.decode(ids[: s.policy_token_end], skip_special_tokens=True) \
                .rstrip().endswith(step)
            assert s.policy_token_end > think_end  # not inside the reasoning block
    assert len(prm.last[1].steps) == 3 and out["advantages"].shape == mask.shape


def test_installed_trl_has_the_tested_interface():
    assert check_trl_interface() == trl.__version__


def test_a_trl_whose_grpo_internals_changed_gets_a_clear_error():
    class Changed(trl.GRPOTrainer):
        def _generate_and_score_completions(self, inputs, extra):
            raise AssertionError("never called")

    with pytest.raises(TRLInterfaceError, match="_generate_and_score_completions"):
        check_trl_interface(Changed)


def test_grpo_trainer_without_a_process_reward_is_refused_before_it_is_built(policy):
    from prmkit.errors import PrmkitError
    from prmkit.rewards.trl import ProcessRewardGRPOTrainer

    with pytest.raises(PrmkitError, match="exactly one prmkit ProcessReward"):
        ProcessRewardGRPOTrainer(model=policy[0], reward_funcs=[VerifierReward()])
    with pytest.raises(PrmkitError, match="unknown credit rule"):
        ProcessRewardGRPOTrainer(model=policy[0], reward_funcs=[VerifierReward()], credit="sum")


def test_grpo_trainer_runs_with_per_token_process_advantages(tmp_path, scorer, policy):
    from datasets import Dataset
    from trl import GRPOConfig

    from prmkit.rewards.trl import ProcessRewardGRPOTrainer

    model, tok = policy
    newline = tok("\n", add_special_tokens=False)["input_ids"]
    assert len(newline) == 1  # nudged below, so that the random policy writes steps
    seen = []

    class Recording(ProcessRewardGRPOTrainer):
        def _compute_loss(self, model, inputs):
            seen.append((inputs["advantages"].clone(), inputs["completion_mask"].clone(),
                         inputs["completion_ids"].clone()))
            return super()._compute_loss(model, inputs)

    rows = [{"prompt": PROBLEM, "problem": PROBLEM, "answer": "4"}] * 4
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4,
                      num_generations=4, max_completion_length=24, max_steps=2,
                      learning_rate=1e-2, use_cpu=True, bf16=False, logging_steps=1,
                      save_strategy="no", report_to="none", seed=0,
                      generation_kwargs={"sequence_bias": {tuple(newline): 3.0}})
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Recording(model=model, processing_class=tok, args=args,
                        train_dataset=Dataset.from_list(rows), credit="min",
                        reward_funcs=[ProcessReward(scorer), VerifierReward()],
                        verifier_weight=0.5)
    trainer.train()
    assert trainer.state.global_step == 2
    assert seen and all(a.dim() == 2 and a.shape == m.shape for a, m, _ in seen)
    assert all(bool((a[m == 0] == 0).all()) for a, m, _ in seen)  # nothing on padding
    varying = [r for a, m, _ in seen for r, mr in zip(a, m) if len(set(r[mr == 1].tolist())) > 1]
    assert varying, "no completion got different credit on different steps"
    assert max(len(r.steps) for r in trainer.process_reward.last) >= 2
    # The last batch's credit, recomputed from the ids the loss saw (one group: one prompt):
    # their decoding's step rewards, PURE's min-form credit, the grader's verdict at 0.5
    advantages, mask, ids = seen[-1]
    lengths = mask.sum(dim=1).tolist()
    rows = [ids[i, :n].tolist() for i, n in enumerate(lengths)]
    texts = [tok.decode(r, skip_special_tokens=True) for r in rows]
    rewards = compute_step_rewards(scorer, [PROBLEM] * 4, texts, policy_tokenizer=tok,
                                   policy_token_ids=rows)
    credit = mix_verifier(step_advantages("min", [r.probabilities for r in rewards], [0] * 4),
                          verifier_rewards(texts, ["4"] * 4), [0] * 4, weight=0.5)
    want = spread_to_tokens(credit, [[s.policy_token_end for s in r.steps] for r in rewards],
                            lengths, mask.size(1))
    assert np.allclose(advantages.numpy(), want, atol=1e-5)
    logged = {k for entry in trainer.state.log_history for k in entry}
    assert {"prm/steps_per_completion", "prm/prm_verifier_agreement"} <= logged
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters()))
