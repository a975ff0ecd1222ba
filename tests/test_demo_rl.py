"""prmkit demo --experiment rl: GRPO in the demo world, on the quick settings (tiny models)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch

from prmkit.cli import main
from prmkit.demo.core import seed as seed_mod
from prmkit.demo.core.config import torch_settings
from prmkit.demo.recipes.rl import experiment as rl
from prmkit.demo.recipes.rl import trainer as rl_trainer
from prmkit.demo.recipes.rl.config import REWARDS, quick
from prmkit.demo.recipes.rl.eval import COUNTS, SHARES
from prmkit.demo.recipes.rl.own_models import models_info
from prmkit.demo.recipes.rl.regime import REGIME, regime, regime_line
from prmkit.demo.recipes.rl.report import TITLES, matched, predictions
from prmkit.evaluation.plots import read_axes
from prmkit.rewards.contract import step_spans
from prmkit.rewards.credit import step_advantages


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One quick CLI run of every reward, with the number of GRPO runs it computed."""
    out = tmp_path_factory.mktemp("rl")
    computed = []
    real = rl.run_reward

    def counted(name, cfg, s, folder):
        computed.append((s.seed, name))
        return real(name, cfg, s, folder)

    rl.run_reward = counted
    try:
        argv = ["demo", "--experiment", "rl", "--quick", "--seeds", "0", "--out", str(out),
                "--no-progress"]
        assert main(argv) == 0
    finally:
        rl.run_reward = real
    return out, argv, computed


def test_cli_quick_run_writes_curves_for_every_reward_and_one_panel_per_metric(quick_run):
    out, _, computed = quick_run
    assert computed == [(0, name) for name in REWARDS]
    result = json.loads((out / "rl" / "rl_world.json").read_text())
    cfg = quick()
    assert list(result["curves"]) == list(REWARDS)
    for curve in result["curves"].values():
        assert curve["steps"] == [0, 1, 2]  # step 0, then every eval_every=1 steps
        for metric in SHARES:
            assert all(v is None or 0 <= v <= 1 for v in curve[metric]["mean"])
        assert all(v >= 1 for v in curve["steps_per_solution"]["mean"])
    # step 0 is the same fine-tuned policy for every reward
    assert len({json.dumps(c["greedy_accuracy"]["mean"][0]) for c in result["curves"].values()}) == 1
    assert set(result["best_of_n"]) == {"fine-tuned policy (step 0)", *REWARDS}
    assert result["config"]["bon_n"] == cfg.bon_n
    # what each reward's GRPO maximised, one value per logged step, per seed
    assert list(result["train_reward"]) == list(REWARDS)
    for runs in result["train_reward"].values():
        assert len(runs) == 1 and len(runs[0]) >= 1
        assert all(isinstance(v, float) for v in runs[0])
    (axes, *rest) = read_axes(out / "rl" / "rl_world.png")
    panels = [axes, *rest]
    assert [a["title"] for a in panels[: len(SHARES) + len(COUNTS)]] == \
        [TITLES[m] for m in (*SHARES, *COUNTS)]
    assert axes["legend"] == [label for label, _, _ in REWARDS.values()]
    assert (out / "rl" / "report.md").read_text().count("Best-of-2 with the PRM") == 1


def test_the_regime_checks_and_the_reward_models_on_the_policys_own_samples(quick_run):
    out, _, _ = quick_run
    cfg = quick()
    result = json.loads((out / "rl" / "rl_world.json").read_text())
    r = result["regime"]
    assert set(r["checks"]) == {"policy_accuracy", "group_size", "reward_models_rank",
                                "verifier_learns"}
    assert r["met"] == all(r["checks"].values())
    assert r["checks"]["group_size"] is False  # the quick settings' groups of 2
    assert len(r["train_prompt_accuracy"]) == len(r["verifier_gain"]) == 1
    assert 0 <= r["train_prompt_accuracy"][0] <= 1
    assert set(r["zero_std_share"]) == set(REWARDS)
    assert "Regime:" in result["statement"]
    (folder,) = (out / "work" / "rl" / "seed0").glob("rm-*")
    info = models_info(folder)
    assert info["problems"] == cfg.own_problems
    assert info["samples"] == cfg.own_problems * cfg.own_samples
    assert info["prm_examples"] == info["orm_examples"] > 0
    for kind in ("prm", "orm"):
        assert (folder / kind / "model" / "config.json").is_file()


