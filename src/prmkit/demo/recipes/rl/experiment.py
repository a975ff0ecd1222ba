"""RL with process rewards in the demo world: does the policy learn to reason, or to fool the PRM?

Per seed: the demo's PRM and ORM (`prmkit.demo.core.seed`, the demo's own settings), a policy fine-tuned from the same base on correct worked solutions
(`prmkit.demo.lm.policy`), then GRPO through TRL with prmkit's adapter under each reward, at matched
compute (the same prompts in the same seeded order, the same generations per prompt, the
same optimizer steps and evaluation schedule):

- ``verifier``: the checker's final-answer verdict (1 / 0), TRL's scalar reward;
- ``orm``: the demo's ORM score, TRL's scalar reward (`ProcessReward` over the ORM);
- ``prm_process``: the PRM with DeepSeekMath process credit (`ProcessRewardGRPOTrainer`);
- ``prm_min``: the PRM with PURE's min-form credit;
- ``prm_min_verifier``: min-form credit plus the group-normalised verifier, weight 1.

Every `eval_every` steps (and at step 0) the policy is measured on a fixed subset of the
seed's held-out test problems (`eval`). One result per (seed, reward) is cached under
the work folder, keyed by every setting, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from prmkit.data.io import cached_json
from prmkit.demo.core.config import torch_settings
from prmkit.demo.core.seed import seed_models, seed_world
from prmkit.demo.lm.policy import policy_rows, policy_sampler, train_policy
from prmkit.demo.recipes.rl.config import RLConfig
from prmkit.demo.recipes.rl.eval import Counting, best_of_n, evaluate
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
    """The seed's world, reward models and fine-tuned policy, each cached: the models as
    every experiment caches a seed's models (`core.seed`), the policy under work/rl."""
    from prmkit.scoring import Scorer

    sw = seed_world(seed, cfg.demo)
    models = seed_models(seed, cfg.demo, work, sw)
    print(f"[rl] seed {seed}: policy (fine-tuned on correct solutions)", flush=True)
    policy_dir = train_policy(models.backbone_dir, policy_rows(sw.splits.train, sw.train_pools),
                              work / "rl" / f"seed{seed}" / f"policy-{cfg.policy_key()}",
                              cfg.policy, seed, progress=cfg.demo.progress)
    load = lambda p: Counting(Scorer.from_pretrained(p, dtype=None, token_budget=16384))  # noqa: E731
    return SeedSetup(seed, list(sw.splits.train), list(sw.splits.test[: cfg.eval_problems]),
                     load(models.prm_dir), load(models.orm_dir), policy_dir)


def _evaluator(cfg: RLConfig, s: SeedSetup):
    return lambda sampler: evaluate(sampler, s.eval_set, s.prm, s.orm, cfg, s.seed)


def initial_point(cfg: RLConfig, s: SeedSetup) -> dict:
    """Step 0 (the fine-tuned policy, shared by every reward) and its best-of-N."""
    sampler = policy_sampler(s.policy_dir)
    point = {"step": 0, **_evaluator(cfg, s)(sampler)}
    return {"point": point, "best_of_n": best_of_n(sampler, s.eval_set, s.prm, cfg, s.seed)}


def run_reward(name: str, cfg: RLConfig, s: SeedSetup, out: Path) -> dict:
    """One GRPO run: its evaluation curve (steps > 0), best-of-N, accounting and timing."""
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
    bon = best_of_n(sampler, s.eval_set, s.prm, cfg, s.seed)
    shutil.rmtree(out, ignore_errors=True)
    logged = [e for e in trainer.state.log_history if "reward" in e]
    return {"reward": name, "seed": s.seed, "curve": curve, "best_of_n": bon,
            "train_reward": [e["reward"] for e in logged],  # what GRPO maximised, per step
            "train_signals": {k: [e.get(k) for e in logged] for k in
                              ("prm/prm_score", "prm/steps_per_completion",
                               "completions/mean_length")},
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
    """The whole experiment: every seed and reward, then rl_world.json, .png and a report."""
    cfg = cfg or RLConfig()
    cfg.check()
    out = Path(out)
    work = Path(work) if work is not None else out / "work"
    t0 = time.perf_counter()
    per_seed = [run_seed_rewards(seed, cfg, work) for seed in cfg.demo.seeds]
    return write_outputs(out, cfg, per_seed, time.perf_counter() - t0)
