"""Active learning in the demo world, the paper's Figure 5 (`experiment`), over what it
labels (`picks`: the selector, the 80/20 selection once or round by round)."""

from prmkit.demo.recipes.active.experiment import Config, figure_title, quick, run
from prmkit.demo.recipes.active.picks import active_picks, iterative_picks

__all__ = ["Config", "active_picks", "figure_title", "iterative_picks", "quick", "run"]