def test_outside_the_regime_only_the_verifier_runs(quick_run, tmp_path, monkeypatch):
    out, _, _ = quick_run
    calls, real = [], rl.run_reward
    monkeypatch.setattr(rl, "run_reward", lambda *a: calls.append(a[0]) or real(*a))
    cfg = replace(quick((0,)), compare_outside_regime=False, rewards=("verifier", "orm"))
    work = tmp_path / "work"
    shutil.copytree(out / "work", work)
    (cached,) = (work / "rl" / "seed0").glob("verifier-*.json")
    cached.unlink()  # the verifier runs again; the ORM's cached run is not read
    result = rl.run(cfg, tmp_path / "rl", work=work)
    assert calls == ["verifier"]
    assert not result["regime"]["met"]
    assert list(result["rewards"]) == list(result["curves"]) == ["verifier"]
    assert "the other rewards were not run" in result["statement"]
    result = rl.run(replace(cfg, compare_outside_regime=True), tmp_path / "rl", work=work)
    assert calls == ["verifier"] and list(result["curves"]) == ["verifier", "orm"]


def _seed(accuracy, gain, pick=0.6, sample=0.5) -> dict:
    """One seed's results as the regime reads them: step 0, the verifier's last point."""
    bon = {"accuracy": pick, "sample_accuracy": sample}
    return {"start": {"point": {"sampled_accuracy": 0.4}, "train_prompt_accuracy": accuracy,
                      "best_of_n": bon, "orm_best_of_n": bon},
            "runs": {"verifier": {"curve": [{"sampled_accuracy": 0.4 + gain}],
                                  "train_signals": {"frac_reward_zero_std": [0.25, 0.5]}}}}


def test_the_regime_holds_only_when_every_seed_meets_every_check():
    cfg = replace(quick(), generations=REGIME["min_group"])
    good = [_seed(0.45, 0.12), _seed(0.31, 0.10)]
    r = regime(good, cfg)
    assert r["met"] and r["zero_std_share"]["verifier"] == pytest.approx(0.375)
    assert r["verifier_gain"] == pytest.approx([0.12, 0.10])
    assert not regime([*good, _seed(0.45, 0.09)], cfg)["checks"]["verifier_learns"]
    assert not regime([*good, _seed(0.65, 0.2)], cfg)["checks"]["policy_accuracy"]
    weak = regime([*good, _seed(0.45, 0.2, pick=0.5)], cfg)
    assert not weak["checks"]["reward_models_rank"]
    line = regime_line({"regime": weak, "rewards": {"verifier": "verdict"}})
    assert "NOT met (reward_models_rank: PRM, ORM): the other rewards were not run" in line
    assert "every check met" in regime_line({"regime": r, "rewards": {}})
    small = regime(good, replace(cfg, generations=REGIME["min_group"] - 1))
    assert not small["met"] and not small["checks"]["group_size"]


def test_every_reward_sees_the_same_prompts_completions_steps_and_evaluations(quick_run):
    out, _, _ = quick_run
    result = json.loads((out / "rl" / "rl_world.json").read_text())
    cfg = quick()
    ledgers = {name: runs[0] for name, runs in result["accounting"].items()}
    for name, a in ledgers.items():
        assert a["prompts_seen"] == cfg.steps * cfg.prompts_per_step, name
        assert a["completions_sampled"] == a["prompts_seen"] * cfg.generations, name
        assert a["optimizer_steps"] == cfg.steps and a["eval_steps"] == [1, 2], name
        # one reward-model pass per completion, none for the checker's verdict
        want = 0 if name == "verifier" else a["completions_sampled"]
        assert a["reward_model_passes_training"] == want, name
    assert len({a["prompts_sha"] for a in ledgers.values()}) == 1
    assert result["matched_compute"] is True
    # the check fails when one reward saw other prompts
    per_seed = [{"runs": {n: {"accounting": dict(a)} for n, a in ledgers.items()}}]
    assert matched(per_seed, list(ledgers))
    per_seed[0]["runs"]["orm"]["accounting"]["prompts_sha"] = "another order"
    assert not matched(per_seed, list(ledgers))


