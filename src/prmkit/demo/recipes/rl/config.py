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
        """Names one run's cached result (each reward's file carries the reward's name)."""
        return settings_key(self, leave_out=("rewards",))

    def policy_key(self) -> str:
        """Names the fine-tuned policy: the demo's models and the policy's settings."""
        return config_key({"demo": settings_key(self.demo), "policy": asdict(self.policy)})

    def check(self) -> None:
        unknown = [r for r in self.rewards if r not in REWARDS]
        if unknown:
            raise PrmkitError(f"unknown rewards {unknown}; choose from {', '.join(REWARDS)}")
        if self.steps < 1 or self.eval_every < 1 or self.generations < 2:
            raise PrmkitError("steps and eval_every must be >= 1 and generations >= 2")


Config = RLConfig


def quick(seeds: tuple[int, ...] = (0, 1, 2)) -> RLConfig:
    """Seconds-long settings (smoke tests), not a result: the quick demo's models."""
    return RLConfig(demo=replace(quick_config(seeds), threads=1),
                    policy=PolicySettings(steps=4, batch_size=8, lr=1e-3), steps=2,
                    prompts_per_step=2, generations=2, max_completion=24,
                    eval_every=1, eval_problems=4, eval_samples=2, bon_n=2)
