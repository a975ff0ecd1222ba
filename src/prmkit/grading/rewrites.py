"""Equivalent rewrites of a LaTeX answer, for testing that a grader ignores formatting."""

from __future__ import annotations

import re


def _spaced(answer: str) -> str:
    """Spaces around commas, '+', '=' (never inside a command name)."""
    text = re.sub(r"\s*,(?!\s*(?:\\!)?\s*\d{3}(?!\d))\s*", ", ", answer)
    text = re.sub(r"\s*(?<!\\)([+=])\s*", r" \1 ", text)
    return text.strip()


def _swap_frac(answer: str) -> str:
    if "\\dfrac" in answer:
        return answer.replace("\\dfrac", "\\frac")
    return answer.replace("\\frac", "\\dfrac")


def _left_right(answer: str) -> str:
    text = answer.strip()
    if text[:1] in "([" and text[-1:] in ")]" and "\\left" not in text:
        return "\\left" + text[0] + " " + text[1:-1] + " \\right" + text[-1]
    return "$" + text + "$"


def equivalent_rewrites(answer: str) -> list[str]:
    """Distinct rewrites of `answer` that any fair grader must accept as equal to it.

    Always includes: `\\boxed{}` in a sentence, a PRM800K `# Answer` section, and
    "The answer is $...$."; plus, where they change the text, \\frac <-> \\dfrac, extra
    spacing and `\\left( ... \\right)`.
    """
    candidates = [
        f"Putting it together, the result is $\\boxed{{{answer}}}$.",
        f"We simplify and check the result.\n\n# Answer\n\n{answer}",
        f"The answer is ${answer}$.",
        _swap_frac(answer),
        _spaced(answer),
        _left_right(answer),
    ]
    seen = {answer}
    out = []
    for candidate in candidates:
        if candidate not in seen:
            seen.add(candidate)
            out.append(candidate)
    return out
