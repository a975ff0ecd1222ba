from pathlib import Path

import pytest

from prmkit.data import read_records
from prmkit.data.policies import (
    PolicyOptions,
    PolicyReport,
    apply_policy,
    load_holdout,
    normalize_problem,
    soft_example,
    solution_examples,
)
from prmkit.data.records import StepExample
from prmkit.errors import PrmkitError

FIX = Path(__file__).parent / "fixtures" / "data"


@pytest.fixture
def sols():
    return list(read_records(FIX / "prm800k_small.jsonl"))


def test_defaults_are_the_papers():
    o = PolicyOptions()
    assert o.neutral == "positive"
    assert o.until_first_error is True
    assert o.alternatives == "prefixes"
    assert o.human_steps == "positive"
    assert o.drop_quality_control is True
    assert o.drop_finish_reasons == ("bad_problem", "give_up")
    assert o.hard_threshold is None
    with pytest.raises(PrmkitError):
        PolicyOptions(neutral="zero")
    with pytest.raises(PrmkitError):
        PolicyOptions(alternatives="some")


def test_prefixes_one_example_per_distinct_rated_candidate(sols):
    report = PolicyReport()
    exs = solution_examples(sols[0], PolicyOptions(), report)
    # position 0: 1 candidate; position 1: 4 completions, one duplicate; position 2: one rated
    # completion, one unrated, plus the human step
    assert [len(e.steps) for e in exs] == [1, 2, 2, 2, 3, 3]
    assert report.skipped_candidates == {"duplicate": 1, "unrated": 1}
    assert [e.labels[-1] for e in exs] == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert [e.ratings[-1] for e in exs] == [1, -1, 0, 1, -1, 1]
    assert exs[-1].steps[-1].startswith("So the answer is 14")
    # all share the kept prefix
    kept = ["Multiplication first: $3\\cdot 4=12$.", "So $2+12 = 14$."]
    for e in exs:
        assert list(e.steps[:-1]) == kept[: len(e.steps) - 1]


def test_all_keeps_duplicates_and_chosen_keeps_the_path(sols):
    all_ = solution_examples(sols[0], PolicyOptions(alternatives="all"))
    assert len(all_) == 7
    (chosen,) = solution_examples(sols[0], PolicyOptions(alternatives="chosen"))
    assert chosen.steps[1] == "So $2+12 = 14$." and chosen.labels == (1.0, 1.0, 1.0)
    assert chosen.ratings == (1, 1, 1)  # the human step counts as +1


def test_human_steps_skip(sols):
    exs = solution_examples(sols[0], PolicyOptions(human_steps="skip"))
    assert all("So the answer is 14" not in e.steps[-1] for e in exs)
    (chosen,) = solution_examples(sols[0], PolicyOptions(alternatives="chosen", human_steps="skip"))
    assert chosen.labels == (1.0, 1.0, None)


def test_neutral_positive_or_negative(sols):
    p2 = sols[1]  # phase 2: +1, 0, -1 (found_error)
    (pos,) = solution_examples(p2, PolicyOptions(alternatives="chosen"))
    assert pos.labels == (1.0, 1.0, 0.0) and pos.ratings == (1, 0, -1)
    (neg,) = solution_examples(p2, PolicyOptions(alternatives="chosen", neutral="negative"))
    # the neutral step is now the first error: supervision stops there
    assert neg.labels == (1.0, 0.0)
    (neg_all,) = solution_examples(
        p2, PolicyOptions(alternatives="chosen", neutral="negative", until_first_error=False)
    )
    assert neg_all.labels == (1.0, 0.0, 0.0)


def test_phase2_prefixes_include_the_wrong_step(sols):
    exs = solution_examples(sols[1])
    assert [e.labels for e in exs] == [(1.0,), (1.0, 1.0), (1.0, 1.0, 0.0)]
    assert exs[2].steps[-1].endswith("# Answer\n\n22")


def test_until_first_error_stops_after_a_kept_wrong_step():
    from prmkit.data.records import LabelledSolution, LabelledStep, Problem, Step

    sol = LabelledSolution(
        problem=Problem("p"),
        steps=[
            LabelledStep([Step("a", 1)], chosen=0),
            LabelledStep([Step("b", -1), Step("b2", 1)], chosen=0),
            LabelledStep([Step("c", 1)], chosen=0),
        ],
    )
    report = PolicyReport()
    exs = solution_examples(sol, PolicyOptions(), report)
    assert [e.steps for e in exs] == [("a",), ("a", "b"), ("a", "b2")]
    assert report.skipped_candidates["after_first_error"] == 1
    exs = solution_examples(sol, PolicyOptions(until_first_error=False))
    assert exs[-1].steps == ("a", "b", "c") and exs[-1].labels == (1.0, 0.0, 1.0)
    (ch,) = solution_examples(sol, PolicyOptions(alternatives="chosen"))
    assert ch.steps == ("a", "b")


