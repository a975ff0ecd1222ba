"""Symbolic equivalence on top of math-verify, with an exact check against its false positives.

Runs inside the grading worker process (see `_worker.py`): nothing here has a time limit
of its own; math-verify's signal-based timeouts are switched off.
"""

from __future__ import annotations

import logging

import sympy
from math_verify import parse, verify
from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

logging.getLogger("math_verify").setLevel(logging.CRITICAL)

_EXTRACTION = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
_REL_TOL_DIGITS = 40


def parse_answer(cleaned: str) -> list:
    """math-verify parse of an already extracted answer (wrapped in \\boxed{} for its extractor)."""
    return parse(
        "\\boxed{" + cleaned + "}", extraction_config=_EXTRACTION, parsing_timeout=None
    )


def _exact(expr: sympy.Basic) -> sympy.Basic:
    """Decimal literals as exact rationals, unevaluated calls evaluated (factorials exactly)."""
    expr = expr.replace(lambda x: x.is_Float, lambda x: sympy.Rational(str(x)))
    return expr.doit()


def _numbers_equal(a: sympy.Expr, b: sympy.Expr) -> bool | None:
    """Exact or high-precision relative comparison of two constant expressions; None if unknown."""
    a, b = _exact(a), _exact(b)
    if a.is_Rational and b.is_Rational:
        return bool(a == b)
    if a == b:
        return True
    digits = _REL_TOL_DIGITS + 20
    x, y = a.evalf(digits), b.evalf(digits)
    if not (x.is_number and y.is_number) or x.has(sympy.nan, sympy.zoo, sympy.oo, -sympy.oo):
        return None
    diff = abs(x - y).evalf(digits)
    scale = max(abs(x), abs(y)).evalf(digits)
    if not (diff.is_real and scale.is_real):
        return None
    if diff == 0:
        return True
    return bool(diff <= scale * sympy.Float(10) ** (-_REL_TOL_DIGITS))


def exact_check(gold: object, given: object) -> bool | None:
    """Second opinion on a math-verify 'equal': False when exact arithmetic disagrees.

    Applies to constant expressions and, element by element, to tuples and interval ends;
    None when it does not apply (symbols, sets, matrices, relations).
    """
    if isinstance(gold, sympy.Tuple) and isinstance(given, sympy.Tuple):
        if len(gold) != len(given):
            return None
        verdicts = [exact_check(a, b) for a, b in zip(gold, given)]
        return False if False in verdicts else None
    if isinstance(gold, sympy.Interval) and isinstance(given, sympy.Interval):
        verdicts = [exact_check(gold.start, given.start), exact_check(gold.end, given.end)]
        return False if False in verdicts else None
    if not (isinstance(gold, sympy.Expr) and isinstance(given, sympy.Expr)):
        return None
    if gold.free_symbols or given.free_symbols:
        return None
    if not (gold.is_number and given.is_number):
        return None
    return _numbers_equal(gold, given)


def symbolic_compare(given: str, gold: str) -> tuple[bool | None, str]:
    """(correct, reason) for two cleaned answers; math-verify decides, exact arithmetic vetoes."""
    gold_parsed = parse_answer(gold)
    if not gold_parsed:
        return False, "gold-unparsed"
    given_parsed = parse_answer(given)
    if not given_parsed:
        return False, "given-unparsed"
    if not verify(gold_parsed, given_parsed, timeout_seconds=None):
        return False, "math-verify-unequal"
    verdict = exact_check(gold_parsed[0], given_parsed[0])
    if verdict is False:
        return False, "exact-unequal"
    return True, "math-verify"
