"""What a search run does: the method, its budget, and how steps are sampled and scored.

Invariants are checked when the config is built (no I/O here): a config that exists is
one that `run_search` can run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal, get_args

from prmkit.errors import PrmkitError
from prmkit.generation.base import SamplingParams
from prmkit.scoring.aggregate import AGGREGATIONS

Approach = Literal["best_of_n", "weighted_best_of_n", "beam_search", "dvts"]
APPROACHES: tuple[str, ...] = get_args(Approach)
TREE_APPROACHES = ("beam_search", "dvts")


@dataclass(frozen=True)
class SearchConfig:
    """One search setting.

    n: the budget: solutions (best-of-N), candidates sampled per round at most and final
    pool size (tree methods). beam_width: M; beam search keeps the top n/M open candidates
    (fewer when fewer are open) and expands each into M, DVTS runs n/M subtrees of width
    M and pools each subtree's M last children. max_steps: rounds of one step each (tree methods); the last
    round samples every candidate to its end. sampling: temperature, top_p, stop strings,
    and max_tokens of a whole solution (best-of-N and the last round), by default
    `SamplingParams()`'s, the defaults of `prmkit generate` too; step_max_tokens caps one
    step. aggregation: the one setting (prmkit.scoring.aggregate) used to rank,
    prune and pick. seed: base of the per-request seeds (generation.base.sample_seed).
    batch_problems: problems searched together (their requests share one sampler call).
    """

    approach: Approach = "best_of_n"
    n: int = 16
    beam_width: int = 4
    max_steps: int = 40
    aggregation: str = "prod"
    sampling: SamplingParams = field(default_factory=SamplingParams)
    step_max_tokens: int = 512
    step_separator: str = "\n\n"
    seed: int = 0
    batch_problems: int = 8

    def __post_init__(self):
        if self.approach not in APPROACHES:
            raise PrmkitError(f"unknown search approach {self.approach!r}; choose one of "
                              f"{', '.join(APPROACHES)}")
        if self.aggregation not in AGGREGATIONS:
            raise PrmkitError(f"unknown aggregation {self.aggregation!r}; choose one of "
                              f"{', '.join(AGGREGATIONS)}")
        for name in ("n", "beam_width", "max_steps", "step_max_tokens", "batch_problems"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise PrmkitError(f"{name} must be a positive integer, got {value!r}")
        if self.approach in TREE_APPROACHES and self.n % self.beam_width:
            raise PrmkitError(f"{self.approach} needs n divisible by beam_width: n={self.n}, "
                              f"beam_width={self.beam_width}")
        if not self.step_separator:
            raise PrmkitError("step_separator is empty")
        if not isinstance(self.sampling, SamplingParams):
            raise PrmkitError(f"sampling must be SamplingParams, got {type(self.sampling).__name__}")

    @property
    def beams(self) -> int:
        """n/M: the most open candidates kept per round (beam search; fewer when fewer are
        open), subtrees (DVTS)."""
        return self.n // self.beam_width

    def full_params(self) -> SamplingParams:
        """Sampling of whole solutions (best-of-N, the last round of a tree search)."""
        return self.sampling

    def step_params(self) -> SamplingParams:
        """Sampling of one step: stops at the separator, at most step_max_tokens."""
        s = self.sampling
        stop = s.stop if self.step_separator in s.stop else (*s.stop, self.step_separator)
        return SamplingParams(temperature=s.temperature, top_p=s.top_p,
                              max_tokens=self.step_max_tokens, stop=stop)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["sampling"]["stop"] = list(d["sampling"]["stop"])
        return d

    @classmethod
    def from_dict(cls, d: dict) -> SearchConfig:
        d = dict(d)
        if isinstance(d.get("sampling"), dict):
            s = dict(d["sampling"])
            s["stop"] = tuple(s.get("stop") or ())
            d["sampling"] = SamplingParams(**s)
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise PrmkitError(f"unknown search config fields: {', '.join(sorted(unknown))}")
        return cls(**d)
