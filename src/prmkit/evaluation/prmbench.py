"""PRMBench (Song et al., 2025) with its published metric, PRMScore.

Follows the official PRM Eval ToolKit (github.com/ssmisya/PRMBench,
mr_eval/tasks/prmtest_classified/task.py) and the notebook that makes its table
(mr_visualize/eval_res_view/draw_tabs/form_latex_strs.ipynb):

- Items: every record is evaluated on ``modified_process`` with its 1-based
  ``error_steps``, keyed ``<classification>_<idx>`` (duplicates dropped, first kept).
  Each ``redundency`` record also yields a "correct" item from its ``original_process``
  (no error steps), keyed ``correct_<idx>``.
- A step is predicted valid when its score is above the validity threshold (0.5 there).
- Confusion counts take valid steps as the positive class: TP = non-error step predicted
  valid, FN = non-error step predicted invalid, TN = error step predicted invalid,
  FP = error step predicted valid. F1 is the positive-class F1, negative F1 the error-class
  F1, and PRMScore = 0.5 * F1 + 0.5 * negative F1 (for multi_solutions, which has no
  error steps, PRMScore = F1). The overall PRMScore pools the counts of every class
  except "correct"; a category's is the mean of its classes'.

Two rule sets (`rules`), the result saying which made it:

- "benchmark" (default), the toolkit's own: precision and recall are -1 where their
  denominator is 0, F1 is -1 where p + r = 0, and every PRMScore is clamped at 0; the
  predictions of an item are counted as they are (a step past them, e.g. cut at the
  model's maximum length, is left out; a prediction past the last step counts as a step
  without error); fewer than 5 items may lack a prediction and an item whose prediction
  is marked invalid is skipped.
- "prmkit", stricter: an F1 without any step of its class is null (with a warning),
  undefined precision or recall count as 0, no clamp; a null score (a step cut at the
  maximum length) counts as 0.0 (invalid); a missing, invalid or wrong-length
  prediction is an error.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prmkit.data.io import iter_jsonl
from prmkit.data.paths import where_relative
from prmkit.errors import DataError, PrmkitError
from prmkit.evaluation.rules import check_rules
from prmkit.evaluation.subsets import stratified_subset, warn_undefined
from prmkit.scoring.aggregate import fill_null_steps

CATEGORIES = {
    "simplicity": ("redundency", "circular"),
    "soundness": ("counterfactual", "step_contradiction", "domain_inconsistency", "confidence"),
    "sensitivity": ("missing_condition", "deception", "multi_solutions"),
}
VALIDITY_THRESHOLD = 0.5


@dataclass
class PrmBenchItem:
    id: str
    question: str
    steps: list[str]
    error_steps: list[int]  # 1-based
    classification: str


def _key(classification: str, idx: str) -> str:
    return idx if idx.startswith(f"{classification}_") else f"{classification}_{idx}"


def load_prmbench(paths: Iterable[str | os.PathLike]) -> list[PrmBenchItem]:
    """Evaluation items from PRMBench JSONL files or directories of them."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.glob("*.jsonl")))
        elif p.is_file():
            files.append(p)
        else:
            raise DataError(str(p), None, None, "no such file or directory" + where_relative(p))
    if not files:
        raise PrmkitError("no PRMBench .jsonl files given")
    seen: set[str] = set()
    items: list[PrmBenchItem] = []

    def add(item: PrmBenchItem) -> None:
        if item.id not in seen:
            seen.add(item.id)
            items.append(item)

    for file in files:
        for line, rec in iter_jsonl(file):
            try:
                cls, idx = str(rec["classification"]), str(rec["idx"])
                steps, errors = rec["modified_process"], rec["error_steps"]
                question = rec.get("modified_question") or rec["question"]
                if not isinstance(steps, list) or not isinstance(errors, list):
                    raise TypeError
                errors = [int(e) for e in errors]
            except (KeyError, TypeError, ValueError):
                raise DataError(
                    str(file), line, None,
                    "expected classification, idx, modified_process[list], error_steps[list]",
                ) from None
            if any(e < 1 for e in errors):
                raise DataError(str(file), line, "error_steps", "steps are numbered from 1")
            if cls == "redundency":
                original = rec.get("original_process")
                if isinstance(original, list):
                    add(PrmBenchItem(f"correct_{idx}", str(rec.get("original_question") or
                                                            question), original, [], "correct"))
            add(PrmBenchItem(_key(cls, idx), str(question), steps, errors, cls))
    return items