def test_prefix_examples_share_identical_problem_and_prefix_strings(shared_data):
    """A trainer merges examples with a common prefix into a tree: shared prefixes must be
    the same strings with the same labels."""
    path = shared_data / "prm800k" / "raw-examples" / "phase1_train.concatenated.json"
    exs = list(apply_policy(read_records(path), PolicyOptions(drop_finish_reasons=())))
    assert len(exs) > 20
    nodes: dict = {}
    for e in exs:
        for k in range(1, len(e.steps)):
            key = (e.group, e.steps[:k])
            nodes.setdefault(key, set()).add((e.problem, e.labels[:k]))
    assert all(len(v) == 1 for v in nodes.values())
    by_group: dict = {}
    for e in exs:
        by_group.setdefault(e.group, set()).add(e.problem)
    assert all(len(v) == 1 for v in by_group.values())


def test_record_filters_and_holdout_report(sols):
    report = PolicyReport()
    holdout = load_holdout(FIX / "math500_small.jsonl")
    exs = list(apply_policy(sols, PolicyOptions(), report, holdout=holdout))
    assert report.records_in == 6 and report.records_kept == 1
    assert report.dropped == {
        "holdout": 2,  # P1 matches despite different whitespace
        "quality_control": 1,
        "give_up": 1,
        "bad_problem": 1,
    }
    assert report.holdout_overlap == 1 and report.holdout_problems == 2
    assert report.examples_out == len(exs) == 3
    d = report.to_dict()
    assert d["dropped"]["holdout"] == 2 and d["holdout_overlap"] == 1


def test_filters_can_be_turned_off(sols):
    report = PolicyReport()
    opts = PolicyOptions(drop_quality_control=False, drop_finish_reasons=())
    list(apply_policy(sols, opts, report))
    assert report.dropped == {} and report.records_kept == 6


def test_holdout_path_option(sols):
    report = PolicyReport()
    list(apply_policy(sols, PolicyOptions(holdout_path=str(FIX / "math500_small.jsonl")), report))
    assert report.dropped["holdout"] == 2


def test_normalize_problem():
    assert normalize_problem("What is $2+3\\cdot  4$?\n") == normalize_problem("what is $2+3\\cdot 4$?")
    assert normalize_problem("ﬁve") == normalize_problem("five")  # NFKC
    assert normalize_problem("1+1") != normalize_problem("1+2")


def test_soft_label_path():
    exs = list(read_records(FIX / "trl_small.jsonl"))
    soft = soft_example(exs[2])
    assert soft.labels == (0.9, 0.35)
    hard = soft_example(exs[2], PolicyOptions(hard_threshold=0.5))
    assert hard.labels == (1.0, 0.0)
    cut = soft_example(StepExample("q", ("a", "b", "c"), (0.8, 0.2, 0.9)))
    assert cut.steps == ("a", "b") and cut.labels == (0.8, 0.2)
    whole = soft_example(
        StepExample("q", ("a", "b", "c"), (0.8, 0.2, 0.9)), PolicyOptions(until_first_error=False)
    )
    assert whole.labels == (0.8, 0.2, 0.9)
    assert soft_example(StepExample("q", ("a",), (None,))) is None


def test_math_shepherd_and_benchmarks_through_the_policy():
    report = PolicyReport()
    exs = list(apply_policy(read_records(FIX / "math_shepherd_small.jsonl"), PolicyOptions(), report))
    assert [e.labels for e in exs] == [(1.0, 1.0), (0.0,)]
    exs = list(apply_policy(read_records(FIX / "processbench_small.json")))
    assert [e.labels for e in exs] == [(1.0, 1.0), (1.0, 0.0), (1.0,)]
    exs = list(apply_policy(read_records(FIX / "prmbench_small.jsonl")))
    assert [e.labels for e in exs] == [(1.0, 0.0), (1.0, 1.0)]
    with pytest.raises(PrmkitError, match="Problem"):
        list(apply_policy(read_records(FIX / "math500_small.jsonl")))


@pytest.mark.slow
def test_phase1_test_problems_all_overlap_math500(shared_data):
    """PRM800K's test problems are drawn from MATH500; its train problems are not."""
    m500 = shared_data / "math" / "math500.jsonl"
    pq_dir = shared_data / "prm800k"
    report = PolicyReport()
    list(apply_policy(read_records(pq_dir / "phase1_test.stepwise-critic.parquet"),
                      PolicyOptions(holdout_path=str(m500)), report))
    assert report.holdout_overlap == 101 and report.records_kept == 0
    report = PolicyReport()
    exs = sum(1 for _ in apply_policy(read_records(pq_dir / "phase1_train.stepwise-critic.parquet"),
                                      PolicyOptions(holdout_path=str(m500)), report))
    assert report.holdout_overlap == 0 and exs == report.examples_out > 40_000
