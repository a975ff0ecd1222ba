"""Data efficiency (prmkit.active.efficiency): the ratio of slopes against log data, the
data multiple, and the bootstrap interval, on synthetic curves with a known answer."""

import math

import numpy as np
import pytest

from prmkit.active.efficiency import (
    bootstrap_efficiency,
    bootstrap_slope,
    efficiency,
    fit_log_line,
)
from prmkit.errors import PrmkitError

SIZES = [1, 2, 4, 8, 16]


def test_efficiency_ratio_is_the_ratio_of_slopes_against_log_data_size():
    sizes = [1, 2, 4, 8]
    uniform = [0.10 + 0.02 * math.log2(s) for s in sizes]
    active = [0.10 + 0.05 * math.log2(s) for s in sizes]
    e = efficiency(sizes, uniform, active)
    assert e["ratio"] == pytest.approx(2.5)
    # active at 8 samples: 0.25; uniform reaches it at log2 s = 7.5, i.e. 2**7.5 / 8 times the data
    assert e["data_multiple_at_largest"] == pytest.approx(2 ** 7.5 / 8)
    flat = efficiency(sizes, [0.3] * 4, active)
    assert math.isnan(flat["data_multiple_at_largest"])


def test_a_known_shift_in_data_is_recovered_as_the_data_multiple():
    """Active at size s as good as uniform at 2.6 s: the same slope (ratio 1), and uniform
    needs 2.6x the data to match active at the largest size."""
    uniform = [0.2 + 0.04 * math.log2(s) for s in SIZES]
    active = [0.2 + 0.04 * math.log2(2.6 * s) for s in SIZES]
    e = efficiency(SIZES, uniform, active)
    assert e["ratio"] == pytest.approx(1.0)
    assert e["data_multiple_at_largest"] == pytest.approx(2.6)


def _per_problem(curve, seeds=3, problems=400, seed=0):
    """[seeds, sizes, problems] of per-problem accuracies around `curve`: a difficulty per
    problem (shared by seeds and sizes) and noise per seed, size and problem."""
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(0, 0.1, problems)[None, None, :]
    noise = rng.normal(0, 0.05, (seeds, len(curve), problems))
    return np.asarray(curve)[None, :, None] + difficulty + noise


def test_the_bootstrap_interval_covers_a_known_ratio_of_slopes():
    uniform = [0.30 + 0.03 * math.log2(s) for s in SIZES]
    active = [0.30 + 0.078 * math.log2(s) for s in SIZES]  # 2.6x the slope
    b = bootstrap_efficiency(SIZES, _per_problem(uniform, seed=1), _per_problem(active, seed=2),
                             replicates=400)
    low, high = b["interval"]
    assert low < 2.6 < high and low > 1.0  # the ratio is told apart from no gain
    assert b["ratio"] == pytest.approx(2.6, rel=0.3)
    assert b["defined_share"] > 0.95


def test_no_interval_where_the_baseline_never_rises():
    flat = [0.5] * len(SIZES)
    b = bootstrap_efficiency(SIZES, _per_problem(flat, seed=3), _per_problem(flat, seed=4),
                             replicates=200)
    assert b["ratio"] is None and b["defined_share"] < 0.2


def test_shapes_and_sizes_are_checked():
    with pytest.raises(PrmkitError, match="seeds, sizes=5, problems"):
        bootstrap_efficiency(SIZES, np.zeros((2, 4, 10)), np.zeros((2, 4, 10)))
    with pytest.raises(PrmkitError, match="at least 2 sizes"):
        fit_log_line([1], [0.5])


def test_the_slope_interval_tells_a_rising_line_from_a_flat_one():
    rising = bootstrap_slope(SIZES, _per_problem([0.3 + 0.02 * math.log2(s) for s in SIZES],
                                                 seed=5), replicates=300)
    assert rising["slope"] == pytest.approx(0.02, abs=0.005) and rising["interval"][0] > 0
    flat = bootstrap_slope(SIZES, _per_problem([0.4] * len(SIZES), seed=6), replicates=300)
    assert flat["interval"][0] < 0 < flat["interval"][1]
