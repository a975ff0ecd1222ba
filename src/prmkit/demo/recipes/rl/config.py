"""The RL experiment's settings (`RLConfig`) and its rewards."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from prmkit.demo.core.config import DemoConfig, quick_config
from prmkit.demo.lm.policy import PolicySettings
from prmkit.demo.settings import config_key, settings_key
from prmkit.errors import PrmkitError

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
    # the policy's sampled accuracy on this many training prompts (4 samples each) is the
    # regime check that it has room to learn: 30-60% (REGIME["policy_accuracy"])
    check_problems: int = 200
    # own: a PRM and an ORM trained on the policy's own samples of the first own_problems
    # training problems, own_samples each (rl.own_models); demo: the demo's reward models,
    # trained on the scripted solver's samples
    reward_models: str = "own"
    own_problems: int = 2000
    own_samples: int = 8
    # the verifier's runs come first; the other rewards run only when every regime check
    # holds (regime.REGIME), unless this is set
    compare_outside_regime: bool = False
    # 16 prompts x 8 at lr 1e-4, chosen on seed 0's training reward (docs/demo-world.md,
    # "RL with process rewards"): larger rates collapsed the policy, smaller batches learned
    # less; 38 steps (was 50): the most whose predicted wall time keeps the 3 seeds' five
    # rewards within the 30-minute budget on 2 cores (BENCHMARKS.md, "RL in the demo world")
    steps: int = 38  # GRPO optimizer steps per run
    prompts_per_step: int = 16
    generations: int = 8  # completions per prompt (GRPO's group)
    max_completion: int = 64  # tokens; the world's solutions take up to about 50
    lr: float = 1e-4  # 2e-4 and more collapsed seed 0's training reward, warm-up or not
    warmup_steps: int = 0  # linear warm-up of the learning rate, then constant
    temperature: float = 1.0
    beta: float = 0.0  # KL to the reference policy (TRL's default: none)
    eval_every: int = 0  # evaluate every this many steps; 0: at step 0 and the last only
    eval_problems: int = 120  # the first test problems of the seed
    eval_samples: int = 8  # sampled solutions per problem at each evaluation
    bon_n: int = 16  # best-of-N with the PRM (the regime check at step 0)
    final_best_of_n: bool = False  # best-of-N with the PRM on each run's final policy too
    # torch threads of the GRPO runs and evaluations (the reward models and the policy's
    # fine-tuning use demo.threads): a model this small gains nothing from a second thread,
    # and a second thread on a busy core makes each tiny op wait
    threads: int = 1

    def key(self) -> str:
        """Names one run's cached result (each reward's file carries the reward's name)."""
        run = settings_key(self, leave_out=("rewards", "compare_outside_regime"))
        return config_key({"run": run, "demo": self.demo.key()})

    def policy_key(self) -> str:
        """Names the fine-tuned policy: the demo's models and the policy's settings."""
        return config_key({"demo": self.demo.key(), "policy": asdict(self.policy)})

    def own_key(self) -> str:
        """Names the reward models trained on the policy's own samples."""
        return config_key({"policy": self.policy_key(), "problems": self.own_problems,
                           "samples": self.own_samples, "temperature": self.temperature,
                           "max_completion": self.max_completion})

    def check(self) -> None:
        unknown = [r for r in self.rewards if r not in REWARDS]
        if unknown:
            raise PrmkitError(f"unknown rewards {unknown}; choose from {', '.join(REWARDS)}")
        if self.reward_models not in ("own", "demo"):
            raise PrmkitError(f"reward_models must be 'own' or 'demo', got {self.reward_models!r}")
        if self.steps < 1 or self.eval_every < 0 or self.generations < 2:
            raise PrmkitError("steps must be >= 1, eval_every >= 0 and generations >= 2")


Config = RLConfig


def quick(seeds: tuple[int, ...] = (0, 1, 2)) -> RLConfig:
    """Seconds-long settings (smoke tests), not a result: the quick demo's models."""
    return RLConfig(demo=replace(quick_config(seeds), threads=1),
                    policy=PolicySettings(steps=4, batch_size=8, lr=1e-3), steps=2,
                    prompts_per_step=2, generations=2, max_completion=24,
                    eval_every=1, eval_problems=4, eval_samples=2, bon_n=2, final_best_of_n=True,
                    check_problems=4, own_problems=8, own_samples=2,
                    compare_outside_regime=True)