def test_a_resumed_run_recomputes_nothing_and_an_interrupted_one_only_what_is_missing(
        quick_run, monkeypatch):
    out, argv, _ = quick_run
    before = json.loads((out / "rl" / "rl_world.json").read_text())
    calls = []
    monkeypatch.setattr(seed_mod, "train_seed_models", lambda *a: calls.append("models"))
    real_policy, real = rl.train_policy, rl.run_reward
    monkeypatch.setattr(rl, "train_policy",
                        lambda *a, **k: calls.append("policy") or real_policy(*a, **k))
    marker = next((out / "work" / "rl" / "seed0").glob("policy-*/policy.json"))
    stamp = marker.stat().st_mtime_ns
    monkeypatch.setattr(rl, "run_reward", lambda *a: calls.append(a[0]) or real(*a))
    assert main(argv) == 0
    assert calls == ["policy"] and marker.stat().st_mtime_ns == stamp  # read, not trained
    again = json.loads((out / "rl" / "rl_world.json").read_text())
    assert again["curves"] == before["curves"]

    # an interruption during the third reward: the first two stay cached
    key = quick().key()
    for name in ("prm_process", "prm_min", "prm_min_verifier"):
        (out / "work" / "rl" / "seed0" / f"{name}-{key}.json").unlink()
    calls.clear()
    assert main(argv) == 0
    assert calls == ["policy", "prm_process", "prm_min", "prm_min_verifier"]
    resumed = json.loads((out / "rl" / "rl_world.json").read_text())
    assert resumed["curves"] == before["curves"]  # recomputed exactly


@pytest.fixture(scope="module")
def setup(quick_run):
    out, _, _ = quick_run
    cfg = quick()
    with torch_settings(cfg.threads):
        yield cfg, rl.seed_setup(0, replace(cfg, demo=replace(cfg.demo, progress=False)),
                                 out / "work")


def test_a_seeded_repeat_gives_the_same_curve(setup, tmp_path):
    cfg, s = setup
    first = rl.run_reward("prm_min", cfg, s, tmp_path / "a")
    second = rl.run_reward("prm_min", cfg, s, tmp_path / "b")
    assert first["curve"] == second["curve"] and first["best_of_n"] == second["best_of_n"]
    assert first["accounting"] == second["accounting"]


def _token_steps(tokenizer, ids: list[int], text: str) -> list[int]:
    """Each generated token's step: the first step whose text ends at or after the token's
    first character (tokens past the last step belong to the last one)."""
    spans = step_spans(text, "\n")
    out, start = [], 0
    for t in range(len(ids)):
        end = len(tokenizer.decode(ids[: t + 1], skip_special_tokens=True))
        k = next((k for k, (_, e) in enumerate(spans) if e > start), len(spans) - 1)
        out.append(k)
        start = end
    return out


