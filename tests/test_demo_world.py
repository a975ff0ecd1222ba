import random
from dataclasses import replace

import numpy as np
import pytest

from prmkit.demo.world import (
    NodeRef,
    Propensity,
    WorldProblem,
    build_tree,
    check_solution,
    corpus_documents,
    corpus_text,
    extract_final_answer,
    majority_answer,
    make_problems,
    make_splits,
    sample_pools,
    sample_solutions,
    to_scored_samples,
    to_step_examples,
    with_solver,
    world_stats,
)
from prmkit.errors import PrmkitError

# Ann: 7 + 3 * 4 - 5 = 14, with a distractor (Ben's 9 apples).
ANN = WorldProblem(
    id="ann",
    text="Ann has 7 apples. She buys 3 bags of 4. Ben has 9 apples. She gives away 5. "
    "How many apples does Ann have now?",
    answer="14",
    kind="word",
    level=1,
    tree=build_tree([("*", 3, 4), ("+", 7, NodeRef(0)), ("-", NodeRef(1), 5)]),
)
# 3x + 5 = 20: (20 - 5) / 3 = 5.
EQ = WorldProblem(
    id="eq",
    text="Solve 3x + 5 = 20.",
    answer="5",
    kind="equation",
    level=1,
    tree=build_tree([("-", 20, 5), ("/", NodeRef(0), 3)]),
)


def labels(problem, steps):
    c = check_solution(problem, steps)
    return c.labels, c.first_error, c.final_correct


# ---- checker: golden cases written by hand ---------------------------------------------------


def test_checker_accepts_correct_solution_in_any_valid_order():
    ok = ["3 * 4 = 12", "7 + 12 = 19", "19 - 5 = 14", "Answer: 14"]
    assert labels(ANN, ok) == ([1, 1, 1, 1], -1, True)
    commuted = ["4 * 3 = 12", "12 + 7 = 19", "19 - 5 = 14", "Answer: 14"]
    assert labels(ANN, commuted) == ([1, 1, 1, 1], -1, True)
    assert check_solution(ANN, ok).process_correct
    assert labels(EQ, ["20 - 5 = 15", "15 / 3 = 5", "Answer: 5"]) == ([1, 1, 1], -1, True)


def test_checker_accepts_every_reference_solution():
    for p in make_problems(300, seed=5):
        chk = check_solution(p, p.reference_solution())
        assert chk.labels == [1] * len(chk.labels), p.text
        assert chk.final_correct and chk.answer == p.answer


def test_checker_catches_arithmetic_slip():
    steps = ["3 * 4 = 12", "7 + 12 = 18", "18 - 5 = 13", "Answer: 13"]
    assert labels(ANN, steps) == ([1, -1, -1, -1], 1, False)
    assert labels(EQ, ["20 - 5 = 15", "15 / 3 = 6", "Answer: 6"]) == ([1, -1, -1], 1, False)


def test_checker_catches_number_not_in_problem():
    steps = ["3 * 4 = 12", "8 + 12 = 20", "20 - 5 = 15", "Answer: 15"]
    assert labels(ANN, steps)[1] == 1


def test_checker_catches_wrong_problem_quantity():
    # 5 and 9 are numbers of the problem, used in the wrong place
    assert labels(ANN, ["3 * 5 = 15", "7 + 15 = 22", "22 - 5 = 17", "Answer: 17"])[1] == 0
    distractor = ["3 * 4 = 12", "9 + 12 = 21", "21 - 5 = 16", "Answer: 16"]
    assert labels(ANN, distractor) == ([1, -1, -1, -1], 1, False)


