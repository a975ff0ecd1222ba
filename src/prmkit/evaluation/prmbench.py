"""PRMBench (Song et al., 2025) with its published metric, PRMScore.

Follows the official PRM Eval ToolKit (github.com/ssmisya/PRMBench,
mr_eval/tasks/prmtest_classified/task.py):

- Items: every record is evaluated on ``modified_process`` with its 1-based
  ``error_steps``, keyed ``<classification>_<idx>`` (duplicates dropped, first kept).
  Each ``redundency`` record also yields a "correct" item from its ``original_process``
  (no error steps), keyed ``correct_<idx>``. Error steps past the last step (a few
  released records have them) are ignored, as the toolkit only visits existing steps.
- A step is predicted valid when its score is above the validity threshold (0.5 there).
- Confusion counts take valid steps as the positive class: TP = non-error step predicted
  valid, FN = non-error step predicted invalid, TN = error step predicted invalid,
  FP = error step predicted valid. F1 is the positive-class F1, negative F1 the error-class
  F1, and PRMScore = 0.5 * F1 + 0.5 * negative F1 (for multi_solutions, which has no
  error steps, PRMScore = F1). The overall PRMScore pools the counts of every class
  except "correct". Undefined precision/recall count as 0 here (the toolkit returns -1);
  an F1 with no step of its class at all (and none predicted) is null, with a warning, as
  is every PRMScore built on it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prmkit.data.io import iter_jsonl
from prmkit.errors import DataError, PrmkitError
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
            raise DataError(str(p), None, None, "no such file or directory")
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


def _f1(tp: int, fp: int, fn: int) -> float | None:
    return 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn > 0 else None


def _mean(values: list[float | None]) -> float | None:
    return None if not values or None in values else float(np.mean(values))


def _counts(error_steps: Sequence[int], valid: Sequence[bool]) -> tuple[np.ndarray, int | None]:
    """[TP, FP, TN, FN] and first-error hit (1/0, None if the item has no error)."""
    valid = np.asarray(valid, dtype=bool)
    # Error steps beyond the last step occur in the released files; the toolkit only
    # visits existing steps, so they are ignored here too.
    in_range = [e for e in error_steps if e <= len(valid)]
    is_error = np.zeros(len(valid), dtype=bool)
    is_error[np.asarray(in_range, dtype=np.int64) - 1] = True
    tp = int((~is_error & valid).sum())
    fn = int((~is_error & ~valid).sum())
    tn = int((is_error & ~valid).sum())
    fp = int((is_error & valid).sum())
    first = None
    if error_steps and min(error_steps) <= len(valid):
        first = int(not valid[min(error_steps) - 1])
    return np.array([tp, fp, tn, fn]), first


def _summary(c: np.ndarray, firsts: list[int], classification: str | None) -> dict:
    tp, fp, tn, fn = (int(x) for x in c)
    f1 = _f1(tp, fp, fn)
    neg = _f1(tn, fn, fp) if tn + fp > 0 else None
    if f1 is None:
        warn_undefined(f"PRMBench {classification or 'overall'} F1",
                       "its items hold no step without an error")
    out = {
        "f1": f1,
        "negative_f1": neg,
        "prmscore": f1 if neg is None or f1 is None else 0.5 * f1 + 0.5 * neg,
        "correct_step_acc": tp / (tp + fn) if tp + fn else None,
        "wrong_step_acc": tn / (tn + fp) if tn + fp else None,
        "total_step_acc": (tp + tn) / c.sum() if c.sum() else None,
        "first_error_acc": float(np.mean(firsts)) if firsts else None,
        "counts": {"TP": tp, "FP": fp, "TN": tn, "FN": fn},
    }
    if classification == "multi_solutions":
        out["prmscore"] = f1
    return out


def evaluate(
    items: Sequence[PrmBenchItem],
    step_valid: Mapping[str, Sequence[bool]],
) -> dict:
    """PRMScore overall, per classification and per category (simplicity, ...)."""
    per_class: dict[str, np.ndarray] = {}
    firsts: dict[str, list[int]] = {}
    for it in items:
        pred = step_valid.get(it.id)
        if pred is None:
            raise PrmkitError(f"no prediction for PRMBench item {it.id!r}")
        if len(pred) != len(it.steps):
            raise PrmkitError(
                f"item {it.id!r}: {len(pred)} step predictions for {len(it.steps)} steps"
            )
        c, first = _counts(it.error_steps, pred)
        per_class[it.classification] = per_class.get(it.classification, 0) + c
        if first is not None:
            firsts.setdefault(it.classification, []).append(first)
    classes = {k: _summary(v, firsts.get(k, []), k) for k, v in sorted(per_class.items())}
    total = sum((v for k, v in per_class.items() if k != "correct"), np.zeros(4, dtype=np.int64))
    all_firsts = [f for k, v in firsts.items() if k != "correct" for f in v]
    out = {"overall": _summary(np.asarray(total), all_firsts, None), "classes": classes}
    out["prmscore"] = out["overall"]["prmscore"]
    out["categories"] = {
        name: _mean([classes[c]["prmscore"] for c in members if c in classes])
        for name, members in CATEGORIES.items()
        if any(c in classes for c in members)
    }
    return out


def limit_items(items: Sequence[PrmBenchItem], limit: int | None,
                seed: int = 0) -> list[PrmBenchItem]:
    """At most `limit` items, stratified by classification (seeded)."""
    return stratified_subset(items, limit, lambda it: it.classification, seed)


def valid_from_scores(
    step_scores: Mapping[str, Sequence[float | None]], threshold: float = VALIDITY_THRESHOLD
) -> dict[str, list[bool]]:
    """Valid = score above the threshold (as in the official toolkit). A null score (a step
    the scorer cut at max_length) counts as NULL_STEP_SCORE (0.0): invalid."""
    out = {}
    for k, v in step_scores.items():
        s = np.asarray(fill_null_steps(v), dtype=np.float64)
        if np.isnan(s).any():
            raise PrmkitError(f"item {k!r}: a step score is NaN")
        out[k] = (s > threshold).tolist()
    return out
