"""RL with process rewards in the demo world: does the policy learn to reason, or to fool the PRM?

Per seed: a policy fine-tuned from the demo's base on correct worked solutions
(`prmkit.demo.lm.policy`) to solve 30-60% of training prompts; a PRM and an ORM trained on
the policy's own samples (`own_models`; or the demo's, `reward_models="demo"`); then GRPO
through TRL with prmkit's adapter under each reward, at matched compute (the same prompts
in the same seeded order, the same generations per prompt, the same optimizer steps and
evaluation schedule):

- ``verifier``: the checker's final-answer verdict (1 / 0), TRL's scalar reward;
- ``orm``: the ORM's score, TRL's scalar reward (`ProcessReward` over the ORM);
- ``prm_process``: the PRM with DeepSeekMath process credit (`ProcessRewardGRPOTrainer`);
- ``prm_min``: the PRM with PURE's min-form credit;
- ``prm_min_verifier``: min-form credit plus the group-normalised verifier, weight 1.

At step 0, every `eval_every` steps and at the last step the policy is measured on a fixed
subset of the seed's held-out test problems (`eval`). The regime checks (`regime.REGIME`) come first
in the results: the rewards are a comparison only when the verifier's own run learns.
One result per (seed, reward) is cached under the work folder, keyed by every setting, so
an interrupted run resumes where it stopped; seeds run in processes of their own.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from prmkit.data.io import cached_json
from prmkit.demo.core.config import torch_settings
from prmkit.demo.core.parallel import map_seeds, with_demo_settings
from prmkit.demo.core.seed import seed_backbone, seed_models, seed_world
from prmkit.demo.lm.policy import policy_rows, policy_sampler, train_policy
from prmkit.demo.recipes.rl.config import RLConfig
from prmkit.demo.recipes.rl.eval import Counting, best_of_n, evaluate, prompt_accuracy
from prmkit.demo.recipes.rl.own_models import own_reward_models
from prmkit.demo.recipes.rl.regime import regime
from prmkit.demo.recipes.rl.report import write_outputs
from prmkit.demo.recipes.rl.trainer import Ledger, eval_callback, grpo_trainer, prompt_rows


@dataclass
class SeedSetup:
    seed: int
    problems: list  # the training problems (prompts)
    eval_set: list
    prm: Counting
    orm: Counting
    policy_dir: Path


def seed_setup(seed: int, cfg: RLConfig, work: Path) -> SeedSetup:
    """The seed's world, policy and reward models, each cached: the policy and the models
    trained on its samples under work/rl, the demo's models as every experiment caches a
    seed's (`core.seed`)."""
    from prmkit.scoring import Scorer

    sw = seed_world(seed, cfg.demo)
    own = cfg.reward_models == "own"
    models = None if own else seed_models(seed, cfg.demo, work, sw)
    backbone = seed_backbone(seed, cfg.demo, work, sw) if own else models.backbone_dir
    print(f"[rl] seed {seed}: policy (fine-tuned on correct solutions)", flush=True)
    folder = work / "rl" / f"seed{seed}"
    policy_dir = train_policy(backbone, policy_rows(sw.splits.train, sw.train_pools),
                              folder / f"policy-{cfg.policy_key()}", cfg.policy, seed,
                              progress=cfg.demo.progress)
    if own:
        prm_dir, orm_dir = own_reward_models(seed, cfg, sw.splits.train, backbone, policy_dir,
                                             folder / f"rm-{cfg.own_key()}")
    else:
        prm_dir, orm_dir = models.prm_dir, models.orm_dir
    # a GRPO group's completions share its prompt: scored on the prompt's cached keys and
    # values (a faster GRPO step's scoring, every figure of the experiment unchanged:
    # BENCHMARKS.md, "RL in the demo world")
    load = lambda p: Counting(Scorer.from_pretrained(  # noqa: E731
        p, dtype=None, token_budget=16384, share_prefixes=True))
    return SeedSetup(seed, list(sw.splits.train), list(sw.splits.test[: cfg.eval_problems]),
                     load(prm_dir), load(orm_dir), policy_dir)


def _evaluator(cfg: RLConfig, s: SeedSetup):
    return lambda sampler: evaluate(sampler, s.eval_set, s.prm, s.orm, cfg, s.seed)