def test_checker_catches_wrong_operation():
    sign = ["3 * 4 = 12", "7 + 12 = 19", "19 + 5 = 24", "Answer: 24"]
    assert labels(ANN, sign) == ([1, 1, -1, -1], 2, False)
    add_for_times = ["3 + 4 = 7", "7 + 7 = 14", "14 - 5 = 9", "Answer: 9"]
    assert labels(ANN, add_for_times)[1] == 0
    # moved +5 across without changing its sign; then an inexact division
    assert labels(EQ, ["20 + 5 = 25", "25 / 3 = 8", "Answer: 8"]) == ([-1, -1, -1], 0, False)
    assert labels(EQ, ["20 - 5 = 15", "15 - 3 = 12", "Answer: 12"])[1] == 1


def test_checker_catches_skipped_step_even_when_answer_is_right():
    # 12 was never computed: the step is unjustified
    assert labels(ANN, ["7 + 12 = 19", "19 - 5 = 14", "Answer: 14"]) == ([-1, 1, 1], 0, True)
    # the answer was never computed
    assert labels(ANN, ["3 * 4 = 12", "7 + 12 = 19", "Answer: 14"]) == ([1, 1, -1], 2, True)


def test_checker_catches_forgotten_last_operation():
    assert labels(ANN, ["3 * 4 = 12", "7 + 12 = 19", "Answer: 19"]) == ([1, 1, -1], 2, False)


def test_cancelling_errors_reach_right_answer_with_wrong_step():
    steps = ["3 * 4 = 13", "7 + 13 = 19", "19 - 5 = 14", "Answer: 14"]
    chk = check_solution(ANN, steps)
    assert chk.final_correct and not chk.process_correct
    assert chk.labels == [-1, -1, 1, 1] and chk.first_error == 0


def test_checker_rejects_malformed_and_missing_answer():
    assert labels(ANN, ["3 times 4 is 12", "7 + 12 = 19", "19 - 5 = 14", "Answer: 14"])[0][0] == -1
    chk = check_solution(ANN, ["3 * 4 = 12", "7 + 12 = 19", "19 - 5 = 14"])
    assert chk.labels == [1, 1, 1] and chk.answer is None and not chk.final_correct
    assert not chk.process_correct
    assert labels(ANN, ["3 * 4 = 12", "7 + 12 = 19", "19 - 5 = 14", "Answer: 14."])[2]


def test_extract_final_answer():
    assert extract_final_answer(["1 + 1 = 2", "Answer: 2"]) == "2"
    assert extract_final_answer(["Answer: 3", "1 + 1 = 2", "Answer:  2 "]) == "2"
    assert extract_final_answer(["1 + 1 = 2"]) is None
    assert extract_final_answer([]) is None


def test_build_tree_rejects_bad_operations():
    with pytest.raises(PrmkitError, match="inexact"):
        build_tree([("/", 7, 2)])
    with pytest.raises(PrmkitError, match="earlier"):
        build_tree([("+", 1, NodeRef(0))])
    with pytest.raises(PrmkitError, match="operator"):
        build_tree([("^", 1, 2)])


# ---- generator and solver --------------------------------------------------------------------


def test_problems_and_samples_are_deterministic():
    a, b = make_problems(60, seed=3), make_problems(60, seed=3)
    assert [(p.id, p.text, p.answer) for p in a] == [(p.id, p.text, p.answer) for p in b]
    assert sample_pools(a, 16, seed=1) == sample_pools(b, 16, seed=1)
    assert sample_pools(a, 16, seed=1) != sample_pools(a, 16, seed=2)
    assert [p.text for p in make_problems(60, seed=4)] != [p.text for p in a]
    assert sample_solutions(a[0], 8, 11) == sample_solutions(a[0], 8, random.Random(11))
    g1, g2 = np.random.default_rng(0), np.random.default_rng(0)
    assert sample_solutions(a[0], 8, g1) == sample_solutions(a[0], 8, g2)
    # a problem's pool does not depend on which other problems are sampled
    assert sample_pools(a[5:6], 16, seed=1)[0] == sample_pools(a, 16, seed=1)[5]


