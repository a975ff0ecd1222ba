import re
from collections import Counter

import pytest

from prmkit.demo.core.config import DemoConfig
from prmkit.demo.lm.mathmix import MathMixConfig, mathmix_problems
from prmkit.demo.world import (
    DIFFICULTIES,
    OOD_RULE,
    SHIFTS,
    check_solution,
    make_problems,
    make_splits,
    ood_problems,
    sample_pools,
    shifted_problems,
)
from prmkit.demo.world.error_kinds import error_kind
from prmkit.errors import PrmkitError

OOD = ood_problems(300, seed=0) + ood_problems(300, seed=1)


@pytest.fixture(scope="module")
def seen():
    """Problems of every difficulty the demo can train or pretrain on, for two seeds, the
    demo's own splits, and the MathMix stream's problems."""
    difficulties = {*DIFFICULTIES, DemoConfig().difficulty, MathMixConfig().difficulty}
    out = [p for d in sorted(difficulties) for seed in (0, 1)
           for p in make_problems(1500, seed=seed, difficulty=d)]
    split = make_splits(2, test=120, train=500, pretrain=500, difficulty=DemoConfig().difficulty)
    out += split.test + split.train + split.pretrain
    out += mathmix_problems(MathMixConfig(problems=1000, exclude_seeds=(0,), reserve=200))
    return out


def _shapes(problems) -> set[str]:
    """Every sentence of the problems with its numbers blanked: the templates they are
    written in."""
    return {re.sub(r"\d+", "#", s) for p in problems
            for s in re.split(r"(?<=[.?])\s+", p.text)}


def test_ood_problems_share_no_sentence_template_with_any_seen_problem(seen):
    seen_shapes = _shapes(seen)
    # the comparison sees a problem of a seen template: a seen level's problems fail it
    assert _shapes(make_problems(40, seed=9, difficulty=5)) & seen_shapes
    assert not _shapes(OOD) & seen_shapes
    assert {p.kind for p in OOD} == {"word"}


def test_ood_problems_have_more_operations_than_any_seen_problem(seen):
    longest = max(len(p.tree.nodes) for p in seen)
    assert longest == 7
    assert Counter(len(p.tree.nodes) for p in OOD).keys() == {8, 9}
    assert not {p.key for p in OOD} & {p.key for p in seen}


def test_ood_problems_start_from_numbers_no_seen_problem_uses(seen):
    # every problem's first number (a word problem's start); a word problem's every number
    seen_first = max(p.quantities[0] for p in seen)
    seen_word = max(max(p.quantities) for p in seen if p.kind == "word")
    ood_first = [p.quantities[0] for p in OOD]
    assert max(seen_first, seen_word) < 50 <= min(ood_first)
    assert max(ood_first) == 99
    assert "8-9 operations" in OOD_RULE and "start 50-99" in OOD_RULE


def test_ood_problems_are_deterministic_and_a_stream_of_their_own():
    again = ood_problems(300, seed=0)
    assert again == OOD[:300]
    assert ood_problems(20, seed=0) == again[:20]
    assert ood_problems(20, seed=1) != again[:20]
    assert len({p.key for p in OOD[:300]}) == 300
    assert [p.id for p in again[:2]] == ["ood-0-00000", "ood-0-00001"]
    assert {p.level for p in OOD} == {6}
    with pytest.raises(PrmkitError, match="must be >= 0"):
        ood_problems(-1)
    with pytest.raises(PrmkitError, match="integers in 1..5"):
        make_problems(5, difficulty=6)


def test_ood_pools_are_sampled_and_checked_with_mistakes_of_every_kind():
    problems = OOD[:120]
    for p in problems:
        assert check_solution(p, p.reference_solution()).process_correct
    assert {p.trap_kind for p in problems} >= {"distractor", "sign", "add-for-times",
                                                "forgot-step", "misread"}
    pools = sample_pools(problems, 16, seed=0)
    assert sample_pools(problems[:5], 16, seed=0) == pools[:5]
    kinds = Counter(error_kind(p, s) for p, pool in zip(problems, pools) for s in pool)
    assert set(kinds) >= {"right", "slip", "miscopy", "skip", "trap", "cancel"}
    assert kinds["right"] > 0.02 * sum(kinds.values())


@pytest.fixture(scope="module")
def shifted(seen):
    keys = frozenset(p.key for p in seen)
    return {name: shifted_problems(name, 200, seed=0, exclude=keys) for name in SHIFTS}


# per set: new wording, operation counts, start range, levels
EXPECTED = {
    "wording": (True, {2, 3, 4}, (3, 20), {1, 2}),
    "length": (False, {8, 9}, (3, 20), {1, 2}),
    "start": (False, {2, 3, 4}, (50, 99), {1, 2}),
    "level5": (False, {5, 6, 7}, (12, 40), {5}),
    "level5-wording": (True, {5, 6, 7}, (12, 40), {5}),
    "level5-length": (False, {8, 9}, (12, 40), {5}),
    "level5-start": (False, {5, 6, 7}, (50, 99), {5}),
    "all": (True, {8, 9}, (50, 99), {6}),
}


def test_each_shift_changes_only_what_its_rule_says(seen, shifted):
    """Each set differs from easy or level-5 word problems in its own changes only; all is
    the out-of-distribution set; no set shares a problem with any seen one."""
    assert list(SHIFTS) == list(EXPECTED)
    seen_shapes = _shapes(seen)
    for name, problems in shifted.items():
        new_wording, nodes, (lo, hi), levels = EXPECTED[name]
        shapes = _shapes(problems)
        assert (not shapes & seen_shapes) == new_wording, name
        if not new_wording:
            assert shapes <= seen_shapes, name
        assert {len(p.tree.nodes) for p in problems} == nodes, name
        starts = [p.quantities[0] for p in problems]
        assert lo <= min(starts) and max(starts) <= hi, name
        assert {p.kind for p in problems} == {"word"} and {p.level for p in problems} == levels
        assert not {p.key for p in problems} & {p.key for p in seen}, name
    easy = [p for p in make_problems(400, seed=3, difficulty="easy") if p.kind == "word"]
    assert {len(p.tree.nodes) for p in easy} == EXPECTED["wording"][1]
    assert max(p.quantities[0] for p in easy) <= 20
    assert shifted["all"] == ood_problems(200, seed=0)
    # why the keys of what a model read are left out: the shop's wording of an easy problem
    # computes what some easy problem already does
    assert {p.key for p in shifted_problems("wording", 200, seed=0)} & {p.key for p in seen}


def test_shifted_problems_are_deterministic_streams_of_their_own(shifted):
    ids = {name: problems[0].id for name, problems in shifted.items()}
    assert ids == {name: f"ood-{name}-0-00000" for name in SHIFTS if name != "all"} | {
        "all": "ood-0-00000"}
    assert shifted_problems("length", 20, seed=0) == shifted["length"][:20]  # nothing left out
    assert shifted_problems("length", 20, seed=1) != shifted["length"][:20]
    texts = [p.text for problems in shifted.values() for p in problems]
    assert len(set(texts)) == len(texts)
    with pytest.raises(PrmkitError, match="unknown shift 'dates'"):
        shifted_problems("dates", 5)
