"""verl and OpenRLHF entry points, loaded by file path and called exactly as verl 0.9.1
(its agent loop: run_single per sample, one float kept per response; its colocated reward
loop: run_single per sample, then assemble_rm_scores; custom_reward_function with
reward_kwargs) and OpenRLHF 0.11.2 (SingleTurnAgentExecutor: reward_func on one decoded
query in a thread) call them: on `FakeDataProto`, a stand-in for verl's DataProto with the
fields its managers read, and, with the `rl_engines` fixture (verl and OpenRLHF beside this
venv, see tests/conftest.py), through the engines' own loaders, agent loop, DataProto and
executor."""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_rewards_contract import POLICY_TEXT
from test_scoring import make_model

import prmkit.rewards
from prmkit.errors import PrmkitError
from prmkit.models.backbones import train_tokenizer
from prmkit.rewards.contract import compute_step_rewards
from prmkit.rewards.credit import clip_delta_credits
from prmkit.rewards.engines import EngineInterfaceError
from prmkit.rewards.openrlhf import openrlhf_rewards, response_text
from prmkit.scoring import Scorer

PROBLEM = "What is 2x + 3 = 11?"
RESPONSES = ["Let x be a number.\n\nThen 2x + 3 = 11, so x = 4.\n\n# Answer\n\n4",
             "We add 17 and 25 to get 42."]
FILES = Path(prmkit.rewards.__file__).parent


