import random
from collections import Counter

import pytest

from prmkit.demo.core.config import DemoConfig
from prmkit.demo.core.small_scale import SmallScaleConfig
from prmkit.demo.lm.mathmix import (
    MathMixConfig,
    build_mathmix,
    fact_line,
    fact_table,
    make_problems,
    mathmix_problems,
    sample_facts,
)
from prmkit.demo.world import make_splits
from prmkit.errors import PrmkitError

DEMO = DemoConfig()
RESERVE = (DEMO.test_problems + DEMO.train_problems + DEMO.pretrain_problems
           + SmallScaleConfig().problems)


def _split_keys(seeds) -> set[str]:
    keys = set()
    for seed in seeds:
        s = make_splits(seed, test=DEMO.test_problems, train=DEMO.train_problems,
                        pretrain=DEMO.pretrain_problems + SmallScaleConfig().problems,
                        difficulty=DEMO.difficulty)
        keys |= {p.key for p in s.test + s.train + s.pretrain}
    return keys


def test_mathmix_shares_no_canonical_key_with_any_split_of_any_seed():
    cfg = MathMixConfig(problems=1500, fact_samples=2, fact_lines=500,
                        exclude_seeds=(0, 1, 2), reserve=RESERVE)
    mm = build_mathmix(cfg)
    keys = {p.key for p in mm.problems}
    assert len(keys) == len(mm.problems) == 1500
    splits = _split_keys((0, 1, 2))
    assert not keys & splits
    # the exclusion is what keeps them apart: the stream itself meets the seeds' splits
    raw = {p.key for p in make_problems(1500, seed=7919, difficulty=cfg.difficulty)}
    assert raw & splits
    texts = {p.text for p in mm.problems}
    assert all(doc.split("\n", 1)[0] in texts for doc in mm.solutions)


def test_facts_are_exact_and_cover_both_operand_orders():
    problems = mathmix_problems(MathMixConfig(problems=50, exclude_seeds=(), reserve=0))
    table = fact_table(problems, samples=4)
    for (op, a, b), n in table.items():
        assert n > 0
        if op in "+*":
            assert (op, b, a) in table
        line = fact_line(op, a, b)
        left, right = line.split(" = ")
        assert int(right) == eval(left.replace("/", "//"))  # noqa: S307 - digits and one operator
    # the solver's slips and miscopies are read too: more pairs than the reference solutions
    assert len(table) > len(fact_table(problems, samples=0))


def test_lsd_facts_write_every_number_least_significant_digit_first():
    assert fact_line("+", 12, 9) == "12 + 9 = 21"
    assert fact_line("+", 12, 9, fmt="lsd") == "R: 21 + 9 = 12"
    assert fact_line("*", 15, 7, fmt="lsd") == "R: 51 * 7 = 501"
    with pytest.raises(PrmkitError, match="no exact integer"):
        fact_line("/", 7, 2)
    with pytest.raises(PrmkitError, match="fact_format"):
        MathMixConfig(fact_format="msd")


def test_fact_sampling_alpha_zero_sees_rare_facts_as_often_as_common_ones():
    table = Counter({("+", 1, 1): 1000, ("+", 2, 2): 1})
    uniform = Counter(sample_facts(table, 4000, 0.0, random.Random(0)))
    natural = Counter(sample_facts(table, 4000, 1.0, random.Random(0)))
    assert 1700 < uniform[("+", 2, 2)] < 2300
    assert natural[("+", 2, 2)] < 30


def test_mathmix_is_deterministic_and_keyed_by_its_settings():
    cfg = MathMixConfig(problems=30, fact_samples=2, fact_lines=64, exclude_seeds=(0,),
                        reserve=200)
    a, b = build_mathmix(cfg), build_mathmix.__wrapped__(cfg)
    assert a.documents == b.documents
    assert len(a.facts) == 64 // cfg.facts_per_doc
    other = build_mathmix(MathMixConfig(**{**cfg.__dict__, "fact_alpha": 0.0}))
    assert other.solutions == a.solutions and other.facts != a.facts


def test_the_shipped_base_never_read_a_test_problem_of_the_default_settings():
    """The base's corpora (MathMix, the reading stage) leave out the first `reserve` problems
    of each excluded seed's stream, which start with its test split; training problems past
    the reserve may coincide with a corpus problem (13 to 16 of 6,000 per seed, measured),
    a test problem cannot."""
    from prmkit.demo.lm.base import BaseConfig

    base, demo = BaseConfig(), DemoConfig()
    assert demo.test_problems <= base.mathmix.reserve
    assert set(demo.seeds) <= set(base.mathmix.exclude_seeds)


def test_world_mix_repeats_bring_each_form_to_the_worlds_share():
    from prmkit.demo.lm.mathmix import world_mix_repeats

    world = make_problems(600, seed=3, difficulty="easy")
    assert set(world_mix_repeats(world, world).values()) == {1}  # the world's own mix
    words = [p for p in world if p.form == "word"]
    equations = [p for p in world if p.form == "equation"]
    two_sided = [p for p in world if p.form == "two-sided"]
    few = equations[: len(equations) // 10]
    repeats = world_mix_repeats(words + few + two_sided, world)
    assert repeats == {"word": 1, "equation": round(len(equations) / len(few)), "two-sided": 1}


def test_mathmix_reads_few_equations_and_the_world_mix_repeats_them():
    from dataclasses import replace

    from prmkit.demo.lm.mathmix import world_mix, world_mix_repeats

    cfg = MathMixConfig()
    problems = mathmix_problems(replace(cfg, problems=4000))
    forms = Counter(p.form for p in problems)
    world = Counter(p.form for p in world_mix(cfg))
    assert forms["word"] / len(problems) > world["word"] / cfg.reserve  # skewed to words
    repeats = world_mix_repeats(problems, world_mix(cfg))
    assert repeats["word"] == 1 and repeats["equation"] > 1 and repeats["two-sided"] > 1
