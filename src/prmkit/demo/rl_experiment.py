"""RL with process rewards in the demo world: does the policy learn to reason, or to fool the PRM?

Per seed: the demo's PRM and ORM (`prmkit.demo.run.train_seed_models`, the demo's own
settings), a policy fine-tuned from the same base on correct worked solutions
(`rl_policy`), then GRPO through TRL with prmkit's adapter under each reward, at matched
compute (the same prompts in the same seeded order, the same generations per prompt, the
same optimizer steps and evaluation schedule):

- ``verifier``: the checker's final-answer verdict (1 / 0), TRL's scalar reward;
- ``orm``: the demo's ORM score, TRL's scalar reward (`ProcessReward` over the ORM);
- ``prm_process``: the PRM with DeepSeekMath process credit (`ProcessRewardGRPOTrainer`);
- ``prm_min``: the PRM with PURE's min-form credit;
- ``prm_min_verifier``: min-form credit plus the group-normalised verifier, weight 1.

Every `eval_every` steps (and at step 0) the policy is measured on a fixed subset of the
seed's held-out test problems (`rl_eval`). One result per (seed, reward) is cached under
the work folder, keyed by every setting, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from prmkit.data.io import cached_json
from prmkit.demo.rl_eval import Counting, best_of_n, evaluate
from prmkit.demo.rl_policy import (
    PolicySettings,
    policy_rows,
    policy_sampler,
    prompt_text,
    quiet_trainer_logs,
    train_policy,
)
from prmkit.demo.run import (
    DemoConfig,
    quick_config,
    seed_world,
    settings_key,
    torch_settings,
    train_seed_models,
)
from prmkit.errors import PrmkitError
from prmkit.rewards.trl import ProcessReward, VerifierReward

REWARDS = {  # name: (label, credit rule or None for TRL's scalar reward, verifier weight)
    "verifier": ("verifiable outcome (checker)", None, 0.0),
    "orm": ("ORM score", None, 0.0),
    "prm_process": ("PRM, process credit (DeepSeekMath)", "process", 0.0),
    "prm_min": ("PRM, min-form credit (PURE)", "min", 0.0),
    "prm_min_verifier": ("PRM min-form + verifier", "min", 1.0),
}


@dataclass
class RLConfig:
    # the demo's reward models from the shared base, on one thread (as measured for the budget)
    demo: DemoConfig = field(default_factory=lambda: DemoConfig(base="mathmix", threads=1))
    rewards: tuple[str, ...] = tuple(REWARDS)
    policy: PolicySettings = field(default_factory=PolicySettings)
    steps: int = 30  # GRPO optimizer steps per run
    prompts_per_step: int = 4
    generations: int = 4  # completions per prompt (GRPO's group)
    max_completion: int = 64  # tokens; the world's solutions take up to about 50
    lr: float = 1e-4  # 1e-3 collapsed the training reward of seed 0 (verdict and PRM)
    temperature: float = 1.0
    beta: float = 0.0  # KL to the reference policy (TRL's default: none)
    eval_every: int = 10
    eval_problems: int = 60  # the first test problems of the seed
    eval_samples: int = 4  # sampled solutions per problem at each evaluation
    bon_n: int = 16  # best-of-N with the PRM on the final policy
    # torch threads of the GRPO runs and evaluations (the reward models and the policy's
    # fine-tuning use demo.threads): a model this small gains nothing from a second thread,
    # and a second thread on a busy core makes each tiny op wait
    threads: int = 1

    def key(self) -> str:
        settings = asdict(self)
        settings.pop("rewards")
        settings["demo"] = {k: v for k, v in settings["demo"].items()
                            if k not in ("seeds", "progress")}
        return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]

    def check(self) -> None:
        unknown = [r for r in self.rewards if r not in REWARDS]
        if unknown:
            raise PrmkitError(f"unknown rewards {unknown}; choose from {', '.join(REWARDS)}")
        if self.steps < 1 or self.eval_every < 1 or self.generations < 2:
            raise PrmkitError("steps and eval_every must be >= 1 and generations >= 2")


def quick_rl(seeds: tuple[int, ...] = (0,)) -> RLConfig:
    """Seconds-long settings (smoke tests), not a result: the quick demo's models."""
    return RLConfig(demo=replace(quick_config(seeds), threads=1),
                    policy=PolicySettings(steps=4, batch_size=8, lr=1e-3), steps=2, prompts_per_step=2, generations=2, max_completion=24,
                    eval_every=1, eval_problems=4, eval_samples=2, bon_n=2)


