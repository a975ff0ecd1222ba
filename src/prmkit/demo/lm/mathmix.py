"""The world's MathMix: the text a shared base model is pretrained on before any reward model
sees a label.

Two parts, both from problems of a stream of their own that shares no canonical key with the
first `reserve` problems of any seed in `exclude_seeds` (every demo split of those seeds, and
the small-scale experiments' problems after them):

- worked solutions: the reference solution of each MathMix problem (one document each);
- arithmetic facts: `a op b = c` lines with the exact result, for every operand pair the
  solver writes in sampled solutions of those problems (its slips and miscopies included, so
  that a reader can check them), `+` and `*` in both operand orders. Facts are drawn with
  probability proportional to count ** `fact_alpha` over the distinct facts (0: uniform, so
  rare facts are seen as often as common ones; 1: as often as the world writes them).

`worked_documents` gives the second corpus a base reads (`prmkit.demo.lm.base_settings.ReadingConfig`):
the right solution of each problem in every order the world allows (up to a limit, the
written order first), so that a reader learns which steps may come next, not one order.

`fact_format="lsd"` writes the facts with every number's digits least-significant first
(after a marker, `R:`), the format small transformers learn addition fastest in; worked
solutions, and so everything a reader sees, stay in the usual order.
"""

from __future__ import annotations

import functools
import json
import random
from collections import Counter
from dataclasses import asdict, dataclass, field

from prmkit.demo.world.examples import corpus_documents
from prmkit.demo.world.problems import make_problems
from prmkit.demo.world.solver import sample_pools
from prmkit.demo.world.trees import apply_op
from prmkit.errors import PrmkitError

FACT_FORMATS = ("plain", "lsd")
_STREAM = 7919  # the MathMix problem stream's seed, far from the demo's seeds