def load_by_path(name: str):
    """As verl's load_extern_object and OpenRLHF's executor load a reward file."""
    spec = importlib.util.spec_from_file_location(f"engine_{name}", FILES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def prm_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("prm")
    make_model().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def policy_tok():
    return train_tokenizer(POLICY_TEXT, vocab_size=300)


@pytest.fixture(scope="module")
def offline(prm_folder):
    return Scorer.from_pretrained(prm_folder, device="cpu")


class FakeDataProto:
    """verl.protocol.DataProto as reward managers use it: `batch` tensors with the batch
    first, `non_tensor_batch` numpy object arrays, len(), [i] -> one item, [a:b] -> a
    DataProto."""

    def __init__(self, batch: dict, non_tensor_batch: dict):
        self.batch, self.non_tensor_batch = batch, non_tensor_batch

    def __len__(self):
        return next(iter(self.batch.values())).shape[0]

    def __getitem__(self, idx):
        rows = {k: v[idx] for k, v in self.batch.items()}
        extra = {k: v[idx] for k, v in self.non_tensor_batch.items()}
        if isinstance(idx, slice):
            return FakeDataProto(rows, extra)
        return SimpleNamespace(batch=rows, non_tensor_batch=extra)


def verl_batch(tok, responses, prompt_len=6) -> FakeDataProto:
    """Left-padded prompts, right-padded responses (EOS-terminated), verl's attention mask."""
    ids = [tok(r, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for r in responses]
    width = max(map(len, ids)) + 3
    prompts = torch.full((len(ids), prompt_len), tok.pad_token_id)
    prompts[:, 2:] = torch.tensor(tok("x = 4", add_special_tokens=False)["input_ids"][:1] * 4)
    resp = torch.full((len(ids), width), tok.pad_token_id)
    mask = torch.zeros((len(ids), prompt_len + width), dtype=torch.long)
    mask[:, 2:prompt_len] = 1
    for i, row in enumerate(ids):
        resp[i, : len(row)] = torch.tensor(row)
        mask[i, prompt_len: prompt_len + len(row)] = 1
    n = len(ids)
    return FakeDataProto(
        {"prompts": prompts, "responses": resp, "attention_mask": mask},
        {"data_source": np.array(["math"] * n, dtype=object),
         "reward_model": np.array([{"ground_truth": "4"}] * n, dtype=object),
         "extra_info": np.array([{"problem": PROBLEM, "index": i} for i in range(n)],
                                dtype=object)})


def colocated(settings: dict, **reward_model) -> dict:
    """A verl config whose colocated reward loop scores (and calls assemble_rm_scores)."""
    return {"reward": {"prmkit": settings, "reward_model": {"enable": True, **reward_model}}}


def run_verl_reward_loop(manager_cls, config, tok, data):
    manager = manager_cls(config=config, tokenizer=tok, compute_score=None,
                          reward_router_address=None, reward_model_tokenizer=None)

    async def worker():
        return await asyncio.gather(*[manager.run_single(data[i: i + 1]) for i in range(len(data))])

    outputs = asyncio.run(worker())
    rm_scores = manager_cls.assemble_rm_scores(data, [o["reward_score"] for o in outputs])
    return rm_scores, outputs


def test_verl_manager_writes_step_rewards_at_their_step_end_tokens(prm_folder, policy_tok, offline,
                                                                  monkeypatch):
    verl = load_by_path("verl")
    data = verl_batch(policy_tok, RESPONSES)
    config = colocated({"model": str(prm_folder), "device": "cpu"})
    calls = []
    scorer = verl.cached_scorer(config["reward"]["prmkit"])
    real_score = scorer.score
    monkeypatch.setattr(scorer, "score", lambda items: calls.append(len(items)) or real_score(items))
    rm, outputs = run_verl_reward_loop(verl.PRMRewardManager, config, policy_tok, data)
    assert calls == [2]  # the samples verl started together are scored together
    assert rm.shape == data.batch["responses"].shape
    ids = [policy_tok(r, add_special_tokens=False)["input_ids"] for r in RESPONSES]
    want = compute_step_rewards(offline, [PROBLEM] * 2, RESPONSES, policy_tokenizer=policy_tok,
                                policy_token_ids=ids)
    for i, r in enumerate(want):
        nonzero = rm[i].nonzero().flatten().tolist()
        assert nonzero == [s.policy_token_end for s in r.steps]
        assert rm[i, nonzero].tolist() == pytest.approx(r.probabilities, abs=1e-5)
        # verl's GRPO sums the row: the sum of step rewards, as docs/rl.md warns
        assert float(rm[i].sum()) == pytest.approx(sum(r.probabilities), abs=1e-5)
        assert outputs[i]["reward_extra_info"]["prm_steps"] == len(r.steps)


def test_verl_manager_on_verls_own_dataproto_and_grpo(prm_folder, policy_tok, offline,
                                                     rl_engines):
    """verl 0.9.1 (beside this venv) loads the files itself, and its own DataProto and GRPO
    advantage give what the stand-in gives."""
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls

    path = str(FILES / "verl.py")
    settings = {"model": str(prm_folder), "device": "cpu"}
    config = OmegaConf.create({"reward": {
        "custom_reward_function": {"path": path, "name": "compute_score",
                                   "reward_kwargs": settings},
        "reward_manager": {"source": "importlib", "name": "PRMRewardManager",
                           "module": {"path": path}},
        "reward_model": {"enable": True, "enable_resource_pool": False},
        "prmkit": settings}})
    manager_cls = resolve_reward_manager_cls(config)  # verl loads the class by file path
    fake = verl_batch(policy_tok, RESPONSES)
    real = DataProto.from_dict(tensors=dict(fake.batch), non_tensors=dict(fake.non_tensor_batch))
    rm_fake, _ = run_verl_reward_loop(manager_cls, config, policy_tok, fake)
    rm_real, _ = run_verl_reward_loop(manager_cls, config, policy_tok, real)
    assert torch.equal(rm_fake, rm_real)
    scalar = get_custom_reward_fn(config)(data_source="math", solution_str=RESPONSES[0],
                                          ground_truth="4", extra_info={"problem": PROBLEM})
    assert scalar["prm_steps"] == 3
    mask = real.batch["attention_mask"][:, 6:]
    adv, _ = compute_grpo_outcome_advantage(rm_real, mask, np.array(["q", "r"], dtype=object))
    # one response per group (verl: mean 0, std 1): what GRPO credits every token with is
    # the row's sum, i.e. the sum of the step rewards, as docs/rl.md warns
    want = compute_step_rewards(offline, [PROBLEM], RESPONSES[:1])[0]
    valid = int(mask[0].sum())
    assert adv[0, :valid].tolist() == pytest.approx([sum(want.probabilities)] * valid, abs=1e-5)


def verl_agent_loop(config, tok, prompt_length: int, response_length: int):
    """verl 0.9.1's AgentLoopWorker as its trainer builds it by default
    (reward.reward_model.enable=False): each finished response is scored through a
    RewardLoopWorker (a Ray actor there, called here in process) holding the reward manager
    verl's own `load_reward_manager` built from `config`."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.trainer.ppo.reward import load_reward_manager

    reward_worker = object.__new__(RewardLoopWorker)  # its __init__ loads tokenizers by path
    reward_worker.config, reward_worker.reward_router_address = config, None
    reward_worker.reward_manager = load_reward_manager(
        config, tok, reward_router_address=None, reward_model_tokenizer=None)
    worker = object.__new__(AgentLoopWorker)  # its __init__ starts LLM servers
    worker.config, worker.tokenizer, worker.processor = config, tok, None
    worker.rollout_config = SimpleNamespace(prompt_length=prompt_length,
                                            response_length=response_length)
    worker.mm_processor_kwargs, worker.distillation_enabled = {}, False
    worker.reward_loop_worker_handles = [  # a Ray handle: `await handle.compute_score.remote()`
        SimpleNamespace(compute_score=SimpleNamespace(remote=reward_worker.compute_score))]
    return worker


def test_verl_manager_scores_through_verls_agent_loop_by_default(prm_folder, policy_tok,
                                                                 offline, rl_engines):
    """verl's default reward path (reward_model.enable=False): its agent loop keeps one
    float per response (pydantic Optional[float], then torch.tensor(scores)); a dict of
    positions made it fail with "reward_score Input should be a valid number"."""
    import copy

    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    tok = copy.deepcopy(policy_tok)  # verl sets its padding side
    path = str(FILES / "verl.py")
    settings = {"model": str(prm_folder), "device": "cpu"}
    config = OmegaConf.create({"reward": {
        "custom_reward_function": {"path": None},
        "reward_manager": {"source": "importlib", "name": "PRMRewardManager",
                           "module": {"path": path}},
        "reward_model": {"enable": False, "enable_resource_pool": False},
        "prmkit": settings}})
    responses = [*RESPONSES, "  "]  # the last has no step: the null score
    ids = [tok(r, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for r in responses]
    prompt = tok(PROBLEM, add_special_tokens=False)["input_ids"]
    worker = verl_agent_loop(config, tok, len(prompt) + 2, max(map(len, ids)) + 3)

    async def rollouts():
        outputs = [AgentLoopOutput(prompt_ids=prompt, response_ids=row,
                                   response_mask=[1] * len(row), metrics=AgentLoopMetrics())
                   for row in ids]
        return await asyncio.gather(*[worker._agent_loop_postprocess(
            out, validate=False, raw_prompt=[{"role": "user", "content": PROBLEM}],
            data_source="math", reward_model={"ground_truth": "4"},
            extra_info={"problem": PROBLEM, "index": i}) for i, out in enumerate(outputs)])

    batch = worker._postprocess(asyncio.run(rollouts()))
    rm = batch.batch["rm_scores"]
    want = compute_step_rewards(offline, [PROBLEM] * 3, responses)
    for i, w in enumerate(want):
        last = len(ids[i]) - 1  # verl puts the float on the response's last token
        assert rm[i].nonzero().flatten().tolist() == ([last] if w.score else [])
        assert float(rm[i, last]) == pytest.approx(w.score or 0.0, abs=1e-5)
    assert batch.non_tensor_batch["prm_null_score"].tolist() == [0.0, 0.0, 1.0]
    assert not np.isnan(batch.non_tensor_batch["prm_score"].astype(float)).any()
    with pytest.raises(PrmkitError, match="verl scores in its agent loop here"):
        verl_agent_loop(OmegaConf.merge(config, {"reward": {"prmkit": {"placement": "steps"}}}),
                        tok, 8, 8)


def test_verl_clip_delta_under_grpo_keeps_only_the_first_step_so_it_is_refused(
        prm_folder, rl_engines):
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    verl = load_by_path("verl")
    steps = [[0.9, 0.95, 0.99], [0.9, 0.05, 0.02], [0.3, 0.9, 0.9]]
    rm = torch.zeros(3, 6)
    for i, r in enumerate(steps):  # Clip-Delta credits at the step-end tokens 1, 3, 5
        rm[i, [1, 3, 5]] = torch.tensor(clip_delta_credits(r, eta=0.5), dtype=torch.float32)
    adv, _ = compute_grpo_outcome_advantage(rm, torch.ones(3, 6), np.array(["q"] * 3))
    # the credits telescope: a row sums to min(r1 - eta, 0), so GRPO cannot tell two bad
    # steps from two good ones
    assert rm.sum(dim=1).tolist() == pytest.approx([0.0, 0.0, -0.2], abs=1e-6)
    assert torch.allclose(adv[0], adv[1], atol=1e-5) and not torch.allclose(adv[0], adv[2])
    base = {"model": str(prm_folder), "device": "cpu", "placement": "clip_delta"}
    for estimator in ("grpo", "rloo"):
        config = {**colocated(base), "algorithm": {"adv_estimator": estimator}}
        with pytest.raises(PrmkitError, match=f"adv_estimator={estimator}: that estimator sums"):
            verl.PRMRewardManager(config=config, tokenizer=None)
    ok = verl.PRMRewardManager(config={**colocated(base), "algorithm": {"adv_estimator": "gae"}},
                               tokenizer=None)
    assert ok.per_token and ok.placement == "clip_delta"


def test_verl_compute_score_and_openrlhf_logs_hold_no_nan_without_a_verifier(prm_folder,
                                                                             offline):
    verl = load_by_path("verl")
    kw = {"model": str(prm_folder), "device": "cpu"}
    out = verl.compute_score("math", RESPONSES[0], "4", {"problem": PROBLEM}, **kw)
    assert "verifier" not in out and not any(np.isnan(v) for v in out.values())
    empty = verl.compute_score("math", " ", "4", {"problem": PROBLEM}, **kw)
    assert (empty["score"], empty["prm_null_score"]) == (0.0, 1.0)
    logs = openrlhf_rewards(offline, [PROBLEM + RESPONSES[0]], [PROBLEM], ["4"])["extra_logs"]
    assert "verifier" not in logs and not np.isnan(np.concatenate(list(logs.values()))).any()
    graded = openrlhf_rewards(offline, [PROBLEM + " I give up"], [PROBLEM], [None],
                              verifier_weight=1.0)["extra_logs"]
    assert (graded["verifier"], graded["verifier_graded"]) == ([0.0], [0.0])


def test_verl_manager_clip_delta_and_outcome_placements(prm_folder, policy_tok, offline):
    verl = load_by_path("verl")
    data = verl_batch(policy_tok, RESPONSES[:1])
    want = compute_step_rewards(offline, [PROBLEM], RESPONSES[:1])[0]
    base = {"model": str(prm_folder), "device": "cpu"}
    clip, _ = run_verl_reward_loop(verl.PRMRewardManager,
                                   colocated({**base, "placement": "clip_delta"}),
                                   policy_tok, data)
    credits = clip_delta_credits(want.probabilities, eta=0.5)
    assert float(clip[0].sum()) == pytest.approx(float(credits.sum()), abs=1e-5)
    outcome, _ = run_verl_reward_loop(verl.PRMRewardManager,
                                      colocated({**base, "placement": "outcome"}),
                                      policy_tok, data)
    last = int(data.batch["attention_mask"][0, 6:].sum()) - 1
    assert outcome[0].nonzero().flatten().tolist() == [last]
    assert float(outcome[0, last]) == pytest.approx(want.score, abs=1e-5)


def test_verl_compute_score_as_the_naive_manager_calls_it(prm_folder, offline):
    verl = load_by_path("verl")
    reward_kwargs = {"model": str(prm_folder), "device": "cpu", "verifier_weight": 0.5}
    out = verl.compute_score(data_source="math", solution_str=RESPONSES[0], ground_truth="4",
                             extra_info={"question": PROBLEM, "num_turns": None,
                                         "rollout_reward_scores": {}}, **reward_kwargs)
    want = compute_step_rewards(offline, [PROBLEM], RESPONSES[:1])[0].score
    assert out["prm_score"] == pytest.approx(want, abs=1e-5)
    assert out["verifier"] == 1.0 and out["score"] == pytest.approx(want + 0.5, abs=1e-5)
    assert out["prm_steps"] == 3


def test_verl_interface_changes_get_a_clear_error(prm_folder, policy_tok, monkeypatch):
    verl = load_by_path("verl")
    config = colocated({"model": str(prm_folder), "device": "cpu"})
    data = verl_batch(policy_tok, RESPONSES[:1])
    del data.batch["responses"]
    with pytest.raises(EngineInterfaceError, match=r"batch\['responses'\]"):
        run_verl_reward_loop(verl.PRMRewardManager, config, policy_tok, data)
    monkeypatch.setitem(sys.modules, "verl", SimpleNamespace(__version__="0.10.0"))
    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "0.10.0" if name == "verl" else real_version(name))
    with pytest.raises(EngineInterfaceError, match="verl 0.10.0 is untested"):
        verl.PRMRewardManager(config=config, tokenizer=policy_tok, compute_score=None)
    with pytest.raises(EngineInterfaceError, match="untested"):
        verl.compute_score("math", RESPONSES[0], "4", {"problem": PROBLEM},
                           model=str(prm_folder), device="cpu")


def test_openrlhf_reward_file_as_its_executor_calls_it(prm_folder, policy_tok, offline, monkeypatch):
    monkeypatch.setenv("PRMKIT_MODEL", str(prm_folder))
    monkeypatch.setenv("PRMKIT_DEVICE", "cpu")
    monkeypatch.setenv("PRMKIT_VERIFIER_WEIGHT", "1.0")
    reward_func = load_by_path("openrlhf").reward_func
    prompt = PROBLEM + "\n\n"
    prompt_ids = policy_tok(prompt, add_special_tokens=False)["input_ids"]
    action = policy_tok(RESPONSES[0], add_special_tokens=False)["input_ids"] + [policy_tok.eos_token_id]
    query = policy_tok.decode(prompt_ids + action, skip_special_tokens=False)
    assert query.endswith("</s>")
    info = asyncio.run(asyncio.to_thread(reward_func, [query], [prompt], ["4"]))
    want = compute_step_rewards(offline, [prompt], RESPONSES[:1])[0].score
    assert float(info["scores"][0]) == pytest.approx(want, abs=1e-5)
    assert float(info["rewards"][0]) == pytest.approx(want + 1.0, abs=1e-5)
    # what OpenRLHF's samples generator then does with them
    assert torch.tensor([info["rewards"]]).shape == (1,)  # one reward per sample
    assert info["extra_logs"]["prm_steps"].flatten()[0].item() == 3


def test_openrlhf_reward_file_through_openrlhfs_own_executor(prm_folder, policy_tok, offline,
                                                             monkeypatch, rl_engines):
    """OpenRLHF 0.11.2 (beside this venv)'s SingleTurnAgentExecutor loads this file by path
    and fetches the reward as in training."""
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    monkeypatch.setenv("PRMKIT_MODEL", str(prm_folder))
    monkeypatch.setenv("PRMKIT_DEVICE", "cpu")
    executor = SingleTurnAgentExecutor(remote_rm_url=str(FILES / "openrlhf.py"))
    prompt = PROBLEM + "\n\n"
    ids = policy_tok(prompt + RESPONSES[0], add_special_tokens=False)["input_ids"]
    query = policy_tok.decode(ids + [policy_tok.eos_token_id], skip_special_tokens=False)
    info = asyncio.run(executor._fetch_rewards_via_func([query], [prompt], ["4"]))[0]
    want = compute_step_rewards(offline, [prompt], RESPONSES[:1])[0].score
    assert torch.tensor([info["rewards"]]).tolist() == pytest.approx([want], abs=1e-5)


def test_openrlhf_rewards_keep_order_and_give_ungradable_queries_the_null_reward(offline):
    prompts = [PROBLEM + "\n\n"] * 3
    queries = [prompts[0] + RESPONSES[1] + "<|im_end|>", "another prompt entirely",
               prompts[0] + RESPONSES[0]]
    out = openrlhf_rewards(offline, queries, prompts, ["42", "4", "4"], null_reward=-1.0)
    want = compute_step_rewards(offline, prompts, [RESPONSES[1], "", RESPONSES[0]])
    assert out["scores"] == pytest.approx([want[0].score, -1.0, want[2].score], abs=1e-5)
    assert out["rewards"] == out["scores"]  # verifier_weight 0: the PRM alone
    assert out["extra_logs"]["prm_steps"] == [1, 0, 3]
    assert response_text("P: hi</s><pad>", "P:") == " hi"  # trailing special tokens only
