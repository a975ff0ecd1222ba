"""Find the final answer in a solution: `# Answer`, boxes, "the answer is", the last line.

A generated solution must state its answer (a `# Answer` section, a box, "the answer
is"): without one it has no answer (None), so it never votes. The last line counts as
the answer only with `last_line=True`: for bare answers and human-written references.

Several boxes or `$...$` segments joined only by `,` / "and" / "or" form ONE answer and
are returned as a comma-separated list (`\\boxed{1} or \\boxed{2}` -> `1, 2`), so that a
hedged answer is a list and never equals a single value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from prmkit.grading.segments import (
    Span,
    boxes,
    join_boxes,
    join_run,
    math_segments,
    run_ending_at,
    run_starting_at,
)

_ANSWER_HEADING = re.compile(r"^#+\s*Answer\s*:?\s*$", re.IGNORECASE | re.MULTILINE)
# "the answer is", "The final answer to part (a) is", "Final Answer:", "**Final Answer:**",
# and "Answer:" at the start of a line
_ANSWER_IS = re.compile(
    r"(?:\bfinal\s+answer\b\s*\**\s*:"
    r"|\b(?:final\s+)?answer(?:\s+to\s+[^.\n$:]{0,60}?)?\s+(?:is|was|would\s+be)\b"
    r"|^[ \t#*]*answer\s*\**\s*:)\s*:?\s*\**\s*",
    re.IGNORECASE | re.MULTILINE,
)
# In a prose answer ("The largest $n$ is 34"), the value follows the last copula.
_COPULA = re.compile(r"\s(?:is|are|equals|was|would\s+be|will\s+be)\s+", re.IGNORECASE)
_TRAILING_CLAUSE = re.compile(
    r",?\s+(?:which|because|since|as|so|when|where|for|if|and\s+this|I\s+hope)\b.*$",
    re.IGNORECASE | re.DOTALL,
)
# "the answer is correct", "our answer is as follows": a judgement, not an answer
_NOT_AN_ANSWER = re.compile(
    r"^(?:correct|right|wrong|incorrect|not|as\s+follows|below|above|that|the\s+same|"
    r"indeed|clear|obvious|reasonable|valid)\b",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"\.\s|\.$")
_BOLD = re.compile(r"^\*\*(.+)\*\*$", re.DOTALL)


def _last_answer_phrase(text: str) -> re.Match | None:
    """The last "the answer is" / "Final Answer:" (the regex runs only near "answer")."""
    lower = text.lower()
    position = len(text)
    while True:
        i = lower.rfind("answer", 0, position)
        if i < 0:
            return None
        matches = list(_ANSWER_IS.finditer(text, max(0, i - 40), i + 120))
        for match in reversed(matches):
            if match.start() <= i < match.end():
                return match
        position = i


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


def last_boxed(text: str) -> str | None:
    """The last `\\boxed{...}` / `\\fbox{...}` answer, with the boxes joined to it (or None)."""
    found = boxes(text)
    return join_boxes(text, run_ending_at(text, found, len(found) - 1, labels=True)) if found else None


def _masked(text: str, start: int, end: int, segments: list[Span]) -> str:
    """text[start:end] with every math segment replaced by `#` (same length)."""
    chars = list(text[start:end])
    for span in segments:
        if span.end <= start or span.start >= end:
            continue
        for i in range(max(span.start, start), min(span.end, end)):
            chars[i - start] = "#"
    return "".join(chars)


def _line_bounds(text: str, segments: list[Span], start: int, end: int) -> tuple[int, int]:
    """Widen [start, end) so that no math segment (display math over lines) is cut."""
    for span in segments:
        if span.start < start < span.end:
            start = text.rfind("\n", 0, span.start) + 1
        if span.start < end < span.end:
            newline = text.find("\n", span.end)
            end = len(text) if newline < 0 else newline
    return start, end


def _line_answer(text: str, segments: list[Span], start: int, end: int) -> str | None:
    """The answer in one line: its last run of math segments, else the line itself."""
    start, end = _line_bounds(text, segments, start, end)
    inside = [k for k, span in enumerate(segments) if start <= span.start and span.end <= end]
    if inside:
        answer = join_run(run_ending_at(text, segments, inside[-1]))
        if answer:
            return _strip_math(answer) or None
    return _strip_math(text[start:end]) or None


def _first_line(text: str, segments: list[Span], start: int) -> str | None:
    while start < len(text) and text[start].isspace():
        start += 1
    if start >= len(text):
        return None
    newline = text.find("\n", start)
    return _line_answer(text, segments, start, len(text) if newline < 0 else newline)


def _last_line(text: str, segments: list[Span]) -> str | None:
    stripped = text.rstrip()
    start = stripped.rfind("\n") + 1
    return _line_answer(text, segments, start, len(stripped))


def _after_phrase(text: str, segments: list[Span], position: int) -> tuple[str | None, bool]:
    """The answer stated after "the answer is" at `position`; (answer, came from math)."""
    while position < len(text) and text[position] in " \t\n:*":
        position += 1
    for k, span in enumerate(segments):
        if span.start == position:
            answer = join_run(run_starting_at(text, segments, k))
            return (_strip_math(answer) or None) if answer else None, True
        if span.start > position:
            break
    newline = text.find("\n", position)
    end = len(text) if newline < 0 else newline
    start, end = _line_bounds(text, segments, position, end)
    masked = _masked(text, start, end, segments)
    if _NOT_AN_ANSWER.match(masked):
        return None, False
    sentence_end = _SENTENCE_END.search(masked)
    if sentence_end:
        end = start + sentence_end.start()
        masked = masked[: end - start]
    if masked[:1].isalpha():  # prose: "The largest $n$ is 34."
        copulas = list(_COPULA.finditer(masked))
        if copulas:
            return _after_phrase(text, segments, start + copulas[-1].end())
    clause = _TRAILING_CLAUSE.search(masked)
    if clause and clause.start() > 0:
        end = start + clause.start()
    return _line_answer(text, segments, start, end), False


def extract_answer(
    text_or_steps: str | Sequence[str] | None, *, last_line: bool = False
) -> str | None:
    """The final answer in a solution string or a list of steps; None when there is none.

    Rules, in order: the text after the last PRM800K `# Answer` heading; the last
    `\\boxed{...}` (with boxes joined to it by `,`/and/or), unless a "final answer is"
    statement follows it; what follows "the answer is" / "Final Answer:". With
    `last_line=True` (bare answers, human-written text), else the last line (its last run
    of `$...$`, `$$...$$`, `\\[...\\]` segments when it has math); without it a solution
    that states no final answer has none.
    """
    if text_or_steps is None:
        return None
    if isinstance(text_or_steps, str):
        text = text_or_steps
    elif isinstance(text_or_steps, Sequence):
        text = "\n".join(str(step) for step in text_or_steps)
    else:
        raise TypeError(
            f"expected an answer, a solution or a list of steps, got {type(text_or_steps).__name__}"
        )
    if not text.strip():
        return None
    headings = list(_ANSWER_HEADING.finditer(text))
    if headings:
        section = text[headings[-1].end() :]
        if section.strip():
            boxed = last_boxed(section)
            if boxed is not None:
                return _strip_math(boxed) or None
            return _first_line(section, math_segments(section), 0)

    found = boxes(text)
    box_run = run_ending_at(text, found, len(found) - 1, labels=True) if found else []
    said = _last_answer_phrase(text)
    segments = None  # found only when needed: a boxed solution rarely needs them
    if said and (not box_run or said.start() > box_run[-1].end):
        segments = math_segments(text)
        answer, from_math = _after_phrase(text, segments, said.end())
        # a later statement beats an earlier intermediate box only when it is explicit
        if answer and (not box_run or from_math or "final" in said.group(0).lower()):
            return answer
    if box_run:
        return join_boxes(text, box_run)
    if not last_line:
        return None
    return _last_line(text, segments if segments is not None else math_segments(text))
