import math

import numpy as np
import pytest

from prmkit.scoring.aggregate import (
    AGGREGATIONS,
    Aggregation,
    InvalidScoreError,
    aggregate,
    aggregate_many,
)

PROBS = [0.9, 0.5, 0.8]


@pytest.mark.parametrize(
    "method,expected",
    [
        ("prod", 0.9 * 0.5 * 0.8),
        ("min", 0.5),
        ("last", 0.8),
        ("mean", (0.9 + 0.5 + 0.8) / 3),
        ("geomean", (0.9 * 0.5 * 0.8) ** (1 / 3)),
    ],
)
def test_each_method_by_hand(method, expected):
    assert aggregate(PROBS, method) == pytest.approx(expected)
    assert aggregate(PROBS, Aggregation(method), log=True) == pytest.approx(math.log(expected))


def test_prod_in_log_space_does_not_underflow():
    long = [1e-5] * 100  # product 1e-500 underflows float64
    assert aggregate(long, "prod") == 0.0
    assert aggregate(long, "prod", log=True) == pytest.approx(100 * math.log(1e-5))
    # Ranking by log score still separates two underflowing solutions.
    assert aggregate([1e-5] * 100, log=True) > aggregate([1e-5] * 101, log=True)


def test_zero_probability_ranks_last_in_log_space():
    assert aggregate([0.9, 0.0], log=True) == -math.inf
    scores = aggregate_many([[0.9, 0.0], [0.1, 0.1], [0.0]], "prod", log=True)
    assert list(np.argsort(-scores, kind="stable")) == [1, 0, 2]


def test_empty_step_list_is_neutral_for_every_method():
    for m in AGGREGATIONS:
        assert aggregate([], m) == 1.0
        assert aggregate([], m, log=True) == 0.0
        assert aggregate([], m, empty=0.0) == 0.0


@pytest.mark.parametrize("bad", [[0.5, float("nan")], [1.2], [-0.1]])
def test_nan_and_out_of_range_raise(bad):
    with pytest.raises(InvalidScoreError):
        aggregate(bad, "min")
    with pytest.raises(InvalidScoreError):
        aggregate_many([[0.5], bad], "mean")


def test_unknown_method_raises():
    with pytest.raises(InvalidScoreError, match="unknown aggregation"):
        aggregate(PROBS, "median")


@pytest.mark.parametrize("method", AGGREGATIONS)
@pytest.mark.parametrize("log", [False, True])
def test_vectorised_matches_scalar(method, log):
    rng = np.random.default_rng(0)
    rows = [list(rng.random(rng.integers(0, 7))) for _ in range(50)] + [[0.0, 0.3], []]
    got = aggregate_many(rows, method, log=log)
    want = [aggregate(r, method, log=log) for r in rows]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_null_step_counts_as_null_step_score_everywhere():
    from prmkit.scoring import NULL_STEP_SCORE, fill_null_steps

    assert NULL_STEP_SCORE == 0.0
    assert fill_null_steps([0.9, None, 0.5]) == [0.9, 0.0, 0.5]
    assert aggregate([0.9, None], "mean") == pytest.approx(0.45)
    assert aggregate([0.9, None], "prod", log=True) == -math.inf
    rows = [[0.9, None], [None], [0.2, 0.4]]
    for m in AGGREGATIONS:
        np.testing.assert_allclose(aggregate_many(rows, m), [aggregate(r, m) for r in rows])


@pytest.mark.parametrize("method", ["prod", "min", "last"])
def test_truncated_solution_never_outranks_a_complete_one(method):
    # near-certain steps, then the final answer cut by max_length, against a weak but
    # complete solution: the old rule (aggregate only the scored steps) ranked it first
    truncated = [0.99, 0.99, None]
    complete = [0.02, 0.03, 0.05]
    scores = aggregate_many([truncated, complete], method)
    assert scores[0] == 0.0 < scores[1]
    assert aggregate(truncated, method, log=True) < aggregate(complete, method, log=True)