def test_problems_are_well_formed():
    problems = make_problems(400, seed=0)
    assert len({p.text for p in problems}) == len(problems)
    assert {p.kind for p in problems} == {"word", "equation"}
    for p in problems:
        assert p.answer == str(p.tree.answer)
        ref = p.reference_solution()
        assert 3 <= len(ref) <= 8
        assert all("\n" not in s and len(s) <= 25 for s in ref)
        if p.trap is not None:
            assert p.trap_answer != p.answer and 0 < p.propensity.trap < 1
        # every literal operand of the tree is a number written in the problem
        for n in p.tree.nodes:
            for v, is_node in ((n.a, n.a_node), (n.b, n.b_node)):
                assert is_node or v in p.quantities, (p.text, v)


def test_problem_key_ignores_wording_and_operand_order():
    reworded = replace(ANN, id="bob", text="Bob has 7 pens. He finds 4 packs of 3. He sells 5. "
                       "How many of them does Bob have now?",
                       tree=build_tree([("*", 4, 3), ("+", NodeRef(0), 7), ("-", NodeRef(1), 5)]))
    assert reworded.key == ANN.key == "(- (+ (* 3 4) 7) 5)"
    other = replace(ANN, tree=build_tree([("*", 3, 4), ("+", 7, NodeRef(0)), ("-", NodeRef(1), 4)]))
    assert other.key != ANN.key
    # make_problems never returns two problems with one key
    problems = make_problems(3000, seed=0, difficulty="easy")
    assert len({p.key for p in problems}) == 3000


def test_splits_are_cut_from_one_stream_and_reject_negative_sizes():
    splits = make_splits(4, test=5, train=7, pretrain=3, difficulty="easy")
    stream = make_problems(15, seed=4, difficulty="easy")
    assert [p.id for p in splits.test + splits.train + splits.pretrain] == [p.id for p in stream]
    with pytest.raises(PrmkitError, match="train split size"):
        make_splits(0, test=5, train=-1, pretrain=0)


def test_difficulty_levels_change_size_and_accuracy():
    easy, hard = make_problems(150, 0, "easy"), make_problems(150, 0, "hard")
    assert {p.level for p in easy} <= {1, 2} and {p.level for p in hard} <= {4, 5}
    assert np.mean([len(p.tree.nodes) for p in hard]) > np.mean([len(p.tree.nodes) for p in easy])
    s_easy = world_stats(easy, sample_pools(easy, 32, 0))
    s_hard = world_stats(hard, sample_pools(hard, 32, 0))
    assert s_hard.final_accuracy < s_easy.final_accuracy - 0.05
    assert s_hard.mean_steps > s_easy.mean_steps
    assert {p.level for p in make_problems(30, 0, 3)} == {3}
    # levels written as text (a `--set reading.extra_difficulty=2,3`): the same draws
    assert [p.key for p in make_problems(30, 0, "2,3")] == [p.key for p in make_problems(30, 0, [2, 3])]
    assert [p.key for p in make_problems(10, 0, "3")] == [p.key for p in make_problems(10, 0, 3)]


def test_bad_arguments_are_rejected():
    with pytest.raises(PrmkitError, match="difficulty"):
        make_problems(3, 0, "impossible")
    with pytest.raises(PrmkitError, match="1..5"):
        make_problems(3, 0, [0, 6])
    with pytest.raises(PrmkitError, match="1..5"):
        make_problems(3, 0, "2,7")
    with pytest.raises(PrmkitError, match="rng"):
        sample_solutions(ANN, 2, "seed")
    with pytest.raises(PrmkitError, match="kind"):
        to_step_examples([ANN], [[]], kind="xrm")


