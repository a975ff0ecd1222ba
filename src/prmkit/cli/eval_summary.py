"""The short human summaries `prmkit eval ...` prints by default (`--json`: the metrics)."""

from __future__ import annotations

import math


def pct(value) -> str:
    """A fraction as a percentage; n/a where undefined (None or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{100 * value:.1f}%"


def num(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}f}"


def _by_n(ns, values) -> str:
    return ", ".join(f"N={n} {pct(v)}" for n, v in zip(ns, values))


def bon(result: dict) -> str:
    ns = result["n"]
    lines = [f"best-of-N on {result['problems']} problems ({result['score_key']}, "
             f"{result['estimator']} estimator):",
             f"  best-of-N      {_by_n(ns, result['accuracy'])}"]
    if result["majority"]:
        lines.append(f"  majority vote  {_by_n(ns, result['majority'])}")
    for key, curve in (result.get("curves") or {}).items():
        lines.append(f"  {key}  {_by_n(ns, curve['accuracy'])}")
    lines.append(f"  pass@N         {_by_n(ns, result['pass_at_n'])}")
    return "\n".join(lines)


def processbench(result: dict) -> str:
    lines = []
    for subset, m in result.items():
        if isinstance(m, dict) and "f1" in m:
            lines.append(f"  {subset:<14} F1 {pct(m['f1']):>6}  (erroneous found "
                         f"{pct(m['error_acc'])} of {m['n_error']}, correct kept "
                         f"{pct(m['correct_acc'])} of {m['n_correct']})")
    head = f"ProcessBench average F1 {pct(result['average_f1'])}"
    if result.get("threshold") is not None:
        head += f" at threshold {result['threshold']:.4g} ({result['rules']} rules)"
    if result.get("limit"):
        lim = result["limit"]
        head += f" on {lim['items']} of {lim['of']} items (stratified, seed {lim['seed']})"
    return "\n".join([head + ":", *lines])


def prmbench(result: dict) -> str:
    lines = [f"PRMBench PRMScore {pct(result['prmscore'])} (threshold {result['threshold']}, "
             f"{result['rules']} rules)"]
    lines += [f"  {name:<12} {pct(v)}" for name, v in result["categories"].items()]
    lines += [f"  {name:<22} {pct(m['prmscore'])}" for name, m in result["classes"].items()]
    return "\n".join(lines)


def steps(result: dict) -> str:
    solutions = result.get("n_solutions", result.get("n_examples"))
    return (f"{result['n_steps']} labelled steps in {solutions} solutions: "
            f"AUROC {num(result['auroc'])}, accuracy {pct(result['accuracy'])} at threshold "
            f"{result['threshold']}, ECE {num(result['ece'])}, first-error accuracy "
            f"{pct(result['first_error_accuracy'])}")


def search(result: dict) -> str:
    lines = [f"search results on {result['problems']} problems:"]
    for p in result["points"]:
        lines.append(f"  {p['method']:<32} N={p['n']:<4} {pct(p['accuracy']):>6}  "
                     f"{p['generated_tokens']:,.0f} generated tokens / problem")
    ref = result.get("references")
    if ref:
        lines.append(f"  pass@N         {_by_n(ref['n'], ref['pass_at_n'])}")
        lines.append(f"  majority vote  {_by_n(ref['n'], ref['majority'])}")
    return "\n".join(lines)