MAX_MISSING = 5  # the toolkit asserts fewer missing predictions than this


def _f1(tp: int, fp: int, fn: int, rules: str) -> float | None:
    """The F1 of one class: `tp` hits, `fp` false alarms, `fn` misses."""
    if rules == "prmkit":
        return 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn > 0 else None
    precision = tp / (tp + fp) if tp + fp else -1
    recall = tp / (tp + fn) if tp + fn else -1
    return 2 * precision * recall / (precision + recall) if precision + recall != 0 else -1


def _mean(values: list[float | None]) -> float | None:
    return None if not values or None in values else float(np.mean(values))


def _counts(error_steps: Sequence[int],
            valid: Sequence[bool | None]) -> tuple[np.ndarray, int | None]:
    """[TP, FP, TN, FN] over the steps predicted (None: not judged) and first-error hit
    (1/0, None if the item has no error among them). Error steps past the predictions
    (some released items list one past the last step) are not visited, as in the toolkit."""
    judged = np.array([v is not None for v in valid], dtype=bool)
    valid = np.array([bool(v) for v in valid], dtype=bool)
    is_error = np.zeros(len(valid), dtype=bool)
    is_error[[e - 1 for e in error_steps if e <= len(valid)]] = True
    tp = int((judged & ~is_error & valid).sum())
    fn = int((judged & ~is_error & ~valid).sum())
    tn = int((judged & is_error & ~valid).sum())
    fp = int((judged & is_error & valid).sum())
    first = min(error_steps, default=len(valid) + 1) - 1
    hit = int(not valid[first]) if first < len(valid) and judged[first] else None
    return np.array([tp, fp, tn, fn]), hit


def _summary(c: np.ndarray, firsts: list[int], classification: str | None,
             rules: str) -> dict:
    tp, fp, tn, fn = (int(x) for x in c)
    undefined = None if rules == "prmkit" else -1
    f1, neg = _f1(tp, fp, fn, rules), _f1(tn, fn, fp, rules)
    if rules == "prmkit":
        neg = neg if tn + fp > 0 else None
        if f1 is None:
            warn_undefined(f"PRMBench {classification or 'overall'} F1",
                           "its items hold no step without an error")
        score = f1 if neg is None or f1 is None else 0.5 * f1 + 0.5 * neg
    else:
        score = max(0.0, 0.5 * f1 + 0.5 * neg)
    if classification == "multi_solutions":
        score = f1 if rules == "prmkit" else max(0.0, f1)
    return {
        "f1": f1,
        "negative_f1": neg,
        "prmscore": score,
        "correct_step_acc": tp / (tp + fn) if tp + fn else undefined,
        "wrong_step_acc": tn / (tn + fp) if tn + fp else undefined,
        "total_step_acc": (tp + tn) / c.sum() if c.sum() else undefined,
        "first_error_acc": float(np.mean(firsts)) if firsts else undefined,
        "counts": {"TP": tp, "FP": fp, "TN": tn, "FN": fn},
    }


def _strict_problem(item: PrmBenchItem, step_valid: Mapping) -> str | None:
    """What prmkit's rules refuse in an item's prediction, if anything."""
    if item.id not in step_valid:
        return f"no prediction for PRMBench item {item.id!r}"
    pred = step_valid[item.id]
    if pred is None:
        return f"the prediction of PRMBench item {item.id!r} is marked invalid"
    if len(pred) != len(item.steps):
        return f"item {item.id!r}: {len(pred)} step predictions for {len(item.steps)} steps"
    return f"item {item.id!r}: a step without a prediction (null)" if None in pred else None