class WorldVerifier(VerifierReward):
    """The checker's final-answer verdict as TRL's verifiable reward (1.0 / 0.0), by the
    dataset's problem_id column."""

    __name__ = "verifier"

    def __init__(self, problems):
        super().__init__(answer_key="problem_id")
        self.problems = {p.id: p for p in problems}

    def __call__(self, prompts, completions, **kwargs) -> list[float | None]:
        from prmkit.demo import world
        from prmkit.demo.rl_policy import solution_steps

        ids = kwargs.get("problem_id")
        if ids is None:
            raise PrmkitError("the dataset has no 'problem_id' column for the verifier")
        self.last = [float(world.check_solution(self.problems[i], solution_steps(c)).final_correct)
                     for i, c in zip(ids, completions, strict=True)]
        return self.last


@dataclass
class Ledger:
    """What a run consumed: prompts per generation batch, completions, reward-model
    forward passes (one per scored completion) during training; the last batch TRL
    trained on (its rows, in the order the rewards saw them)."""

    prompts: list[str] = field(default_factory=list)
    completions: int = 0
    last_batch: dict = field(default_factory=dict)


def prompt_rows(problems, cfg: RLConfig, seed: int) -> list[dict]:
    """The training prompts of a run, in the seed's order (the same for every reward)."""
    order = list(problems)
    random.Random(f"rl-prompts:{seed}").shuffle(order)
    need = cfg.steps * cfg.prompts_per_step
    order = (order * (need // max(len(order), 1) + 1))[:need]
    return [{"prompt": prompt_text(p), "problem": p.text, "problem_id": p.id} for p in order]


def grpo_trainer(name: str, cfg: RLConfig, seed: int, policy_dir: Path, rows: list[dict],
                 problems, prm, orm, out: Path, ledger: Ledger, callbacks=()):
    """TRL's GRPOTrainer (scalar rewards) or prmkit's ProcessRewardGRPOTrainer (process
    credit) for reward `name`, recording what it trains on into `ledger`."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from prmkit.rewards.trl import ProcessRewardGRPOTrainer

    _, credit, weight = REWARDS[name]
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    model = AutoModelForCausalLM.from_pretrained(policy_dir)
    aggregation = cfg.demo.aggregation
    kwargs: dict = {}
    if name == "verifier":
        base, funcs = GRPOTrainer, [WorldVerifier(problems)]
    elif name == "orm":
        base, funcs = GRPOTrainer, [ProcessReward(orm, policy_tokenizer=tokenizer)]
    else:
        base = ProcessRewardGRPOTrainer
        funcs = [ProcessReward(prm, policy_tokenizer=tokenizer, aggregation=aggregation)]
        funcs += [WorldVerifier(problems)] if weight else []
        kwargs = {"credit": credit, "verifier_weight": weight}

    class Recorded(base):
        def _generate_and_score_completions(self, inputs):
            result = super()._generate_and_score_completions(inputs)
            ledger.prompts += [r["problem_id"] for r in inputs[:: cfg.generations]]
            ledger.completions += len(inputs)
            ledger.last_batch = {"problem_ids": [r["problem_id"] for r in inputs],
                                 **{k: result[k].detach().clone() for k in
                                    ("advantages", "completion_ids", "completion_mask")}}
            return result

    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=cfg.prompts_per_step * cfg.generations,
        num_generations=cfg.generations, max_completion_length=cfg.max_completion,
        max_steps=cfg.steps, learning_rate=cfg.lr, beta=cfg.beta, temperature=cfg.temperature,
        shuffle_dataset=False, use_cpu=True, bf16=False, logging_steps=1, save_strategy="no",
        report_to="none", seed=seed, disable_tqdm=not cfg.demo.progress,
        lr_scheduler_type="constant")
    quiet_trainer_logs(cfg.demo.progress)
    trainer = Recorded(model=model, processing_class=tokenizer, args=args, reward_funcs=funcs,
                       train_dataset=Dataset.from_list(rows), callbacks=list(callbacks), **kwargs)
    quiet_trainer_logs(cfg.demo.progress, trainer)
    return trainer


def _eval_callback(cfg: RLConfig, sampler, run_eval, curve: list):
    from transformers import TrainerCallback

    class EvalEvery(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % cfg.eval_every == 0 or state.global_step == cfg.steps:
                model.eval()
                sampler.lm = model  # prmkit's HF sampler over the live policy
                curve.append({"step": state.global_step, **run_eval(sampler)})
                model.train()

    return EvalEvery()


@dataclass
class SeedSetup:
    seed: int
    problems: list  # the training problems (prompts)
    eval_set: list
    prm: Counting
    orm: Counting
    policy_dir: Path


def seed_setup(seed: int, cfg: RLConfig, work: Path) -> SeedSetup:
    """The seed's world, reward models (cached) and fine-tuned policy (cached)."""
    from prmkit.scoring import Scorer

    demo = replace(cfg.demo, seeds=(seed,))
    sw = seed_world(seed, demo)
    folder = work / f"seed{seed}"
    models_dir = folder / f"models-{settings_key(demo)}"
    marker = models_dir / "models.json"
    if not marker.is_file():
        shutil.rmtree(models_dir, ignore_errors=True)  # a run stopped mid-training
        print(f"[rl] seed {seed}: training the demo's PRM and ORM", flush=True)
        m = train_seed_models(seed, demo, sw, models_dir)
        marker.write_text(json.dumps({"backbone": str(m.backbone_dir), "prm": str(m.prm_dir),
                                      "orm": str(m.orm_dir)}))
    paths = json.loads(marker.read_text())
    print(f"[rl] seed {seed}: policy (fine-tuned on correct solutions)", flush=True)
    policy_dir = train_policy(paths["backbone"], policy_rows(sw.splits.train, sw.train_pools),
                              folder / f"policy-{_policy_key(cfg, demo)}", cfg.policy, seed,
                              progress=demo.progress)
    load = lambda p: Counting(Scorer.from_pretrained(p, dtype=None, token_budget=16384))  # noqa: E731
    return SeedSetup(seed, list(sw.splits.train), list(sw.splits.test[: cfg.eval_problems]),
                     load(paths["prm"]), load(paths["orm"]), policy_dir)


def _policy_key(cfg: RLConfig, demo: DemoConfig) -> str:
    blob = json.dumps({"demo": settings_key(demo), "policy": asdict(cfg.policy)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


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
    callback = _eval_callback(cfg, sampler, _evaluator(cfg, s), curve)
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
    folder = work / f"seed{seed}"
    with torch_settings(cfg.threads):
        start = cached_json(folder / f"start-{cfg.key()}.json", lambda: initial_point(cfg, s))
        runs = {}
        for name in cfg.rewards:
            def compute(name=name):
                print(f"[rl] seed {seed}: GRPO with reward {name}", flush=True)
                return run_reward(name, cfg, s, folder / f"grpo-{name}")
            runs[name] = cached_json(folder / f"{name}-{cfg.key()}.json", compute)
    return {"seed": seed, "start": start, "runs": runs}


def run_rl(out: str | Path, cfg: RLConfig | None = None, work: str | Path | None = None) -> dict:
    """The whole experiment: every seed and reward, then rl_world.json, .png and a report."""
    from prmkit.demo.rl_report import write_outputs

    cfg = cfg or RLConfig()
    cfg.check()
    out = Path(out)
    work = Path(work) if work is not None else out / "work"
    t0 = time.perf_counter()
    per_seed = [run_seed_rewards(seed, cfg, work / "rl") for seed in cfg.demo.seeds]
    return write_outputs(out, cfg, per_seed, time.perf_counter() - t0)