def initial_point(cfg: RLConfig, s: SeedSetup) -> dict:
    """Step 0 (the fine-tuned policy, shared by every reward), its accuracy on training
    prompts (the regime check) and best-of-N with the PRM and with the ORM."""
    sampler = policy_sampler(s.policy_dir)
    point = {"step": 0, **_evaluator(cfg, s)(sampler)}
    return {"point": point,
            "train_prompt_accuracy": prompt_accuracy(sampler, s.problems[: cfg.check_problems],
                                                     cfg, s.seed),
            **dict(zip(("best_of_n", "orm_best_of_n"),
                       best_of_n(sampler, s.eval_set, cfg, s.seed, s.prm, s.orm)))}


def run_reward(name: str, cfg: RLConfig, s: SeedSetup, out: Path) -> dict:
    """One GRPO run: its evaluation curve (steps > 0), best-of-N (`final_best_of_n`),
    accounting and timing."""
    t0 = time.perf_counter()
    ledger, curve = Ledger(), []
    rows = prompt_rows(s.problems, cfg, s.seed)
    sampler = policy_sampler(s.policy_dir)
    s.prm.reset()
    s.orm.reset()
    callback = eval_callback(cfg, sampler, _evaluator(cfg, s), curve)
    trainer = grpo_trainer(name, cfg, s.seed, s.policy_dir, rows, s.problems, s.prm, s.orm, out,
                           ledger, [callback])
    trainer.train()
    sampler.lm = trainer.model.eval()
    (bon,) = best_of_n(sampler, s.eval_set, cfg, s.seed, s.prm) if cfg.final_best_of_n else (None,)
    shutil.rmtree(out, ignore_errors=True)
    logged = [e for e in trainer.state.log_history if "reward" in e]
    return {"reward": name, "seed": s.seed, "curve": curve, "best_of_n": bon,
            "train_reward": [e["reward"] for e in logged],  # what GRPO maximised, per step
            "train_signals": {k: [e.get(k) for e in logged] for k in
                              ("prm/prm_score", "prm/steps_per_completion",
                               "completions/mean_length", "frac_reward_zero_std", "entropy",
                               "grad_norm")},
            "accounting": {"prompts_seen": len(ledger.prompts),
                           "prompts_sha": hashlib.sha256(
                               "\n".join(ledger.prompts).encode()).hexdigest()[:16],
                           "completions_sampled": ledger.completions,
                           "optimizer_steps": trainer.state.global_step,
                           "reward_model_passes_training": s.prm.training + s.orm.training,
                           "reward_model_passes_eval": s.prm.eval + s.orm.eval,
                           "eval_steps": [p["step"] for p in curve]},
            "seconds": time.perf_counter() - t0}


def run_seed_rewards(seed: int, cfg: RLConfig, work: Path) -> dict:
    """Every reward's run for one seed, each read from its cache when there."""
    with torch_settings(cfg.demo.threads):
        s = seed_setup(seed, cfg, work)
    folder = work / "rl" / f"seed{seed}"
    with torch_settings(cfg.threads):
        start = cached_json(folder / f"start-{cfg.key()}.json", lambda: initial_point(cfg, s))
        runs = {}
        for name in cfg.rewards:
            def compute(name=name):
                print(f"[rl] seed {seed}: GRPO with reward {name}", flush=True)
                return run_reward(name, cfg, s, folder / f"grpo-{name}")
            runs[name] = cached_json(folder / f"{name}-{cfg.key()}.json", compute)
    return {"seed": seed, "start": start, "runs": runs}


def run(cfg: RLConfig | None = None, out: str | Path = "rl-output",
        work: str | Path | None = None) -> dict:
    """The whole experiment, then rl_world.json, .png and a report. The verifier's runs come
    first: unless every regime check holds (`regime.regime`), the other rewards are not run
    (`compare_outside_regime=True` runs them anyway), and the results say why."""
    cfg = cfg or RLConfig()
    cfg.check()
    out = Path(out)
    work = Path(work) if work is not None else out / "work"
    t0 = time.perf_counter()
    if "verifier" in cfg.rewards and len(cfg.rewards) > 1 and not cfg.compare_outside_regime:
        first = replace(cfg, rewards=("verifier",))
        per_seed = map_seeds(partial(with_demo_settings, run_seed_rewards, first), cfg.demo, work)
        if not regime(per_seed, cfg)["met"]:
            print("[rl] the regime checks do not hold: the other rewards are not run "
                  "(compare_outside_regime=true runs them)", flush=True)
            return write_outputs(out, first, per_seed, time.perf_counter() - t0)
    per_seed = map_seeds(partial(with_demo_settings, run_seed_rewards, cfg), cfg.demo, work)
    return write_outputs(out, cfg, per_seed, time.perf_counter() - t0)
