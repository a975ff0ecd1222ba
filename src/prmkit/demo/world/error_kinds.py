"""What kind of mistake a sampled solution makes, and how well a reward model sees each kind.

Kinds follow the solver's mistakes (docs/demo-world.md), read from the text with the
checker's verdict, never from the solver's bookkeeping:

- trap: the problem's systematic misreading: the answer is the trap answer, or the first
  wrong step is an operation of the trap's tree;
- cancel: errors that cancel: a slipped or miscopied value, yet the right final answer;
- slip: the first wrong step's arithmetic is not exact (and the answer is wrong);
- skip: exact arithmetic on the true value of a sub-computation that no step wrote (a
  step done in the head);
- miscopy: exact arithmetic on any other operand that the problem does not justify (a
  miscopied quantity: another number of the problem, swapped digits, off by one or two);
- other: a wrong step that is not a computation (e.g. an answer no step wrote);
- right: every step right.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from prmkit.demo.world.checker import STEP_RE, check_solution, per_distinct
from prmkit.demo.world.problems import FORMS
from prmkit.demo.world.trees import apply_op
from prmkit.evaluation import auroc
from prmkit.scoring.aggregate import fill_null_steps

KINDS = ("slip", "miscopy", "skip", "trap", "cancel")

def _tree_ops(tree) -> set[tuple[str, int, int]]:
    ops = set()
    for j, n in enumerate(tree.nodes):
        a, b = tree.operands(j)
        ops.add((n.op, a, b))
        if n.op in "+*":
            ops.add((n.op, b, a))
    return ops


def error_kind(problem, steps, check=None) -> str:
    """The kind of a solution's mistake (module docstring), `right` when it has none."""
    chk = check or check_solution(problem, steps)
    if chk.process_correct:
        return "right"
    bad = steps[chk.first_error] if 0 <= chk.first_error < len(steps) else ""
    m = STEP_RE.match(bad)
    step = (m[2], int(m[1]), int(m[3])) if m else None
    exact = step is not None and apply_op(*step) == int(m[4])
    if problem.trap is not None and (chk.answer == problem.trap_answer
                                     or (exact and step in _tree_ops(problem.trap))):
        return "trap"
    if step is None:
        return "other"
    if not exact:
        return "cancel" if chk.final_correct else "slip"
    written = set()
    for s in steps[: chk.first_error]:
        w = STEP_RE.match(s)
        if w:
            written.add(int(w[4]))
    quantities = set(problem.quantities)
    inner = {v for v in problem.tree.values[:-1] if v not in quantities and v not in written}
    if {step[1], step[2]} & inner:
        return "skip"  # right in the head or not, the step itself is what was skipped
    return "cancel" if chk.final_correct else "miscopy"


def _checked_kind(problem, steps) -> tuple:
    chk = check_solution(problem, steps)
    return chk, error_kind(problem, steps, chk)


def kind_report(problems, pools, step_scores, picks) -> dict:
    """Per error kind: the step AUROC of right steps against the first wrong step of
    solutions of that kind (steps up to the first error, a null score filled as the
    demo's solution scores fill it), and the share of `picks` (one index per problem into
    its pool, e.g. the best-of-N pick from the whole pool) of each kind.

    step_scores: per problem, per solution, per step probability of being right.
    The same per problem form (`WorldProblem.form`: word, equation, two-sided), right steps
    of that form against its first wrong steps: `step_auroc_by_form`, `wrong_steps_by_form`
    (forms the problems hold), where a pooled figure can hide a form the scores miss.
    """
    right: dict[str, list[float]] = {}
    wrong: dict[str, dict[str, list[float]]] = {}
    picked: dict[str, int] = {k: 0 for k in ("right", *KINDS, "other")}
    pool_kinds: dict[str, int] = dict.fromkeys(picked, 0)
    for prob, pool, scores, pick in zip(problems, pools, step_scores, picks):
        form_right = right.setdefault(prob.form, [])
        form_wrong = wrong.setdefault(prob.form, {k: [] for k in (*KINDS, "other")})
        verdicts = per_distinct(partial(_checked_kind, prob), pool)
        for k, (probs, (chk, kind)) in enumerate(zip(scores, verdicts)):
            pool_kinds[kind] += 1
            if k == pick:
                picked[kind] += 1
            filled = fill_null_steps(probs)
            form_right.extend(filled[: chk.first_error] if chk.first_error >= 0 else filled)
            if 0 <= chk.first_error < len(filled):
                form_wrong[kind].append(filled[chk.first_error])
    every_right = [v for form in right.values() for v in form]
    every_wrong = {k: [v for form in wrong.values() for v in form[k]] for k in KINDS}
    forms = [f for f in FORMS if f in right]
    n_picks = max(sum(picked.values()), 1)
    n_pool = max(sum(pool_kinds.values()), 1)
    return {"step_auroc": _kind_aurocs(every_right, every_wrong),
            "wrong_steps": {k: len(every_wrong[k]) for k in KINDS},
            "picks": {k: v / n_picks for k, v in picked.items()},
            "pool": {k: v / n_pool for k, v in pool_kinds.items()},
            "step_auroc_by_form": {f: _kind_aurocs(right[f], wrong[f]) for f in forms},
            "wrong_steps_by_form": {f: {k: len(wrong[f][k]) for k in KINDS} for f in forms}}


