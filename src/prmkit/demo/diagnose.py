"""Why best-of-N with a reward model rises or falls: one seed, cached models and scores.

    python -m prmkit.demo.diagnose --seed 0 --work /tmp/prmkit-diagnose [--set reward_steps=500]

Trains (or reuses) one seed's backbone, PRM and ORM as `prmkit demo` does, scores the test
pools once, then compares selections on the same scores: the PRM under each aggregation,
the ORM, majority vote, and two checkers that know the truth (every step, or arithmetic
only). For the pick from each whole pool it reports the number of steps and what is wrong
with it, against the pool.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import torch

from prmkit.demo import world
from prmkit.demo.run import (
    DemoConfig,
    _same_number,
    _score,
    _solution_score,
    seed_world,
    train_seed_models,
)
from prmkit.demo.settings import with_overrides
from prmkit.evaluation import bon_curves
from prmkit.evaluation.bon import ProblemPool
from prmkit.selection import AnswerClusterer

_STEP = re.compile(r"^\s*(-?\d+)\s*([-+*/])\s*(-?\d+)\s*=\s*(-?\d+)\s*$")


def error_kind(prob: world.WorldProblem, steps: list[str], chk: world.StepCheck) -> str:
    """What is wrong with a solution: right, trap (the problem's misreading), slip
    (arithmetic), unjustified (an operand never computed or not the problem's: skipped or
    miscopied), answer (the answer step), or cancel (right answer, wrong step)."""
    if chk.process_correct:
        return "right"
    if prob.trap_answer is not None and chk.answer == prob.trap_answer:
        return "trap"
    if chk.final_correct:
        return "cancel"
    bad = steps[chk.first_error]
    m = _STEP.match(bad)
    if m is None:
        return "answer"
    a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
    exact = {"+": a + b, "-": a - b, "*": a * b}.get(op, a // b if b and a % b == 0 else None)
    return "slip" if exact != c else "unjustified"


def arithmetic_ok(steps: list[str]) -> bool:
    """What a calculator can check: every step's arithmetic is exact and the answer is a
    value that a step computed (blind to which numbers and operations the problem needs)."""
    written = set()
    for s in steps[:-1]:
        m = _STEP.match(s)
        if m is None:
            return False
        a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
        exact = {"+": a + b, "-": a - b, "*": a * b}.get(op, a // b if b and a % b == 0 else None)
        if exact != c:
            return False
        written.add(str(c))
    return bool(steps) and steps[-1].startswith("Answer: ") and steps[-1][8:].strip() in written


def _cached_scores(path: Path, model_dir: Path, pools, problems) -> list:
    if path.exists():
        return json.loads(path.read_text())
    scores = _score(model_dir, pools, problems, progress=False)
    path.write_text(json.dumps(scores))
    return scores


def diagnose(seed: int, cfg: DemoConfig, work: Path) -> dict:
    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True)
    sw = seed_world(seed, cfg)
    folder = work / f"seed{seed}"
    if not (folder / "orm" / "model").exists():
        models = train_seed_models(seed, cfg, sw, folder)
        prm_dir, orm_dir = models.prm_dir, models.orm_dir
    else:
        prm_dir, orm_dir = folder / "prm" / "model", folder / "orm" / "model"
    test, pools = sw.splits.test, sw.test_pools
    prm = _cached_scores(folder / "prm_scores.json", prm_dir, pools, test)
    orm = _cached_scores(folder / "orm_scores.json", orm_dir, pools, test)

    selectors = {f"PRM {a}": a for a in ("prod", "min", "last", "mean")}
    rows: dict[str, list[ProblemPool]] = {k: [] for k in
                                          [*selectors, "ORM", "true steps", "true arithmetic"]}
    picks: dict[str, list[tuple[int, str]]] = {k: [] for k in rows}
    pool_len, pool_kind = [], []
    step_by_kind: dict[str, list[float]] = {}
    rng = np.random.default_rng(seed)
    clusterer = AnswerClusterer(equivalent=_same_number)
    for prob, pool, ps, os_ in zip(test, pools, prm, orm):
        checks = [world.check_solution(prob, s) for s in pool]
        kinds = [error_kind(prob, s, c) for s, c in zip(pool, checks)]
        answered = [i for i, c in enumerate(checks) if c.answer is not None]
        correct = np.array([checks[i].final_correct for i in answered])
        clusters = np.array(clusterer.cluster([checks[i].answer for i in answered]))
        pool_len += [len(pool[i]) for i in answered]
        pool_kind += [kinds[i] for i in answered]
        jitter = rng.random(len(answered)) * 1e-9  # breaks ties of the truth checkers at random
        scores = {name: [_solution_score(ps[i], agg) for i in answered]
                  for name, agg in selectors.items()}
        scores["ORM"] = [os_[i][-1] for i in answered]
        scores["true steps"] = list(
            np.array([float(checks[i].first_error < 0) for i in answered]) + jitter)
        scores["true arithmetic"] = list(
            np.array([float(arithmetic_ok(pool[i])) for i in answered]) + jitter)
        for name, sc in scores.items():
            rows[name].append(ProblemPool(np.array(sc), correct, clusters, n_slots=len(pool)))
            k = answered[int(np.argmax(sc))]
            picks[name].append((len(pool[k]), kinds[k]))
        for i in answered:  # PRM score of each solution's first wrong step, by error kind
            c = checks[i]
            j = c.first_error
            if j >= 0 and ps[i][j] is not None:
                step_by_kind.setdefault(kinds[i], []).append(ps[i][j])
            elif j < 0:
                step_by_kind.setdefault("right", []).extend(p for p in ps[i] if p is not None)
    ns = list(cfg.ns)
    out: dict = {"n": ns, "curves": {}, "picks": {}}
    for name, pp in rows.items():
        curves = bon_curves(pp, ns, estimator="exact", votes=("majority",) if name == "ORM" else (),
                            seed=seed)
        out["curves"][name] = curves.accuracy["best"]
        if name == "ORM":
            out["curves"]["majority"] = curves.accuracy["majority"]
            out["curves"]["pass"] = curves.accuracy["pass"]
        lens = [n for n, _ in picks[name]]
        kinds = [k for _, k in picks[name]]
        out["picks"][name] = {"steps": float(np.mean(lens)),
                              **{k: kinds.count(k) / len(kinds) for k in sorted(set(pool_kind))}}
    out["picks"]["(pool)"] = {"steps": float(np.mean(pool_len)),
                              **{k: pool_kind.count(k) / len(pool_kind) for k in sorted(set(pool_kind))}}
    out["first_wrong_step_score"] = {k: [float(np.mean(v)), len(v)] for k, v in
                                     sorted(step_by_kind.items())}
    return out


def format_report(r: dict) -> str:
    ns = r["n"]
    lines = ["best-of-N, % solved: " + " ".join(f"N={n}" for n in ns)]
    for name, curve in r["curves"].items():
        lines.append(f"  {name:<16}" + " ".join(f"{100 * v:5.1f}" for v in curve))
    kinds = [k for k in r["picks"]["(pool)"] if k != "steps"]
    lines.append(f"pick from the whole pool: {'steps':>6} " + " ".join(f"{k:>11}" for k in kinds))
    for name, p in r["picks"].items():
        lines.append(f"  {name:<16} {p['steps']:6.2f} " + " ".join(f"{p[k]:11.2f}" for k in kinds))
    lines.append("PRM score of the first wrong step, by error kind (right: every step of right "
                 "solutions):")
    for k, (m, n) in r["first_wrong_step_score"].items():
        lines.append(f"  {k:<12} {m:.3f} ({n} steps)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default="diagnose-output")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a DemoConfig field (int, float or text)")
    args = ap.parse_args(argv)
    try:
        cfg = with_overrides(DemoConfig(progress=False), args.set)
    except ValueError as e:
        ap.error(str(e))
    r = diagnose(args.seed, cfg, Path(args.work))
    print(format_report(r))
    Path(args.work, f"seed{args.seed}", "diagnosis.json").write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
