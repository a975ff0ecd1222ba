"""RL with process rewards in the demo world (`experiment`): its settings (`config`), GRPO
runs (`trainer`), held-out measures (`eval`) and outputs (`report`)."""

from prmkit.demo.recipes.rl.config import Config, RLConfig, quick
from prmkit.demo.recipes.rl.experiment import run

__all__ = ["Config", "RLConfig", "quick", "run"]
