"""Accuracy against compute: search result files of several methods and budgets, graded
against the gold answers, as points (accuracy, generated tokens per problem, N), with
pass@N and majority vote from the best-of-N pools as references.

One result file is one (method, budget) run of `prmkit search`. A point per file: the
chosen answers' accuracy; tree methods add a "(weighted vote)" point from the same search.
Only the problems present in every file are evaluated. The references come from the
largest best-of-N pool: pass@n (exact) and majority vote (Monte-Carlo over draws of n of
its N samples, as `prmkit eval bon`), at n = 1, 2, 4, ... N, plotted at n times the
pool's mean generated tokens per sample.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from prmkit.data.io import iter_jsonl
from prmkit.errors import DataError, PrmkitError

REQUIRED = ("id", "approach", "chosen", "candidates", "generated_tokens", "prm_tokens")


@dataclass
class ResultFile:
    path: str
    approach: str
    n: int
    aggregation: str
    lines: dict[str, dict] = field(default_factory=dict)  # by problem id


def read_results(path: str | os.PathLike) -> ResultFile:
    """A `prmkit search` output; every line must come from the same search config."""
    path = str(path)
    config = None
    out: ResultFile | None = None
    for line, rec in iter_jsonl(path):
        if not isinstance(rec, dict):
            raise DataError(path, line, None, "expected a JSON object")
        for key in REQUIRED:
            if key not in rec:
                raise DataError(path, line, key, "missing: not a `prmkit search` result line")
        cfg = (rec.get("search") or {}).get("config")
        if not isinstance(cfg, dict):
            raise DataError(path, line, "search", "missing the search config record")
        if config is None:
            config = cfg
            out = ResultFile(path, cfg["approach"], int(cfg["n"]), cfg["aggregation"])
        elif cfg != config:
            raise DataError(path, line, "search", "another search config than the first line's")
        rec["_line"] = line
        out.lines[str(rec["id"])] = rec
    if out is None:
        raise PrmkitError(f"{path}: no result lines")
    return out


def _grade(files: Sequence[ResultFile], ids: list[str], gold: dict[str, str] | None,
           progress: bool) -> dict[tuple[str, str], bool]:
    """(answer, gold) -> correct for every candidate answer of every file."""
    from prmkit.grading import grade_many

    pairs: set[tuple[str, str]] = set()
    for f in files:
        for pid in ids:
            g = gold_answer(f, pid, gold)
            for c in f.lines[pid]["candidates"]:
                if c.get("answer") is not None:
                    pairs.add((c["answer"], g))
    ordered = sorted(pairs)
    grades = grade_many(ordered, progress=progress)
    return {pair: g.correct is True for pair, g in zip(ordered, grades)}


def gold_answer(f: ResultFile, pid: str, gold: dict[str, str] | None) -> str:
    rec = f.lines[pid]
    answer = (gold or {}).get(pid, rec.get("answer"))
    if answer is None:
        raise DataError(f.path, rec["_line"], "answer",
                        "no gold answer (pass --problems with answers)")
    return str(answer)


def _correct(rec: dict, index: int, g: str, verdicts: dict) -> bool:
    if index < 0:
        return False
    answer = rec["candidates"][index].get("answer")
    return answer is not None and verdicts[(answer, g)]


def evaluate_results(files: Sequence[ResultFile], gold: dict[str, str] | None = None,
                     trials: int = 400, seed: int = 0, progress: bool = False) -> dict:
    """Points per file and best-of-N references (see module docstring)."""
    from prmkit.evaluation.bon import ProblemPool, bon_curves, default_ns
    from prmkit.selection.vote import AnswerClusterer

    if not files:
        raise PrmkitError("no result files")
    ids = sorted(set.intersection(*(set(f.lines) for f in files)))
    if not ids:
        raise PrmkitError("the result files share no problem")
    verdicts = _grade(files, ids, gold, progress)
    points = []
    for f in files:
        recs = [f.lines[pid] for pid in ids]
        golds = [gold_answer(f, pid, gold) for pid in ids]
        generated = float(np.mean([r["generated_tokens"] for r in recs]))
        prm = float(np.mean([r["prm_tokens"] for r in recs]))
        base = {"file": f.path, "n": f.n, "aggregation": f.aggregation,
                "generated_tokens": generated, "prm_tokens": prm}
        acc = np.mean([_correct(r, r["chosen"], g, verdicts) for r, g in zip(recs, golds)])
        points.append({"method": f.approach, "accuracy": float(acc), **base})
        if f.approach in ("beam_search", "dvts"):
            acc = np.mean([_correct(r, r["details"].get("weighted", -1), g, verdicts)
                           for r, g in zip(recs, golds)])
            points.append({"method": f"{f.approach} (weighted vote)", "accuracy": float(acc),
                           **base})
    result = {"problems": len(ids), "points": points, "references": None}
    pools_from = [f for f in files if f.approach in ("best_of_n", "weighted_best_of_n")]
    if pools_from:
        f = max(pools_from, key=lambda f: f.n)
        clusterer = AnswerClusterer()
        pools, tokens = [], []
        for pid in ids:
            rec, g = f.lines[pid], gold_answer(f, pid, gold)
            cands = [c for c in rec["candidates"] if c.get("answer") is not None]
            pools.append(ProblemPool(
                scores=[c["score"] for c in cands],
                correct=[verdicts[(c["answer"], g)] for c in cands],
                clusters=clusterer.cluster([c["answer"] for c in cands]),
                n_slots=len(rec["candidates"]), problem_id=pid))
            tokens.append(rec["generated_tokens"] / max(len(rec["candidates"]), 1))
        ns = default_ns(min(int(p.n_slots) for p in pools))
        curves = bon_curves(pools, ns, trials=trials, seed=seed, votes=("majority",))
        per_sample = float(np.mean(tokens))
        result["references"] = {
            "file": f.path, "n": ns, "generated_tokens": [n * per_sample for n in ns],
            "pass_at_n": curves.accuracy["pass"], "majority": curves.accuracy["majority"],
            "best_of_n": curves.accuracy["best"], "trials": trials}
    return result


def report_table(result: dict) -> dict:
    """One row per point, for `evaluation.report.write_report`."""
    cols = ["method", "N", "aggregation", "accuracy", "generated tokens / problem",
            "PRM tokens / problem", "file"]
    rows = [[p["method"], p["n"], p["aggregation"], p["accuracy"], p["generated_tokens"],
             p["prm_tokens"], os.path.basename(p["file"])] for p in result["points"]]
    ref = result.get("references")
    if ref:
        for i, n in enumerate(ref["n"]):
            for key, name in (("pass_at_n", "pass@N"), ("majority", "majority vote")):
                rows.append([name, n, "-", ref[key][i], ref["generated_tokens"][i], None,
                             os.path.basename(ref["file"])])
    return {"columns": cols, "rows": rows}