@dataclass(frozen=True)
class MathMixConfig:
    problems: int = 6000  # fresh problems: their worked solutions, and the facts' table
    difficulty: str = "easy"
    fact_samples: int = 16  # sampled solutions per problem read for operand pairs
    fact_lines: int = 200_000
    fact_alpha: float = 0.5
    fact_format: str = "plain"
    facts_per_doc: int = 16
    exclude_seeds: tuple[int, ...] = field(default=tuple(range(10)))
    reserve: int = 6000  # first problems of each excluded seed's stream kept out

    def __post_init__(self) -> None:
        if self.fact_format not in FACT_FORMATS:
            raise PrmkitError(f"fact_format must be one of {FACT_FORMATS}, got {self.fact_format!r}")
        if self.fact_alpha < 0:
            raise PrmkitError(f"fact_alpha must be >= 0, got {self.fact_alpha}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass
class MathMix:
    problems: list  # WorldProblem: the worked solutions' problems
    solutions: list[str]  # one document per problem
    facts: list[str]  # documents of fact lines
    table: Counter  # (op, a, b) -> how often the world writes it

    @property
    def documents(self) -> list[str]:
        return self.solutions + self.facts


def worked_documents(problems, orders: int) -> list[str]:
    """Per problem, one document per valid order of its steps (at most `orders`, the written
    order first): the problem line, its right steps in that order, the answer line."""
    docs = []
    for prob in problems:
        plan = prob.plans[0]
        for order in plan.orders[:orders]:
            steps = [plan.clean[j] for j in order] + [f"Answer: {prob.answer}"]
            docs.append(prob.text + "\n" + "\n".join(steps))
    return docs


def world_mix(cfg: MathMixConfig) -> list:
    """The mix of problem forms a seed's splits draw: the first `cfg.reserve` problems of a
    stream of their own at MathMix's difficulty (a longer stream runs out of distinct
    equations first)."""
    return make_problems(cfg.reserve, seed=_STREAM + 1, difficulty=cfg.difficulty)


def world_mix_repeats(problems, world) -> dict[str, int]:
    """Per problem form (`WorldProblem.form`), how many times to repeat its problems so that
    the forms of `problems` hold the shares they have in `world`, the form most
    over-represented read once. MathMix leaves out every key a seed may use, and those take
    most of the few distinct equations of a low difficulty: its own mix is almost all word
    problems."""
    share = Counter(p.form for p in world)
    have = Counter(p.form for p in problems)
    ratio = {f: have[f] / share[f] for f in have if share[f]}
    top = max(ratio.values())
    return {f: max(1, round(top / r)) for f, r in ratio.items()}


def extra_equations(cfg: MathMixConfig, n: int, difficulty: str) -> list:
    """`n` distinct equations (both forms) of `difficulty` from a stream of their own, none
    with a key a seed may use (`excluded_keys`)."""
    return _fresh_problems(n, _STREAM + 2, difficulty, excluded_keys(cfg), 4 * n,
                           keep=lambda p: p.kind == "equation")


def excluded_keys(cfg: MathMixConfig) -> frozenset[str]:
    """Canonical keys of every problem the demo's seeds may use (test, train, pretrain and
    the small-scale problems after them)."""
    return _seed_keys(tuple(cfg.exclude_seeds), cfg.reserve, cfg.difficulty)


@functools.cache
def _seed_keys(seeds: tuple[int, ...], reserve: int, difficulty: str) -> frozenset[str]:
    return frozenset(p.key for seed in seeds
                     for p in make_problems(reserve, seed=seed, difficulty=difficulty))


def mathmix_problems(cfg: MathMixConfig) -> list:
    """`cfg.problems` distinct problems of the MathMix stream, none with an excluded key."""
    excluded = excluded_keys(cfg)
    return _fresh_problems(cfg.problems, _STREAM, cfg.difficulty, excluded,
                           cfg.problems + len(excluded) // 20 + 16)


def _fresh_problems(n: int, seed: int, difficulty: str, excluded: frozenset[str], first: int,
                    keep=None) -> list:
    """The first `n` problems of the stream `seed` that have no excluded key (and that `keep`
    accepts), drawing `first` problems, then twice as many until there are enough (the
    first k problems of a stream are the same however many are drawn)."""
    m = first
    while True:
        stream = make_problems(m, seed=seed, difficulty=difficulty)
        out = [p for p in stream if p.key not in excluded and (keep is None or keep(p))][:n]
        if len(out) == n:
            return out
        m *= 2


def step_facts(steps) -> list[tuple[str, int, int]]:
    """The (op, a, b) of every `a op b = c` step whose exact result is a non-negative integer."""
    out = []
    for s in steps:
        parts = s.split()
        if len(parts) != 5 or parts[3] != "=" or parts[1] not in "+-*/":
            continue
        try:
            a, b = int(parts[0]), int(parts[2])
        except ValueError:
            continue
        v = apply_op(parts[1], a, b)
        if v is not None and v >= 0:
            out.append((parts[1], a, b))
    return out


def fact_table(problems, samples: int, seed: int = _STREAM) -> Counter:
    """How often each operand pair is written in `samples` sampled solutions per problem,
    plus the reference solutions; + and * counted in both operand orders."""
    table: Counter = Counter()
    pools = sample_pools(problems, samples, seed=seed) if samples else [[] for _ in problems]
    for prob, pool in zip(problems, pools):
        for steps in [prob.reference_solution(), *pool]:
            for op, a, b in step_facts(steps):
                table[(op, a, b)] += 1
                if op in "+*" and a != b:
                    table[(op, b, a)] += 1
    return table


def _lsd(v: int) -> str:
    return str(v)[::-1]


def fact_line(op: str, a: int, b: int, fmt: str = "plain") -> str:
    c = apply_op(op, a, b)
    if c is None:
        raise PrmkitError(f"{a} {op} {b} has no exact integer result")
    if fmt == "lsd":
        return f"R: {_lsd(a)} {op} {_lsd(b)} = {_lsd(c)}"
    return f"{a} {op} {b} = {c}"


def sample_facts(table: Counter, lines: int, alpha: float, rng: random.Random) -> list:
    facts = sorted(table)
    weights = [table[f] ** alpha for f in facts]
    return rng.choices(facts, weights=weights, k=lines)


@functools.lru_cache(maxsize=2)
def build_mathmix(cfg: MathMixConfig) -> MathMix:
    """The corpus for `cfg` (the last two are kept: a sweep over model settings builds it once)."""
    problems = mathmix_problems(cfg)
    table = fact_table(problems, cfg.fact_samples)
    rng = random.Random(f"mathmix:{cfg.to_json()}")
    drawn = sample_facts(table, cfg.fact_lines, cfg.fact_alpha, rng) if table else []
    lines = [fact_line(*f, fmt=cfg.fact_format) for f in drawn]
    k = max(cfg.facts_per_doc, 1)
    facts = ["\n".join(lines[i: i + k]) for i in range(0, len(lines), k)]
    return MathMix(problems, corpus_documents(problems), facts, table)
