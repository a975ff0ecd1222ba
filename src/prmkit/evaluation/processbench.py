"""ProcessBench: locate the earliest wrong step.

Official metric (QwenLM/ProcessBench, code/run_eval_prm_trl.py), per subset: accuracy on
erroneous items (predicted index == label), accuracy on correct items (predicted -1),
F1 = their harmonic mean (0 here when both are 0, where the script divides 0 by 0). The
headline is the plain mean of the subset F1s (not weighted by subset size). A subset
without correct (or without erroneous) items has no such accuracy: it and the F1 are
null, with a warning, and so is the headline (`limit_items` keeps both kinds).

A scalar PRM predicts the first step it flags, or -1, by `rules` (prmkit.evaluation.rules):
- "benchmark" (default), as the official script: a step is flagged unless its score is
  above the threshold (the script takes the argmax of the two classes, a tie going to
  the error class); a step without a score (cut at the model's maximum length, null in
  `prmkit score` output; the script cuts none) is not judged.
- "prmkit": a step is flagged when its score is below the threshold, and a null score
  counts as NULL_STEP_SCORE (0.0), flagged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from prmkit.data.paths import where_relative
from prmkit.data.processbench import read_processbench
from prmkit.data.records import ProcessBenchItem
from prmkit.errors import DataError, PrmkitError
from prmkit.evaluation.rules import check_rules
from prmkit.evaluation.subsets import stratified_subset, warn_undefined
from prmkit.scoring.aggregate import fill_null_steps

SUBSETS = ("gsm8k", "math", "olympiadbench", "omnimath")


def first_error_index(step_scores: Sequence[float | None], threshold: float,
                      rules: str = "benchmark") -> int:
    """Index of the first step flagged by `rules` (module docstring): "benchmark", a
    score at or below the threshold (a null score is not judged); "prmkit", below it (a
    null score counts as NULL_STEP_SCORE, 0.0); -1 if none."""
    check_rules(rules)
    if rules == "prmkit":
        s = np.asarray(fill_null_steps(step_scores), dtype=np.float64)
        flagged = s < threshold
    else:
        s = np.array([np.inf if v is None else v for v in step_scores], dtype=np.float64)
        flagged = s <= threshold
    if np.isnan(s).any():
        raise PrmkitError("step score is NaN")
    found = np.flatnonzero(flagged)
    return int(found[0]) if found.size else -1


def _f1(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return 2 * a * b / (a + b) if a + b > 0 else 0.0


def subset_metrics(labels: Sequence[int], predictions: Sequence[int],
                   name: str = "subset", warn: bool = True) -> dict:
    """error_acc, correct_acc, f1 (fractions in [0, 1], None where the items leave them
    undefined, with a warning) and item counts."""
    y = np.asarray(labels, dtype=np.int64)
    p = np.asarray(predictions, dtype=np.int64)
    if y.shape != p.shape:
        raise PrmkitError(f"{len(y)} labels but {len(p)} predictions")
    err, ok = y != -1, y == -1
    error_acc = float((p[err] == y[err]).mean()) if err.any() else None
    correct_acc = float((p[ok] == -1).mean()) if ok.any() else None
    if warn and (error_acc is None or correct_acc is None):
        kind = "erroneous" if error_acc is None else "correct"
        warn_undefined(f"ProcessBench {name} F1", f"its {len(y)} items hold no {kind} "
                       "solution (use --limit, which keeps both kinds, not a first-N subset)")
    return {
        "error_acc": error_acc,
        "correct_acc": correct_acc,
        "f1": _f1(error_acc, correct_acc),
        "n_error": int(err.sum()),
        "n_correct": int(ok.sum()),
    }


def evaluate(
    items: Mapping[str, Sequence[ProcessBenchItem]], predictions: Mapping[str, int],
    warn: bool = True,
) -> dict:
    """Per-subset metrics and the official `average_f1` (plain mean over subsets; None
    if a subset's F1 is undefined)."""
    out: dict = {}
    for subset, subset_items in items.items():
        missing = [it.id for it in subset_items if it.id not in predictions]
        if missing:
            raise PrmkitError(
                f"no prediction for {len(missing)} {subset} item(s), e.g. {missing[0]!r}"
            )
        out[subset] = subset_metrics(
            [it.label for it in subset_items], [predictions[it.id] for it in subset_items],
            subset, warn)
    f1s = [out[s]["f1"] for s in items]
    out["average_f1"] = float(np.mean(f1s)) if f1s and None not in f1s else None
    return out


def threshold_predictions(
    step_scores: Mapping[str, Sequence[float | None]], threshold: float,
    rules: str = "benchmark",
) -> dict[str, int]:
    return {k: first_error_index(v, threshold, rules) for k, v in step_scores.items()}


def unscored_steps(step_scores: Mapping[str, Sequence[float | None]]) -> int:
    """Steps without a score (cut at the model's maximum length)."""
    return sum(v is None for scores in step_scores.values() for v in scores)


def choose_threshold(
    items: Mapping[str, Sequence[ProcessBenchItem]],
    step_scores: Mapping[str, Sequence[float | None]],
    grid: Sequence[float] | None = None,
    max_candidates: int = 200,
    rules: str = "benchmark",
) -> tuple[float, float]:
    """Grid search for the threshold maximising average F1 on (held-out) items.

    The default grid holds up to `max_candidates` quantiles of the observed step scores
    (F1 only changes at observed values), plus one threshold flagging none of them.
    Returns (threshold, average_f1); ties go to the smallest threshold.
    """
    check_rules(rules)
    if grid is None:
        scores = [step_scores[it.id] for sub in items.values() for it in sub]
        if rules == "prmkit":
            scores = [fill_null_steps(v) for v in scores]
        uniq = np.unique(np.array([x for v in scores for x in v if x is not None] or [0.5],
                                  dtype=np.float64))
        if uniq.size > max_candidates:
            uniq = np.unique(np.quantile(uniq, np.linspace(0, 1, max_candidates)))
        # "score <= t" flags each observed value t and below ("score < t": below t), so
        # each observed value is a candidate cut, and one more flags nothing.
        none = (np.nextafter(uniq[0], -np.inf) if rules == "benchmark"
                else np.nextafter(uniq[-1], np.inf))
        grid = np.sort(np.append(uniq, none))
    best = (float("nan"), -1.0)
    for t in grid:
        f1 = evaluate(items, threshold_predictions(step_scores, float(t), rules), warn=False)
        if f1["average_f1"] is None:
            missing = [s for s in items if f1[s]["f1"] is None]
            raise PrmkitError(f"the tuning items of {', '.join(missing)} lack correct or "
                              "erroneous solutions: raise the tuning fraction")
        if f1["average_f1"] > best[1]:
            best = (float(t), f1["average_f1"])
    return best


def load_processbench(
    path: str | os.PathLike, subsets: Sequence[str] | None = None
) -> dict[str, list[ProcessBenchItem]]:
    """Items per subset from a directory of <subset>.json files (or one such file)."""
    path = Path(path)
    if path.is_file():
        files = {path.stem: path}
    elif path.is_dir():
        names = subsets or [s for s in SUBSETS if (path / f"{s}.json").exists()]
        files = {s: path / f"{s}.json" for s in names}
        if not files:
            raise DataError(str(path), None, None, "no ProcessBench <subset>.json files found")
    else:
        raise DataError(str(path), None, None, "no such file or directory" + where_relative(path))
    out = {}
    for subset, file in files.items():
        if not file.exists():
            raise DataError(str(file), None, None, "file not found")
        items = list(read_processbench(file))
        for it in items:
            it.subset = subset
        out[subset] = items
    return out


def limit_items(
    items: Mapping[str, Sequence[ProcessBenchItem]], limit: int | None, seed: int = 0
) -> dict[str, list[ProcessBenchItem]]:
    """At most `limit` items in all, stratified by subset and correct/erroneous (seeded);
    every subset keeps both kinds where `limit` allows."""
    flat = [it for sub in items.values() for it in sub]
    kept = {id(it) for it in stratified_subset(
        flat, limit, lambda it: (it.subset, it.label == -1), seed)}
    out = {s: [it for it in sub if id(it) in kept] for s, sub in items.items()}
    return {s: sub for s, sub in out.items() if sub}


def split_items(
    items: Mapping[str, Sequence[ProcessBenchItem]], fraction: float, seed: int = 0
) -> tuple[dict[str, list[ProcessBenchItem]], dict[str, list[ProcessBenchItem]]]:
    """(tune, evaluate): a seeded random `fraction` of every subset held out for tuning."""
    if not 0 < fraction < 1:
        raise PrmkitError("the tuning fraction must lie strictly between 0 and 1")
    rng = np.random.default_rng(seed)
    tune, rest = {}, {}
    for subset, sub in items.items():
        mask = rng.random(len(sub)) < fraction
        tune[subset] = [it for it, m in zip(sub, mask) if m]
        rest[subset] = [it for it, m in zip(sub, mask) if not m]
    return tune, rest
