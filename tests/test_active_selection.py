import pytest

from prmkit.active.selection import (
    Candidate,
    SelectionConfig,
    dedupe_key,
    pool_diversity,
    select_convincing,
)
from prmkit.errors import PrmkitError


def cand(pid, i, score, correct, key=None):
    return Candidate(pid, i, key if key is not None else f"{pid}-{i}", score, correct)


def test_per_problem_takes_80_percent_most_convincing_wrong_then_best_of_rest():
    pool = [cand("p", i, score=i / 10, correct=i % 2 == 0) for i in range(10)]
    # wrong: 1,3,5,7,9; right: 0,2,4,6,8
    chosen = select_convincing(pool, SelectionConfig(per_problem=5))
    assert [c.sample_index for c in chosen] == [9, 7, 5, 3, 8]


def test_too_few_wrong_answers_are_filled_from_the_rest():
    pool = [cand("p", 0, 0.1, False)] + [cand("p", i, i / 10, True) for i in range(1, 6)]
    chosen = select_convincing(pool, SelectionConfig(per_problem=4))
    assert [c.sample_index for c in chosen] == [0, 5, 4, 3]


def test_duplicates_are_selected_once_keeping_the_highest_score():
    pool = [cand("p", 0, 0.9, False, key="same"), cand("p", 1, 0.95, False, key="same"),
            cand("p", 2, 0.5, False), cand("p", 3, 0.4, True)]
    chosen = select_convincing(pool, SelectionConfig(per_problem=3))
    assert [c.sample_index for c in chosen] == [1, 2, 3]


def test_same_text_in_two_problems_is_not_a_duplicate():
    pool = [cand("a", 0, 0.9, False, key="x"), cand("b", 0, 0.9, False, key="x")]
    assert len(select_convincing(pool, SelectionConfig(per_problem=1))) == 2


def test_equal_scores_break_ties_by_problem_then_sample_index():
    pool = [cand("b", 3, 0.5, False), cand("a", 2, 0.5, False), cand("a", 1, 0.5, False)]
    chosen = select_convincing(pool, SelectionConfig(scope="global", global_top_k=2,
                                                     convincing_wrong_share=1.0))
    assert [(c.problem_id, c.sample_index) for c in chosen] == [("a", 1), ("a", 2)]
    assert select_convincing(list(reversed(pool)), SelectionConfig(per_problem=1)) == \
        select_convincing(pool, SelectionConfig(per_problem=1))


def test_global_scope_ranks_across_problems():
    pool = [cand("a", 0, 0.9, False), cand("a", 1, 0.8, False), cand("b", 0, 0.1, False),
            cand("b", 1, 0.99, True)]
    chosen = select_convincing(pool, SelectionConfig(scope="global", global_top_k=3,
                                                     convincing_wrong_share=2 / 3))
    assert [(c.problem_id, c.sample_index) for c in chosen] == [("a", 0), ("a", 1), ("b", 1)]


def test_global_scope_without_top_k_is_an_error():
    with pytest.raises(PrmkitError, match="global_top_k"):
        SelectionConfig(scope="global")


def test_dedupe_key_ignores_whitespace_and_case():
    assert dedupe_key(["x  = 1", "So X=2"]) == dedupe_key(["x = 1", "so x=2 "])
    assert dedupe_key(["a", "b"]) != dedupe_key(["a b"])


def test_pool_diversity_counts_distinct_samples_and_selected_share():
    pool = [cand("a", 0, 0.9, False, "k"), cand("a", 1, 0.8, False, "k"),
            cand("a", 2, 0.7, True), cand("b", 0, 0.1, False)]
    d = pool_diversity(pool, selected=pool[:2])
    assert d["distinct"] == 3 and d["distinct_share"] == 0.75
    assert d["unique_per_problem_min"] == 1 and d["unique_per_problem_max"] == 2
    assert d["wrong_share"] == pytest.approx(2 / 3)
    assert d["selected_share_of_pool"] == 0.5


def test_ungraded_samples_are_not_taken_as_convincing_wrong_answers():
    # 1 and 3 ungraded (timeout, no gold), scored highest; 0 graded wrong; 2 right
    pool = [cand("p", 0, 0.2, False), cand("p", 1, 0.9, None), cand("p", 2, 0.5, True),
            cand("p", 3, 0.8, None)]
    chosen = select_convincing(pool, SelectionConfig(per_problem=2, convincing_wrong_share=1.0))
    assert [c.sample_index for c in chosen] == [0, 1]  # the wrong one, then the best of the rest
    chosen = select_convincing(pool, SelectionConfig(per_problem=3, convincing_wrong_share=0.8))
    assert [c.sample_index for c in chosen] == [0, 1, 3]
    assert pool_diversity(pool)["wrong_share"] == 0.25


def _five_problems():
    """Five problems, each with 4 wrong and 4 right distinct answers; problem k's wrong
    answers score about 0.5 + k/10 (the most convincing in problem e), its right ones 0.9."""
    return [cand(pid, i, score=0.9 if i >= 4 else 0.5 + k / 10 - i / 100, correct=i >= 4)
            for k, pid in enumerate("abcde") for i in range(8)]


@pytest.mark.parametrize("per_problem, wrong_total", [(1, 4), (2, 8), (4, 16)])
def test_80_20_holds_over_the_whole_budget_at_1_and_2_per_problem(per_problem, wrong_total):
    """round(0.8 x 1) = 1 per problem made a 1-per-problem set 100% wrong answers; the share
    is now of the whole budget: 4 of 5 at 1 per problem, 8 of 10 at 2, 16 of 20 at 4."""
    chosen = select_convincing(_five_problems(), SelectionConfig(per_problem=per_problem))
    assert len(chosen) == 5 * per_problem
    assert sum(c.correct is False for c in chosen) == wrong_total
    for pid in "abcde":
        assert sum(c.problem_id == pid for c in chosen) == per_problem


def test_the_spare_wrong_slots_go_to_the_most_convincing_wrong_answers():
    chosen = select_convincing(_five_problems(), SelectionConfig(per_problem=1))
    right = [c.problem_id for c in chosen if c.correct]
    assert right == ["a"]  # problem a's best wrong answer is the least convincing
    assert all(c.sample_index == 0 for c in chosen if not c.correct)


def test_a_problem_short_of_wrong_answers_fills_its_budget_from_its_other_samples():
    pool = [cand("a", 0, 0.9, True), cand("a", 1, 0.8, True)] + [
        cand(pid, i, 0.5 + i / 10, i >= 2) for pid in "bc" for i in range(3)]
    chosen = select_convincing(pool, SelectionConfig(per_problem=2, convincing_wrong_share=0.5))
    by = {pid: [c.correct for c in chosen if c.problem_id == pid] for pid in "abc"}
    assert by == {"a": [True, True], "b": [False, True], "c": [False, True]}
