"""Why best-of-N with a reward model rises or falls: cached models and scores per seed.

    prmkit demo --experiment diagnose --seeds 0 --out /tmp/diag [--set reward_steps=500]

Reads (or trains) each seed's backbone, PRM and ORM and their scores of the test pools as
`prmkit demo` does, then compares selections on the same scores: the PRM under each
aggregation, the ORM, majority vote, and two checkers that know the truth (every step, or
arithmetic only). For the pick from each whole pool it reports the number of steps and what
is wrong with it, against the pool; and for each problem where the PRM's pick from the whole
pool is wrong though the pool holds a right solution, why it won (`lost_problems`): the PRM
missed the pick's first wrong step, or doubted a step of every right solution. Writes
diagnosis-seed{s}.json per seed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from prmkit.demo import world
from prmkit.demo.core.config import DemoConfig, quick_config
from prmkit.demo.core.evaluate import seed_test_scores
from prmkit.demo.core.parallel import map_seeds
from prmkit.demo.core.scores import checked_pools, world_clusterer
from prmkit.demo.core.seed import seed_models, seed_world
from prmkit.demo.world.checker import STEP_RE
from prmkit.demo.world.error_kinds import error_kind, pick_indices
from prmkit.demo.world.trees import apply_op
from prmkit.evaluation import bon_curves

Config = DemoConfig
SELECTORS = {**{f"PRM {a}": ("prm", a) for a in ("prod", "min", "last", "mean")},
             "ORM": ("orm", "last")}
TRUTHS = ("true steps", "true arithmetic")


def quick(seeds: tuple[int, ...] = (0, 1, 2)) -> Config:
    """Seconds-long settings (smoke tests), not a result."""
    return quick_config(seeds)


def coarse_kind(prob: world.WorldProblem, steps: list[str], chk: world.StepCheck) -> str:
    """What is wrong with a solution: right, trap (the problem's misreading), slip
    (arithmetic), unjustified (an operand never computed or not the problem's: skipped or
    miscopied), answer (the answer step), or cancel (right answer, wrong step)."""
    if chk.process_correct:
        return "right"
    if prob.trap_answer is not None and chk.answer == prob.trap_answer:
        return "trap"
    if chk.final_correct:
        return "cancel"
    m = STEP_RE.match(steps[chk.first_error])
    if m is None:
        return "answer"
    return "slip" if apply_op(m[2], int(m[1]), int(m[3])) != int(m[4]) else "unjustified"


def arithmetic_ok(steps: list[str]) -> bool:
    """What a calculator can check: every step's arithmetic is exact and the answer is a
    value that a step computed (blind to which numbers and operations the problem needs)."""
    written = set()
    for s in steps[:-1]:
        m = STEP_RE.match(s)
        if m is None or apply_op(m[2], int(m[1]), int(m[3])) != int(m[4]):
            return False
        written.add(str(int(m[4])))
    return bool(steps) and steps[-1].startswith("Answer: ") and steps[-1][8:].strip() in written


def truth_scores(pools, checks, answered, seed: int) -> list[list]:
    """Per truth checker, per problem and solution: 1 where it accepts the solution, 0
    where not, plus a tiny jitter that breaks its ties at random."""
    rng = np.random.default_rng(seed)
    steps_ok, arith_ok = [], []
    for pool, cs, ans in zip(pools, checks, answered):
        jitter = dict(zip(ans, rng.random(len(ans)) * 1e-9))
        steps_ok.append([float(c.first_error < 0) + jitter.get(i, 0.0) for i, c in enumerate(cs)])
        arith_ok.append([float(arithmetic_ok(s)) + jitter.get(i, 0.0) for i, s in enumerate(pool)])
    return [steps_ok, arith_ok]


def diagnose(seed: int, cfg: DemoConfig, work: Path) -> dict:
    sw = seed_world(seed, cfg)
    scores = seed_test_scores(seed_models(seed, cfg, work, sw), sw, progress=False)
    test, pools = sw.splits.test, sw.test_pools
    checks = [world.check_pool(p, pool) for p, pool in zip(test, pools)]
    kinds = [[coarse_kind(p, s, c) for s, c in zip(pool, cs)]
             for p, pool, cs in zip(test, pools, checks)]
    answered = [[i for i, c in enumerate(cs) if c.answer is not None] for cs in checks]
    clusterer = world_clusterer()
    rows = {name: checked_pools(test, pools, scores[model], agg, clusterer, checks)
            for name, (model, agg) in SELECTORS.items()}
    for name, sc in zip(TRUTHS, truth_scores(pools, checks, answered, seed)):
        rows[name] = checked_pools(test, pools, sc, "last", clusterer, checks)
    pool_kind = [ks[i] for ks, ans in zip(kinds, answered) for i in ans]
    pool_len = [len(pool[i]) for pool, ans in zip(pools, answered) for i in ans]
    shares = lambda found: {k: found.count(k) / len(found) for k in sorted(set(pool_kind))}  # noqa: E731
    ns = list(cfg.ns)
    out: dict = {"n": ns, "curves": {}, "picks": {}}
    for name, pp in rows.items():
        curves = bon_curves(pp, ns, estimator="exact", votes=("majority",) if name == "ORM" else (),
                            seed=seed)
        out["curves"][name] = curves.accuracy["best"]
        if name == "ORM":
            out["curves"]["majority"] = curves.accuracy["majority"]
            out["curves"]["pass"] = curves.accuracy["pass"]
        picked = pick_indices([p.scores for p in pp], answered)
        out["picks"][name] = {"steps": float(np.mean([len(pool[k]) for pool, k in zip(pools, picked)])),
                              **shares([ks[k] for ks, k in zip(kinds, picked)])}
    out["picks"]["(pool)"] = {"steps": float(np.mean(pool_len)), **shares(pool_kind)}
    out["first_wrong_step_score"] = first_wrong_step_scores(checks, kinds, answered, scores["prm"])
    prm = rows.get(f"PRM {cfg.aggregation}") or checked_pools(
        test, pools, scores["prm"], cfg.aggregation, clusterer, checks)
    out["lost_problems"] = lost_problems(test, pools, checks, scores["prm"],
                                         [p.scores for p in prm], answered)
    return out


DOUBT = 0.5  # a step the PRM scores below this is one it calls wrong


def lost_problems(problems, pools, checks, step_scores, pool_scores, answered) -> dict:
    """The problems where the PRM's pick from the whole pool is wrong though a right solution
    is there. Each: the pick (steps, step scores, its mistake's kind: `error_kind`), the
    best-scored right solution (steps, step scores), and why the pick won: `missed` (the
    pick's first wrong step scored >= DOUBT: the error went unseen), `doubted` (the best
    right solution's weakest step scored < DOUBT: a right step called wrong), both, or
    neither (every score close). Counts per reason and per kind of the picks' mistakes.
    pool_scores: per problem, the aggregated score of each answered solution (`answered`
    holds their indices into the pool), as the pick was made."""
    lost = []
    for prob, pool, cs, ps, agg, ans in zip(problems, pools, checks, step_scores, pool_scores,
                                            answered):
        if not ans:
            continue
        k = pick_indices([agg], [ans])[0]
        right = [i for i in ans if cs[i].process_correct]
        if cs[k].process_correct or not right:
            continue
        rank = dict(zip(ans, agg))
        best = max(right, key=lambda i: -np.inf if np.isnan(rank[i]) else rank[i])
        fe = cs[k].first_error
        wrong_step = ps[k][fe] if 0 <= fe < len(ps[k]) else None
        weakest = min((v for v in ps[best] if v is not None), default=None)
        missed = wrong_step is not None and wrong_step >= DOUBT
        doubted = weakest is not None and weakest < DOUBT
        lost.append({"problem": prob.text, "kind": prob.kind, "level": prob.level,
                     "pick": {"steps": pool[k], "scores": ps[k],
                              "error": error_kind(prob, pool[k], cs[k])},
                     "best_right": {"steps": pool[best], "scores": ps[best]},
                     "why": {(True, True): "both", (True, False): "missed",
                             (False, True): "doubted"}.get((missed, doubted), "neither")})
    reasons = ("missed", "doubted", "both", "neither")
    errors = sorted({e["pick"]["error"] for e in lost})
    return {"problems": lost, "count": len(lost),
            "why": {r: sum(e["why"] == r for e in lost) for r in reasons},
            "pick_errors": {k: sum(e["pick"]["error"] == k for e in lost) for k in errors}}


def first_wrong_step_scores(checks, kinds, answered, prm) -> dict:
    """PRM score of each solution's first wrong step, by error kind (right: every step of
    right solutions): [mean, count]."""
    by_kind: dict[str, list[float]] = {}
    for cs, ks, ans, ps in zip(checks, kinds, answered, prm):
        for i in ans:
            j = cs[i].first_error
            if j >= 0 and ps[i][j] is not None:
                by_kind.setdefault(ks[i], []).append(ps[i][j])
            elif j < 0:
                by_kind.setdefault("right", []).extend(p for p in ps[i] if p is not None)
    return {k: [float(np.mean(v)), len(v)] for k, v in sorted(by_kind.items())}


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
    lost = r["lost_problems"]
    lines.append(f"PRM's whole-pool pick wrong, a right solution there: {lost['count']} problems; "
                 + ", ".join(f"{k} {v}" for k, v in lost["why"].items())
                 + f" (missed: its first wrong step scored >= {DOUBT}; doubted: a step of the "
                 f"best right solution scored < {DOUBT}); the picks' mistakes: "
                 + ", ".join(f"{k} {v}" for k, v in lost["pick_errors"].items()))
    for e in lost["problems"]:
        pick, right = e["pick"], e["best_right"]
        lines.append(f"  [{e['why']}, {e['pick']['error']}] {e['problem']}")
        for label, sol in (("pick", pick), ("right", right)):
            shown = "  ".join(f"{st} ({'-' if v is None else f'{v:.2f}'})"
                              for st, v in zip(sol["steps"], sol["scores"]))
            lines.append(f"    {label:<5} {shown}")
    return "\n".join(lines)


def run(cfg: Config, out: str | Path, work: str | Path) -> dict:
    """Every seed's diagnosis, printed and written to out/diagnosis-seed{s}.json."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    per_seed = map_seeds(diagnose, cfg, Path(work),
                         line=lambda s, r: f"[diagnose] seed {s}\n{format_report(r)}")
    results = dict(zip(cfg.seeds, per_seed))
    for seed, r in results.items():
        (out / f"diagnosis-seed{seed}.json").write_text(json.dumps(r, indent=1))
    return results
