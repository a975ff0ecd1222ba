"""prmkit.rewards.trl: TRL's reward_funcs keyword contract and a real GRPOTrainer run on CPU
with a tiny policy whose tokenizer differs from the tiny PRM's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import trl
from test_rewards_contract import POLICY_TEXT
from test_scoring import make_model

from prmkit.models.backbones import tiny_random
from prmkit.rewards.contract import compute_step_rewards
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
            seen.append((inputs["advantages"].clone(), inputs["completion_mask"].clone()))
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
    assert seen and all(a.dim() == 2 and a.shape == m.shape for a, m in seen)
    assert all(bool((a[m == 0] == 0).all()) for a, m in seen)  # nothing on padding
    varying = [r for a, m in seen for r, mr in zip(a, m) if len(set(r[mr == 1].tolist())) > 1]
    assert varying, "no completion got different credit on different steps"
    prm = trainer.process_reward
    assert max(len(r.steps) for r in prm.last) >= 2
    # TRL shuffles the rows it trains on: compare the last batch's rows as a multiset
    advantages, mask = seen[-1]
    want = trainer.token_advantages(prm.last, prm.last_lengths, 4, mask.size(1),
                                    trainer.verifier.last)
    want = want * (torch.arange(mask.size(1))[None, :] < torch.tensor(prm.last_lengths)[:, None]).numpy()
    got_rows = np.array(sorted(map(tuple, np.round(advantages.numpy(), 4).tolist())))
    want_rows = np.array(sorted(map(tuple, np.round(want, 4).tolist())))
    assert np.allclose(got_rows, want_rows, atol=2e-4)
    logged = {k for entry in trainer.state.log_history for k in entry}
    assert {"prm/steps_per_completion", "prm/prm_verifier_agreement"} <= logged
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters()))