def test_credit_lands_on_the_tokens_of_its_step_in_a_real_trl_step(setup, tmp_path):
    cfg, s = setup
    cfg = replace(cfg, steps=1, generations=4, prompts_per_step=2, max_completion=32)
    ledger = rl_trainer.Ledger()
    rows = rl_trainer.prompt_rows(s.problems, cfg, s.seed)
    trainer = rl_trainer.grpo_trainer("prm_min", cfg, 0, s.policy_dir, rows, s.problems, s.prm, s.orm,
                                 tmp_path, ledger)
    newline = trainer.processing_class("\n", add_special_tokens=False)["input_ids"]
    trainer.generation_config.sequence_bias = {tuple(newline): 4.0}  # a tiny policy writes steps
    trainer.train()
    batch, prm = ledger.last_batch, trainer.process_reward
    advantages = batch["advantages"].numpy()
    ids, mask = batch["completion_ids"].tolist(), batch["completion_mask"].numpy()
    want = step_advantages("min", [r.probabilities for r in prm.last],
                           [i // cfg.generations for i in range(len(prm.last))])
    multi = 0
    for i, r in enumerate(prm.last):
        n = int(mask[i].sum())
        text = trainer.processing_class.decode(ids[i][:n], skip_special_tokens=True)
        assert len(r.steps) == len(want[i]) == len(step_spans(text, "\n"))
        if not r.steps:
            assert not advantages[i].any()
            continue
        steps = _token_steps(trainer.processing_class, ids[i][:n], text)
        assert np.allclose(advantages[i][:n], [want[i][k] for k in steps], atol=1e-6)
        assert not advantages[i][n:].any()  # nothing on padding
        multi += len(set(steps)) > 1 and len(set(np.round(advantages[i][:n], 6))) > 1
    assert multi, "no completion got different credit on different steps"


def _trained_weights(cfg, s, out, share_prompts: bool = True,
                     drop_ended_rows: bool = True) -> tuple[dict, bool, set]:
    """Weights after a short GRPO run, whether checkpointing was on, and the log-prob tile
    widths TRL used at each step."""
    from transformers import TrainerCallback
    from trl.trainer import utils as trl_utils

    widths: set[int] = set()

    class Widths(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            widths.add(trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE)

    trainer = rl_trainer.grpo_trainer("prm_process", cfg, 0, s.policy_dir,
                                      rl_trainer.prompt_rows(s.problems, cfg, s.seed), s.problems,
                                      s.prm, s.orm, out, rl_trainer.Ledger(), [Widths()])
    trainer.share_prompts, trainer.drop_ended_rows = share_prompts, drop_ended_rows
    trainer.train()
    return ({k: v.detach().clone() for k, v in trainer.model.state_dict().items()},
            trainer.model.is_gradient_checkpointing, widths)


def test_the_demos_grpo_trains_exactly_as_with_trls_generate_checkpointing_and_wide_tiles(
        setup, tmp_path, monkeypatch):
    import contextlib

    import trl
    from transformers import AutoConfig, AutoModelForCausalLM
    from trl.trainer import utils as trl_utils

    cfg, s = setup
    cfg = replace(cfg, steps=2)
    trl_width = trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE
    vocab = AutoConfig.from_pretrained(s.policy_dir).vocab_size
    assert vocab < trl_width
    # without shared prompts, which checkpointing turns off (no cache in training): that
    # pass gives TRL's numbers to float rounding only (test_rewards_trl_trim.py; below)
    from prmkit.rewards import trl_generate

    decoded = []
    real_decode = trl_generate.generate_dropping_ended
    monkeypatch.setattr(trl_generate, "generate_dropping_ended",
                        lambda *a: decoded.append(1) or real_decode(*a))
    ours, checkpointed, widths = _trained_weights(cfg, s, tmp_path / "ours", share_prompts=False)
    assert not checkpointed and widths == {vocab} and len(decoded) == cfg.steps
    assert trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE == trl_width  # TRL's width back after training
    start = AutoModelForCausalLM.from_pretrained(s.policy_dir).state_dict()
    assert any(not torch.equal(start[k], ours[k]) for k in ours), "training moved nothing"
    real_config = trl.GRPOConfig
    monkeypatch.setattr(trl, "GRPOConfig",
                        lambda **kw: real_config(**{**kw, "gradient_checkpointing": True}))
    monkeypatch.setattr(rl_trainer, "logprob_tiles", lambda vocab: contextlib.nullcontext())
    # and TRL's sampling through transformers' generate, every row to the longest's end
    theirs, checkpointed, widths = _trained_weights(cfg, s, tmp_path / "trl",
                                                    drop_ended_rows=False)
    assert len(decoded) == cfg.steps
    assert checkpointed and widths == {trl_width}
    assert ours.keys() == theirs.keys()
    moved = [k for k in ours if not torch.equal(ours[k], theirs[k])]
    assert not moved, f"weights differ: {moved[:3]}"


def test_the_demos_grpo_with_shared_prompts_moves_the_weights_as_without(setup, tmp_path):
    from transformers import AutoModelForCausalLM

    cfg, s = setup
    cfg = replace(cfg, steps=2)
    start = AutoModelForCausalLM.from_pretrained(s.policy_dir).state_dict()
    shared, _, _ = _trained_weights(cfg, s, tmp_path / "shared")
    plain, _, _ = _trained_weights(cfg, s, tmp_path / "plain", share_prompts=False)
    update = lambda w: torch.cat([(w[k] - start[k]).flatten() for k in start])  # noqa: E731
    difference = (update(shared) - update(plain)).norm() / update(plain).norm()
    print(f"relative difference of the updates: {difference:.2e}")
    assert update(plain).norm() > 0 and difference < 1e-4


def _curve(**deltas) -> dict:
    """A two-point curve per metric: 0.5 at step 0, 0.5 + delta at the last evaluation."""
    return {"steps": [0, 30], **{m: {"mean": [0.5, 0.5 + deltas.get(m, 0.0)], "std": [0, 0]}
                                 for m in (*SHARES, *COUNTS)}}


def test_predictions_compare_the_literature_with_the_runs_figures():
    result = {"curves": {
        "verifier": _curve(right_answer_wrong_step=0.10, sampled_accuracy=0.1),
        "orm": _curve(sampled_accuracy=0.05),
        "prm_process": _curve(prm_score=0.2, sampled_accuracy=-0.1, steps_per_solution=2.0),
        "prm_min": _curve(prm_score=0.01, sampled_accuracy=0.02),
        "prm_min_verifier": _curve(right_answer_wrong_step=0.02)}}
    rows = {source: here for source, _, here in predictions(result)}
    assert rows["Let's Verify / Uesato et al."].startswith("yes")
    assert rows["DeepSeekMath"].startswith("no")  # 40.0% against 55.0%
    assert rows["DeepSeek-R1"].startswith("yes: prm_process ")
    assert rows["PURE"].startswith("yes")
    del result["curves"]["orm"]
    assert predictions(result)[1][2].startswith("not run")
    for name in ("prm_process", "prm_min", "prm_min_verifier"):
        del result["curves"][name]
    assert predictions(result)[2][2].startswith("not run")  # only the verifier ran


def test_cli_set_names_the_rl_setting_it_cannot_override(tmp_path, capsys):
    argv = ["demo", "--experiment", "rl", "--quick", "--out", str(tmp_path), "--no-progress"]
    assert main([*argv, "--set", "stepz=3"]) == 2
    assert "RLConfig has no field 'stepz'" in capsys.readouterr().err
    assert main([*argv, "--set", "policy.rate=3"]) == 2
    assert "PolicySettings has no field 'rate'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before anything ran


def test_the_verifiable_reward_is_the_checkers_final_answer_verdict_only():
    from prmkit.demo import world

    p = world.make_problems(1, seed=0, difficulty="easy")[0]
    right = "\n".join(p.reference_solution())
    wrong_step = "\n".join(["1 + 1 = 3", *p.reference_solution()])  # a slip, then the answer
    wrong_answer = "\n".join([*p.reference_solution()[:-1], f"Answer: {int(p.answer) + 1}"])
    verifier = rl_trainer.WorldVerifier([p])
    got = verifier(prompts=[p.text] * 4, completions=[right, wrong_step, wrong_answer, ""],
                   problem_id=[p.id] * 4)
    assert got == verifier.last == [1.0, 1.0, 0.0, 0.0]
    assert world.check_solution(p, wrong_step.split("\n")).first_error == 0


def test_by_default_the_runs_are_evaluated_at_the_start_and_the_end_only():
    from types import SimpleNamespace

    from prmkit.demo.recipes.rl.config import RLConfig
    from prmkit.demo.recipes.rl.report import best_of_n_rows

    cfg = RLConfig()
    curve: list = []
    callback = rl_trainer.eval_callback(cfg, SimpleNamespace(), lambda sampler: {"a": 1}, curve)
    model = SimpleNamespace(eval=lambda: None, train=lambda: None)
    for step in range(1, cfg.steps + 1):
        callback.on_step_end(None, SimpleNamespace(global_step=step), None, model=model)
    assert [p["step"] for p in curve] == [cfg.steps] and not cfg.final_best_of_n
    bon = {"accuracy": 0.5, "right_process": 0.4, "sample_accuracy": 0.3, "pass": 0.9}
    per_seed = [{"start": {"best_of_n": bon}, "runs": {"verifier": {"best_of_n": None}}}]
    assert list(best_of_n_rows(per_seed, ["verifier"])) == ["fine-tuned policy (step 0)"]
