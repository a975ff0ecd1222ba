"""Which rules make a benchmark's figure: the benchmark's own evaluation code
("benchmark", the default, so that the figure compares with published ones) or prmkit's
stricter reading ("prmkit"); each benchmark module says where they differ, and every
result records its rules."""

from __future__ import annotations

from prmkit.errors import PrmkitError

RULES = ("benchmark", "prmkit")


def check_rules(rules: str) -> None:
    if rules not in RULES:
        raise PrmkitError(f"unknown rules {rules!r}: expected one of {', '.join(RULES)}")