def test_solver_error_modes_are_all_caught_by_checker():
    problems = make_problems(200, seed=1)
    pools = sample_pools(problems, 32, seed=1)
    seen_modes = set()
    for p, pool in zip(problems, pools):
        for steps in pool:
            assert steps[-1].startswith("Answer: ")
            chk = check_solution(p, steps)
            # soundness: a wrong answer always has a flagged step
            if not chk.final_correct:
                assert chk.first_error >= 0, (p.text, steps)
            if chk.first_error < 0:
                continue
            bad = steps[chk.first_error]
            if bad.startswith("Answer"):
                seen_modes.add("answer")
                continue
            a, op, b, _, c = bad.split()
            a, b, c = int(a), int(b), int(c)
            exact = {"+": a + b, "-": a - b, "*": a * b, "/": a // b if a % b == 0 else None}[op]
            known = set(p.quantities) | {int(s.split()[-1]) for s in steps[: chk.first_error]}
            if exact != c:
                seen_modes.add("arithmetic")
            elif a not in known or b not in known:
                seen_modes.add("unjustified or miscopied")
            else:
                seen_modes.add("operand or operation")
            if chk.final_correct:
                seen_modes.add("wrong process, right answer")
    assert seen_modes >= {
        "answer",
        "arithmetic",
        "unjustified or miscopied",
        "operand or operation",
        "wrong process, right answer",
    }


def test_trap_makes_majority_vote_converge_on_wrong_answer():
    problems = [p for p in make_problems(200, seed=2) if p.propensity.trap > 0.6]
    assert problems
    hits = 0
    for p in problems:
        answers = [extract_final_answer(s) for s in sample_solutions(p, 64, 0)]
        hits += majority_answer(answers) == p.trap_answer
    assert hits >= len(problems) // 2


# ---- statistics ------------------------------------------------------------------------------


def test_world_statistics_in_target_ranges():
    problems = make_problems(500, seed=0)
    stats = world_stats(problems, sample_pools(problems, 64, seed=0))
    assert 0.30 <= stats.final_accuracy <= 0.60
    assert 0.05 <= stats.wrong_process_right_answer <= 0.15
    assert stats.pass_at_n > 0.95 and stats.best_process_at_n > 0.95
    assert stats.majority_at_n < stats.pass_at_n - 0.15
    assert stats.majority_wrong_on_trap > 0.8
    assert stats.process_accuracy < stats.final_accuracy
    assert sum(stats.first_error_positions.values()) > 0 and min(stats.first_error_positions) == 0
    assert 4 <= stats.mean_steps <= 6 and stats.max_step_chars <= 25
    text = stats.format()
    assert "majority@64" in text and "pass@64" in text


def test_world_stats_counts_a_hand_built_pool_exactly():
    trap = build_tree([("*", 3, 4), ("+", 9, NodeRef(0)), ("-", NodeRef(1), 5)])  # Ben's 9
    ann = replace(ANN, trap=trap, trap_kind="distractor")
    right = ["3 * 4 = 12", "7 + 12 = 19", "19 - 5 = 14", "Answer: 14"]
    trapped = ["3 * 4 = 12", "9 + 12 = 21", "21 - 5 = 16", "Answer: 16"]
    cancelled = ["3 * 4 = 13", "7 + 13 = 19", "19 - 5 = 14", "Answer: 14"]
    eq_right = ["20 - 5 = 15", "15 / 3 = 5", "Answer: 5"]
    stats = world_stats([ann, EQ], [[right, trapped, trapped, trapped, cancelled], [eq_right] * 5])
    assert stats.final_accuracy == 7 / 10 and stats.process_accuracy == 6 / 10
    assert stats.wrong_process_right_answer == 1 / 7
    assert stats.majority_at_n == 1 / 2 and stats.majority_wrong_on_trap == 1.0
    assert stats.pass_at_n == 1.0 and stats.best_process_at_n == 1.0
    assert stats.first_error_positions == {1: 3, 0: 1}
    assert stats.final_accuracy_by_level == {1: 7 / 10}
    assert stats.mean_steps == 35 / 10 and stats.max_step_chars == 11


def test_majority_answer_breaks_ties_by_first_seen():
    assert majority_answer(["3", "4", "4", "3", None, None, None]) == "3"
    assert majority_answer([None]) is None


# ---- training data ---------------------------------------------------------------------------


def test_prm_examples_label_up_to_first_error():
    pool = [
        ["3 * 4 = 12", "7 + 12 = 19", "19 - 5 = 14", "Answer: 14"],
        ["3 * 4 = 12", "7 + 12 = 18", "18 - 5 = 13", "Answer: 13"],
        ["3 * 4 = 13", "7 + 13 = 19", "19 - 5 = 14", "Answer: 14"],
        ["3 * 4 = 12", "7 + 12 = 19", "19 - 5 = 14", "Answer: 14"],
    ]
    prm = to_step_examples([ANN], [pool], kind="prm")
    assert len(prm) == 4
    assert prm[0].labels == (1.0, 1.0, 1.0, 1.0) and prm[0].outcome == 1.0
    assert prm[1].labels == (1.0, 0.0, None, None) and prm[1].ratings == (1, -1, None, None)
    assert prm[1].outcome == 0.0
    assert prm[2].labels == (0.0, None, None, None) and prm[2].outcome == 1.0
    assert prm[0].group == "ann" and prm[0].problem == ANN.text
    assert prm[0].steps == tuple(pool[0])
    orm = to_step_examples([ANN], [pool], kind="orm", dedupe=True)
    assert len(orm) == 3
    assert [e.outcome for e in orm] == [1.0, 0.0, 1.0] and all(e.labels == () for e in orm)


def test_scored_samples_and_corpus():
    pool = sample_solutions(ANN, 4, 0)
    samples = to_scored_samples(ANN, pool)
    assert [s.is_correct for s in samples] == [check_solution(ANN, s).final_correct for s in pool]
    assert samples[0].ground_truth_answer == "14" and samples[0].unique_id == "ann/0"
    docs = corpus_documents([ANN, EQ])
    assert docs[0] == ANN.text + "\n3 * 4 = 12\n7 + 12 = 19\n19 - 5 = 14\nAnswer: 14"
    text = corpus_text([ANN, EQ], [pool, [["20 - 5 = 15"]]])
    assert text.count("\n\n") == 4 and EQ.text in text and "Answer:" in text
    assert ANN.to_problem().solution == "\n".join(ANN.reference_solution())


def test_propensity_drives_error_rate():
    clean = replace(ANN, propensity=Propensity(0, 0, 0, 0, 0))
    assert all(check_solution(clean, s).process_correct for s in sample_solutions(clean, 50, 0))
    sloppy = replace(ANN, propensity=Propensity(0.3, 0.1, 0.1, 0.0, 0))
    sloppy_pool = sample_solutions(sloppy, 50, 0)
    assert sum(check_solution(sloppy, s).process_correct for s in sloppy_pool) < 40


def test_with_solver_makes_right_answers_through_wrong_steps_common():
    """The setting under which outcome and final-answer labels differ: cancel 1.0 and 3x
    the skips (on the small-scale experiments' pools: 10-12% of samples, against 2.5%)."""
    problems = make_problems(60, seed=3, difficulty="mixed")

    def share(group):
        pools = sample_pools(group, 64, seed=0)
        checks = [check_solution(p, s) for p, pool in zip(group, pools) for s in pool]
        return np.mean([c.final_correct and not c.process_correct for c in checks])

    assert with_solver(problems) == problems  # unchanged by default
    changed = with_solver(problems, cancel=1.0, skip_scale=3.0)
    assert {p.propensity.cancel for p in changed} == {1.0}
    assert all(q.propensity.skip == min(0.6, 3 * p.propensity.skip)
               for p, q in zip(problems, changed))
    assert [p.propensity.slip for p in changed] == [p.propensity.slip for p in problems]
    base, more = share(problems), share(changed)
    assert more > 3 * base > 0  # 18.8% against 5.2% on these problems
    for bad in ({"cancel": 1.5}, {"skip_scale": -1.0}):
        with pytest.raises(PrmkitError):
            with_solver(problems, **bad)
