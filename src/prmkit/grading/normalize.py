"""MATH-style answer normalisation: cheap string rewrites done before any sympy work.

`clean_answer` keeps a LaTeX string that still parses (spaces between words kept);
`answer_key` is the aggressive canonical form used for the exact-match fast path.
All regexes here are linear-time so 100 kB inputs stay cheap.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

_SPACING_COMMANDS = re.compile(r"\\[!,;:> ]|\\q?quad\b|\\displaystyle\b|\\hspace\{[^{}]*\}")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|bigg|Bigg|big|Big)(?![a-zA-Z])\s*(\.(?![0-9]))?")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ\b|\\degree\b|°")
_TEXT_CMD = re.compile(r"\\(?:mbox|textbf|textit|textrm|mathrm|mathbf|operatorname)\s*\{")
_FRAC_SHORT = re.compile(r"\\frac\s*(\d|[a-zA-Z]|\{[^{}]*\})\s*(\d|[a-zA-Z]|\{[^{}]*\})")
_SQRT_SHORT = re.compile(r"\\sqrt\s*(\d+|[a-zA-Z])(?![a-zA-Z])")
_UNIT_WORDS = (
    "cm|mm|km|m|meters?|metres?|inches|inch|in|feet|foot|ft|yards?|miles?|mph|units?|"
    "degrees?|cents?|dollars?|seconds?|minutes?|hours?|days?|weeks?|years?|sq|square|"
    "cubic|pounds?|lbs?|ounces?|oz|grams?|g|kg|liters?|litres?|ml|mL|people|students?|"
    "marbles|ways|points?|calories|gallons?|cups?|pages?|boxes|coins|trees|bananas|apples|"
    r"percent(?:age)?s?|pct|per\s*cent"
)
_TRAILING_TEXT_UNIT = re.compile(
    r"(?<=\S)\s*\\text\{\s*(?:(?:" + _UNIT_WORDS + r")\b[\s.a-zA-Z]*)\}(?:\s*\^\s*\{?[23]\}?)?\s*$"
)
_TRAILING_BARE_UNIT = re.compile(
    r"(?<=[\d}])\s+(?:(?:" + _UNIT_WORDS + r")(?:\s+(?:" + _UNIT_WORDS + r"))*)"
    r"(?:\s*\^\s*\{?[23]\}?)?\s*$"
)
_TEXT_WHOLE = re.compile(r"^\\text\s*\{(.*)\}$", re.DOTALL)
_CHOICE = re.compile(r"^\(?\s*([A-E])\s*\)?$")
_ASSIGN = re.compile(r"^\s*[a-zA-Z](?:_\{?\w+\}?)?\s*(?:=|\\in\b)\s*")
# Digit grouping: `12,345` (no space after the comma, first group not 0) or `,\!` / `{,}`.
# `5, 125` and `0,111` are lists, never numbers.
_THOUSANDS = re.compile(r"^[-+]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?$")
_GROUPING_COMMA = re.compile(r"\{,\}|\\\{,\\\}|,\s*\\!\s*(?=\d)")
# "1 or 2", "1 \text{ and } 2", "either 1 or 2": one answer listing several values.
_TEXT_CONNECTOR = re.compile(
    r"(?<![\s,])\s*,?\s*\\text\s*\{\s*,?\s*(?:and|or)\s*\}\s*", re.IGNORECASE
)
# `-12;-11;-10`: a semicolon separates the values of a list (never a decimal mark).
_SEMICOLON = re.compile(r"\s*;\s*")
_MATH_AHEAD = r"(?=[-+\d\\({\[]|[a-zA-Z]\s*=)"
_WORD_CONNECTOR = re.compile(r"(?<=[\d})\]])(?:\s*,)?\s+(?:and|or)\s+" + _MATH_AHEAD, re.IGNORECASE)
_EITHER = re.compile(r"^(?:either|both)\s+" + _MATH_AHEAD, re.IGNORECASE)
_LEAD_DOT = re.compile(r"(?<![\d}a-zA-Z])\.(\d)")
_SIMPLE_SLASH = re.compile(r"^(-?)(\d+)\s*/\s*(\d+)$")
_CMD_SPACE = re.compile(r"(\\[a-zA-Z]+) +(?=[a-zA-Z])")
_WHITESPACE = re.compile(r"\s+")
_DECIMAL = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)$")
_REPEATING = re.compile(r"^(-?)(\d*)\.(\d*)\\overline\{(\d+)\}$")
_TEXT_ANSWER = re.compile(r"^[A-Za-z][A-Za-z' \-]*[A-Za-z]$")
_LABELLED_PART = re.compile(r"^([a-zA-Z](?:_\{?\w+\}?)?)\s*=\s*([^=]+)$")


def _unwrap_group(text: str, prefix: str) -> str | None:
    """`prefix{...}` spanning the whole string -> its content (balanced braces), else None."""
    if not text.startswith(prefix + "{") or not text.endswith("}"):
        return None
    depth = 0
    for i in range(len(prefix), len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0 and i != len(text) - 1:
                return None
    return text[len(prefix) + 1 : -1]


def _strip_wrappers(text: str) -> str:
    text = text.strip()
    changed = True
    while changed and text:
        changed = False
        for prefix in ("\\boxed", "\\fbox", ""):  # "": a bare group `{1,2,3}` prints as 1,2,3
            inner = _unwrap_group(text, prefix)
            if inner is not None:
                text, changed = inner.strip(), True
        for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
            if len(text) > len(left) + len(right) and text.startswith(left) and text.endswith(right):
                text, changed = text[len(left) : -len(right)].strip(), True
        if text.endswith(".") and not text.endswith(".."):
            text, changed = text[:-1].strip(), True
    return text


def clean_answer(answer: str) -> str:
    """Normalise a final answer but keep it parseable LaTeX.

    Handles \\dfrac/\\tfrac, \\left/\\right, spacing commands, degrees, dollars, percent,
    thousands separators, trailing units, `x = ...` / `x \\in ...`, multiple-choice letters,
    short fractions (`\\frac12`) and whole-answer `\\text{...}`.
    """
    text = _strip_wrappers(answer.replace("\n", " "))
    text = _GROUPING_COMMA.sub(",", text)
    text = _SPACING_COMMANDS.sub(" ", text)
    text = _SEMICOLON.sub(", ", text.strip().strip(";"))
    text = text.replace("~", " ")
    text = re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", text)
    text = _LEFT_RIGHT.sub("", text)
    text = _TEXT_CMD.sub(r"\\text{", text)
    text = _TEXT_CONNECTOR.sub(", ", text)
    text = _EITHER.sub("", _WORD_CONNECTOR.sub(", ", text.strip()))
    text = _DEGREES.sub("", text)
    text = text.replace("\\$", "").replace("$", "")
    text = text.replace("\\%", "").replace("%", "")
    text = re.sub(r"\\(?:le|leqslant)(?![a-zA-Z])", r"\\leq", text)
    text = re.sub(r"\\(?:ge|geqslant)(?![a-zA-Z])", r"\\geq", text)
    text = re.sub(r"\\ne(?![a-zA-Z])", r"\\neq", text)
    text = text.strip()
    for _ in range(2):
        text = _TRAILING_TEXT_UNIT.sub("", text).strip()
        text = _TRAILING_BARE_UNIT.sub("", text).strip()
    whole_text = _unwrap_group(text, "\\text")
    if whole_text is not None:
        text = whole_text.strip()
    choice = _CHOICE.match(text)
    if choice:
        return choice.group(1)
    if text.count("=") == 1 or (text.count("=") == 0 and "\\in" in text):
        text = _ASSIGN.sub("", text, count=1)
    text = _FRAC_SHORT.sub(lambda m: f"\\frac{_brace(m.group(1))}{_brace(m.group(2))}", text)
    text = _SQRT_SHORT.sub(r"\\sqrt{\1}", text)
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    text = _LEAD_DOT.sub(r"0.\1", text)
    text = _repeating_decimal(text.replace(" ", "")) or text
    text = _strip_wrappers(text)
    return _WHITESPACE.sub(" ", text).strip()


def _repeating_decimal(text: str) -> str | None:
    """`0.1\\overline{6}` -> `\\frac{1}{6}` (exact value of a repeating decimal)."""
    match = _REPEATING.match(text)
    if not match:
        return None
    sign, whole, fixed, period = match.groups()
    value = Fraction(int(whole or "0")) + Fraction(int(fixed or "0"), 10 ** len(fixed))
    value += Fraction(int(period), (10 ** len(period) - 1) * 10 ** len(fixed))
    body = f"\\frac{{{value.numerator}}}{{{value.denominator}}}" if value.denominator != 1 else str(value.numerator)
    return sign + body


def _brace(group: str) -> str:
    return group if group.startswith("{") else "{" + group + "}"


def answer_key(answer: str, cleaned: bool = False) -> str:
    """Canonical string for the exact-match fast path (no sympy)."""
    text = answer if cleaned else clean_answer(answer)
    if is_text_answer(text):
        return " ".join(text.lower().replace("-", " ").split())
    text = _CMD_SPACE.sub(r"\1{}", text)
    text = text.replace(" ", "")
    slash = _SIMPLE_SLASH.match(text)
    if slash:
        text = f"{slash.group(1)}\\frac{{{slash.group(2)}}}{{{slash.group(3)}}}"
    if _DECIMAL.match(text):
        try:
            number = Decimal(text)
        except InvalidOperation:
            return text
        text = format(number.normalize(), "f") if number == number.to_integral() else str(number)
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        if text in ("-0", "+0"):
            text = "0"
        text = text.lstrip("+")
    return text


def is_text_answer(cleaned: str) -> bool:
    """A word answer ("Monday", "even", "Navin"): compared as text, never symbolically."""
    letters = sum(ch.isalpha() for ch in cleaned)
    return bool(_TEXT_ANSWER.match(cleaned)) and letters >= 4 and not cleaned.startswith("\\")


def choice_letter(cleaned: str) -> str | None:
    """The letter of a multiple-choice answer, ("(B)", "\\text{(B)}", "B" -> "B")."""
    return cleaned if len(cleaned) == 1 and cleaned in "ABCDE" else None


def bracket_kind(cleaned: str) -> str:
    """'set' for `\\{...\\}`, 'seq' for (...)/[...] with a top-level comma, else 'plain'."""
    text = cleaned.replace(" ", "")
    if text.startswith("\\{") and text.endswith("\\}"):
        return "set"
    if text[:1] in "([" and text[-1:] in ")]" and "," in text:
        return "seq"
    return "plain"


def top_level_items(cleaned: str) -> list[str]:
    """`cleaned` split at commas outside (), [], {} and `\\{ \\}`: `(1,2), 3` -> 2 items."""
    items, depth, current = [], 0, []
    for ch in cleaned:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    items.append("".join(current).strip())
    return items


def list_size(cleaned: str) -> int | None:
    """How many values an answer lists: 1 for a number, n for `a, b, ...` or `\\{a, b\\}`.

    None for a single tuple or interval (`(1, 2)`, `[0, 1)`), whose commas are not a list.
    """
    items = top_level_items(cleaned)
    if len(items) > 1:
        return len(items)
    kind = bracket_kind(cleaned)
    if kind == "set":
        inner = cleaned.replace(" ", "")[2:-2]
        return len(top_level_items(inner)) if inner else 0
    return None if kind == "seq" else 1


def _whole_parentheses(text: str) -> bool:
    """True when `text` is one `( ... )` group (`(1, 2)`, not `(1), (2)`)."""
    if not (text.startswith("(") and text.endswith(")")):
        return False
    depth = 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i != len(text) - 1:
            return False
    return True


def labelled_values(cleaned: str) -> list[str] | None:
    """The values of parts labelled by distinct names (`k = 45, n = 2` -> `45`, `2`), else None."""
    matches = [_LABELLED_PART.match(item) for item in top_level_items(cleaned)]
    if len(matches) < 2 or not all(matches):
        return None
    if len({m.group(1).replace(" ", "") for m in matches}) != len(matches):
        return None  # `x = 1, x = 2`: solutions of one unknown, a plain list
    return [m.group(2).strip() for m in matches]


def bare_values(cleaned: str) -> list[str] | None:
    """The values of an unlabelled list or tuple (`45, 2`, `(45, 2)`), else None."""
    text = cleaned.strip()
    if "=" in text:
        return None
    if _whole_parentheses(text):
        text = text[1:-1]
    items = top_level_items(text)
    return items if len(items) > 1 and all(items) else None