def _predictions(items: Sequence[PrmBenchItem], step_valid: Mapping, rules: str) -> dict:
    """The predictions evaluated, per item id: under the toolkit's rules missing ones (fewer
    than MAX_MISSING) and those marked invalid (None) are left out; under prmkit's each
    item needs one prediction per step."""
    if rules == "prmkit":
        problem = next(filter(None, (_strict_problem(it, step_valid) for it in items)), None)
        if problem:
            raise PrmkitError(f"{problem} (--rules prmkit; PRMBench's own rules count what "
                              "is there: --rules benchmark)")
    missing = [it.id for it in items if it.id not in step_valid]
    if len(missing) >= MAX_MISSING:
        raise PrmkitError(f"no prediction for {len(missing)} PRMBench items, e.g. "
                          f"{missing[0]!r}: PRMBench's evaluation tolerates fewer than "
                          f"{MAX_MISSING}")
    return {it.id: step_valid[it.id] for it in items if step_valid.get(it.id) is not None}


def evaluate(
    items: Sequence[PrmBenchItem],
    step_valid: Mapping[str, Sequence[bool | None] | None],
    rules: str = "benchmark",
) -> dict:
    """PRMScore overall, per classification and per category (simplicity, ...), by `rules`
    (module docstring). step_valid: per item id, predicted validity per step (None: not
    judged), or None for a prediction marked invalid."""
    check_rules(rules)
    predictions = _predictions(items, step_valid, rules)
    per_class: dict[str, np.ndarray] = {}
    firsts: dict[str, list[int]] = {}
    for it in items:
        if it.id not in predictions:
            continue
        c, first = _counts(it.error_steps, predictions[it.id])
        per_class[it.classification] = per_class.get(it.classification, 0) + c
        if first is not None:
            firsts.setdefault(it.classification, []).append(first)
    classes = {k: _summary(v, firsts.get(k, []), k, rules) for k, v in sorted(per_class.items())}
    total = sum((v for k, v in per_class.items() if k != "correct"), np.zeros(4, dtype=np.int64))
    all_firsts = [f for k, v in firsts.items() if k != "correct" for f in v]
    out = {"overall": _summary(np.asarray(total), all_firsts, None, rules), "classes": classes}
    out["prmscore"] = out["overall"]["prmscore"]
    out["categories"] = {
        name: _mean([classes[c]["prmscore"] for c in members if c in classes])
        for name, members in CATEGORIES.items()
        if any(c in classes for c in members)
    }
    out["rules"] = rules
    missing = sum(it.id not in step_valid for it in items)
    out["items"] = {"evaluated": len(predictions), "missing": missing,
                    "invalid": len(items) - missing - len(predictions)}
    return out


def limit_items(items: Sequence[PrmBenchItem], limit: int | None,
                seed: int = 0) -> list[PrmBenchItem]:
    """At most `limit` items, stratified by classification (seeded)."""
    return stratified_subset(items, limit, lambda it: it.classification, seed)


def valid_from_scores(
    step_scores: Mapping[str, Sequence[float | None]], threshold: float = VALIDITY_THRESHOLD,
    rules: str = "benchmark",
) -> dict[str, list[bool | None]]:
    """Valid = score above the threshold (as in the official toolkit). A null score (a step
    the scorer cut at max_length) is not judged (None) under the toolkit's rules, and
    counts as NULL_STEP_SCORE (0.0), invalid, under prmkit's."""
    check_rules(rules)
    out = {}
    for k, v in step_scores.items():
        if any(x is not None and np.isnan(x) for x in v):
            raise PrmkitError(f"item {k!r}: a step score is NaN")
        if rules == "prmkit":
            v = fill_null_steps(v)
        out[k] = [None if x is None else bool(x > threshold) for x in v]
    return out
