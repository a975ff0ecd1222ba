"""Data efficiency of a labelling strategy, as the paper measures active learning's (2.6x):
lines fitted to accuracy against log2(labelled data), and the ratio of their slopes, with
a bootstrap interval over seeds and problems.

`efficiency` compares two accuracy curves at the same data sizes; `bootstrap_efficiency`
takes per-problem accuracies ([seeds, sizes, problems] for each arm) and resamples seeds
and problems with replacement, so the interval carries both sources of noise;
`bootstrap_slope` and `bootstrap_difference` do the same for one arm's slope and for a
paired difference between two arms.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prmkit.errors import PrmkitError

# The ratio of slopes measures data efficiency only where both lines rise and the
# baseline's rises clearly: at least half a point of accuracy per doubling of the data.
MIN_BASELINE_SLOPE = 0.005


def fit_log_line(sizes: Sequence[float], accuracy: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept) of accuracy against log2(size)."""
    if len(sizes) < 2 or len(sizes) != len(accuracy):
        raise PrmkitError(f"a line needs at least 2 sizes with one accuracy each, got "
                          f"{len(sizes)} sizes and {len(accuracy)} accuracies")
    slope, intercept = np.polyfit(np.log2(np.asarray(sizes, dtype=float)), accuracy, 1)
    return float(slope), float(intercept)


def ratio_undefined(slope_baseline: float, slope_other: float) -> str | None:
    """Why slope(other) / slope(baseline) measures nothing here, or None where it does."""
    if slope_baseline < MIN_BASELINE_SLOPE:
        state = "falls" if slope_baseline <= -MIN_BASELINE_SLOPE else "is flat"
        return f"the uniform line {state} ({100 * slope_baseline:+.2f} points per doubling)"
    if slope_other <= 0:
        return f"the active line does not rise ({100 * slope_other:+.2f} points per doubling)"
    return None


def efficiency(sizes: Sequence[float], uniform: Sequence[float],
               active: Sequence[float]) -> dict:
    """slope(active) / slope(uniform) (None, with `ratio_note` saying why, where
    `ratio_undefined` says so), and the uniform data needed to reach active's fitted
    accuracy at the largest size, as a multiple of that size."""
    (su, iu), (sa, ia) = fit_log_line(sizes, uniform), fit_log_line(sizes, active)
    top = float(np.log2(max(sizes)))
    if su < MIN_BASELINE_SLOPE:  # uniform sampling does not improve: it never catches up
        multiple = float("nan")
    else:
        exponent = (sa * top + ia - iu) / su - top
        multiple = float(2 ** exponent) if exponent < 64 else float("inf")
    note = ratio_undefined(su, sa)
    return {"slope_uniform": su, "slope_active": sa, "ratio": None if note else sa / su,
            "ratio_note": note, "data_multiple_at_largest": multiple}


def _resampled_curves(arrays: Sequence[np.ndarray], replicates: int, seed: int):
    """Per replicate, each array's mean curve over a draw (with replacement) of seeds and
    problems, the same draw for every array: arrays are [seeds, sizes, problems]."""
    rng = np.random.default_rng(seed)
    seeds, problems = arrays[0].shape[0], arrays[0].shape[2]
    for _ in range(replicates):
        s = rng.integers(0, seeds, seeds)
        p = rng.integers(0, problems, problems)
        yield [a[s][:, :, p].mean(axis=(0, 2)) for a in arrays]


def _interval(values: Sequence[float], level: float) -> list[float] | None:
    tail = 100 * (1 - level) / 2
    return [float(v) for v in np.percentile(values, [tail, 100 - tail])] if values else None


def _checked(sizes: Sequence[float], level: float, **arrays) -> list[np.ndarray]:
    out = [np.asarray(a, dtype=float) for a in arrays.values()]
    if any(a.shape != out[0].shape for a in out) or out[0].ndim != 3 \
            or out[0].shape[1] != len(sizes):
        shapes = ", ".join(f"{name} {a.shape}" for name, a in zip(arrays, out))
        raise PrmkitError(f"{shapes}: each must be [seeds, sizes={len(sizes)}, problems]")
    if not 0 < level < 1:
        raise PrmkitError(f"level must lie strictly between 0 and 1, got {level}")
    return out


def bootstrap_efficiency(sizes: Sequence[float], uniform: np.ndarray, active: np.ndarray,
                         replicates: int = 2000, level: float = 0.95, seed: int = 0) -> dict:
    """The efficiency ratio of the mean curves, with a percentile interval from resampling
    seeds and problems with replacement (the same draw for both arms: the comparison is
    paired). `uniform` and `active`: per-problem accuracy, shape [seeds, sizes, problems].
    The interval is over the replicates where the ratio is defined; `defined_share` says
    how many those were (an interval from few of them means little)."""
    u, a = _checked(sizes, level, uniform=uniform, active=active)
    point = efficiency(sizes, u.mean(axis=(0, 2)), a.mean(axis=(0, 2)))
    ratios = [r for uu, aa in _resampled_curves((u, a), replicates, seed)
              if (r := efficiency(sizes, uu, aa)["ratio"]) is not None]
    return point | {"interval": _interval(ratios, level), "level": level,
                    "replicates": replicates, "defined_share": len(ratios) / replicates,
                    "resampled": "seeds and problems, with replacement, paired across arms"}


def bootstrap_slope(sizes: Sequence[float], accuracy: np.ndarray, replicates: int = 2000,
                    level: float = 0.95, seed: int = 0) -> dict:
    """The slope of accuracy against log2(size) of the mean curve, with a percentile
    interval from resampling seeds and problems; `accuracy`: [seeds, sizes, problems].
    Whether labelled data helps at all (the regime a ratio of slopes needs): an interval
    above zero."""
    (acc,) = _checked(sizes, level, accuracy=accuracy)
    slopes = [fit_log_line(sizes, curve)[0]
              for (curve,) in _resampled_curves((acc,), replicates, seed)]
    return {"slope": fit_log_line(sizes, acc.mean(axis=(0, 2)))[0],
            "interval": _interval(slopes, level), "level": level, "replicates": replicates}


def bootstrap_difference(sizes: Sequence[float], first: np.ndarray, second: np.ndarray,
                         replicates: int = 2000, level: float = 0.95, seed: int = 0) -> dict:
    """Paired difference first - second of mean accuracy at each size, with a percentile
    interval from resampling seeds and problems (the same draw for both: the problems are
    shared); `first`, `second`: [seeds, sizes, problems]."""
    a, b = _checked(sizes, level, first=first, second=second)
    draws = np.array([aa - bb for aa, bb in _resampled_curves((a, b), replicates, seed)])
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(draws, [tail, 100 - tail], axis=0)
    return {"difference": (a - b).mean(axis=(0, 2)).tolist(),
            "interval": [[float(x), float(y)] for x, y in zip(low, high)],
            "level": level, "replicates": replicates}