def _kind_aurocs(right: list[float], wrong: dict[str, list[float]]) -> dict:
    """Per kind, the AUROC of right steps against that kind's first wrong steps (None
    where either side is empty)."""
    out = {}
    for kind in KINDS:
        value = auroc(right + wrong[kind], [1] * len(right) + [0] * len(wrong[kind]))
        out[kind] = None if math.isnan(value) else value
    return out


def pick_indices(pool_scores, answered) -> list[int]:
    """Index into each full pool of the highest-scored answered solution."""
    return [int(ans[int(np.argmax(sc))]) for sc, ans in zip(pool_scores, answered)]


def summarise_kinds(per_seed: list[dict]) -> dict:
    """Per error kind, means over seeds: step AUROC of the PRM and the ORM (seeds where the
    kind occurs), share of the pool and of each model's best-of-N picks."""
    out: dict = {}
    for kind in (*KINDS, "right", "other"):
        row: dict = {}
        for model in ("prm", "orm"):
            reports = [r["error_kinds"][model] for r in per_seed if "error_kinds" in r]
            if kind in KINDS:
                vals = [x["step_auroc"][kind] for x in reports if x["step_auroc"][kind] is not None]
                row[f"{model}_step_auroc"] = float(np.mean(vals)) if vals else None
                row[f"{model}_step_auroc_std"] = float(np.std(vals)) if vals else None
            row[f"{model}_picks"] = float(np.mean([x["picks"][kind] for x in reports])) \
                if reports else None
        pools = [r["error_kinds"]["prm"]["pool"][kind] for r in per_seed if "error_kinds" in r]
        row["pool"] = float(np.mean(pools)) if pools else None
        out[kind] = row
    return out


def summarise_forms(per_seed: list[dict]) -> dict:
    """Per problem form and error kind, means over seeds (where the form holds the kind) of
    the PRM's and the ORM's step AUROC, with the number of first wrong steps they rest on."""
    out: dict = {}
    for form in FORMS:
        row: dict = {}
        for kind in KINDS:
            cell: dict = {}
            for model in ("prm", "orm"):
                reports = [r["error_kinds"][model] for r in per_seed
                           if form in r.get("error_kinds", {}).get(model, {})
                           .get("step_auroc_by_form", {})]
                vals = [x["step_auroc_by_form"][form][kind] for x in reports
                        if x["step_auroc_by_form"][form][kind] is not None]
                cell[f"{model}_step_auroc"] = float(np.mean(vals)) if vals else None
                cell[f"{model}_step_auroc_min"] = float(np.min(vals)) if vals else None
                if model == "prm":
                    cell["wrong_steps"] = int(sum(x["wrong_steps_by_form"][form][kind]
                                                  for x in reports))
            row[kind] = cell
        if any(c["wrong_steps"] for c in row.values()):
            out[form] = row
    return out


def forms_table(forms: dict) -> dict:
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    return {"columns": ["problem form", *(f"PRM {k} (lowest seed)" for k in KINDS)],
            "rows": [[form, *(f"{fmt(c['prm_step_auroc'])} ({fmt(c['prm_step_auroc_min'])})"
                              for c in row.values())] for form, row in forms.items()]}


def weakest_form_kind(forms: dict) -> tuple[str, str, float] | None:
    """(form, kind, mean PRM step AUROC) of the lowest cell, None when there is none."""
    cells = [(c["prm_step_auroc"], form, kind) for form, row in forms.items()
             for kind, c in row.items() if c["prm_step_auroc"] is not None]
    if not cells:
        return None
    value, form, kind = min(cells)
    return form, kind, value


def kinds_table(kinds: dict) -> dict:
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    return {"columns": ["kind of first error", "PRM step AUROC", "ORM step AUROC",
                        "share of pool", "share of PRM picks", "share of ORM picks"],
            "rows": [[k, fmt(r.get("prm_step_auroc")), fmt(r.get("orm_step_auroc")),
                      pct(r["pool"]), pct(r["prm_picks"]), pct(r["orm_picks"])]
                     for k, r in kinds.items()]}
