"""Find the final answer in a solution: `# Answer`, last `\\boxed{}`, "the answer is", last line."""

from __future__ import annotations

import re
from collections.abc import Sequence

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_ANSWER_HEADING = re.compile(r"^#+\s*Answer\s*:?\s*$", re.IGNORECASE | re.MULTILINE)
_ANSWER_IS = re.compile(r"(?:final\s+)?answer\s+is\s*:?\s*", re.IGNORECASE)
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")
_BOLD = re.compile(r"^\*\*(.+)\*\*$", re.DOTALL)


def _braced(text: str, start: int) -> tuple[str, int] | None:
    """Content of the brace group opening at text[start] ('{'), and the index after it."""
    depth = 0
    for i in range(start, len(text)):
        ch = text[i]
        if ch == "\\":
            continue
        if ch == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif ch == "}" and (i == 0 or text[i - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` / `\\fbox{...}` (nested braces), or `\\boxed 5`."""
    best = -1
    for command in _BOX_COMMANDS:
        best = max(best, text.rfind(command))
    while best >= 0:
        rest = best + len("\\boxed" if text.startswith("\\boxed", best) else "\\fbox")
        j = rest
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            group = _braced(text, j)
            if group is not None:
                return group[0].strip()
        elif j > rest:  # "\boxed 5": the token up to the next space or '$'
            match = re.match(r"[^\s$]+", text[j:])
            if match:
                return match.group(0).strip()
        # unbalanced or empty: try an earlier box
        best = max(text.rfind(command, 0, best) for command in _BOX_COMMANDS)
    return None


def _strip_math(text: str) -> str:
    text = text.strip()
    text = text.rstrip(".").strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
            text = text[len(left) : len(text) - len(right)].strip()
            break
    text = text.rstrip(".").strip()
    bold = _BOLD.match(text)
    if bold:
        text = bold.group(1).strip()
    return text


def _last_math_segment(line: str) -> str | None:
    """The last `$...$` segment of a line, if it has one."""
    parts = _UNESCAPED_DOLLAR.split(line)
    if len(parts) >= 3:
        segments = [p for k, p in enumerate(parts) if k % 2 == 1 and p.strip()]
        if segments:
            return segments[-1]
    return None


def extract_answer(text_or_steps: str | Sequence[str] | None) -> str | None:
    """The final answer in a solution string or a list of steps; None when there is none.

    Rules, in order: the text after the last PRM800K `# Answer` heading; the last
    `\\boxed{...}` or `\\fbox{...}`; the rest of the sentence after "the answer is";
    the last non-empty line (its last `$...$` segment when it has one).
    """
    if text_or_steps is None:
        return None
    if isinstance(text_or_steps, str):
        text = text_or_steps
    else:
        text = "\n".join(str(step) for step in text_or_steps)
    if not text.strip():
        return None

    headings = list(_ANSWER_HEADING.finditer(text))
    if headings:
        after = text[headings[-1].end() :].strip()
        if after:
            boxed = last_boxed(after)
            return _strip_math(boxed if boxed is not None else after) or None

    boxed = last_boxed(text)
    if boxed is not None:
        return boxed or None

    said = list(_ANSWER_IS.finditer(text))
    if said:
        rest = text[said[-1].end() :].strip()
        line = rest.split("\n", 1)[0]
        segment = _last_math_segment(line)
        if segment is None:
            segment = re.split(r"\.\s|\.$", line, maxsplit=1)[0]
        answer = _strip_math(segment)
        if answer:
            return answer

    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    last = lines[-1].strip()
    segment = _last_math_segment(last)
    return _strip_math(segment if segment is not None else last) or None
