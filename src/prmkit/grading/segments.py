"""Locate math in a solution: `$...$`, `$$...$$`, `\\(...\\)`, `\\[...\\]` and `\\boxed{...}`.

All scans are linear in the length of the text (a 100 kB solution stays cheap): braces
are matched once with a stack, and a delimiter that has no closer is remembered as such.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BOX = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_OPENER = re.compile(r"(?<!\\)\$\$?|\\\(|\\\[")
_CLOSERS = {"$$": re.compile(r"(?<!\\)\$\$"), "$": re.compile(r"(?<!\\)\$"),
            "\\(": re.compile(r"\\\)"), "\\[": re.compile(r"\\\]")}
# What may stand between the parts of one answer: commas, "and"/"or", math delimiters,
# spacing commands and `\text{ and }` (`$1$ and $2$`, `\boxed{1} \text{ or } \boxed{2}`).
_CONNECTOR = re.compile(
    r"(?:\s|[,;&]|\$|\\[()\[\]]|\\q?quad(?![a-zA-Z])|\\[,;:! ]|\band\b|\bor\b"
    r"|\\(?:text|mbox|textrm)\s*\{\s*(?:and|or|,)?\s*,?\s*\})*",
    re.IGNORECASE,
)
# Between boxes only: short labels before a connector, and optionally a label with `:` /
# `=` after it (`\boxed{1} papers and \boxed{2} bins`, `red: \boxed{3}, blue: \boxed{4}`).
_GAP_MARKUP = re.compile(
    r"\$|\\[()\[\]]|\\q?quad(?![a-zA-Z])|\\[,;:! ]|\\(?:text|mbox|textrm)\s*\{|[{}]"
)
_LABEL = r"(?:(?!(?:and|or)\b)[A-Za-z]+\s+){0,2}(?!(?:and|or)\b)[A-Za-z]+"
_LABELLED_GAP = re.compile(
    rf"\s*{_LABEL}\s*(?:,\s*(?:and\s+|or\s+)?|;\s*|(?:and|or)\s+)(?:{_LABEL}\s*[:=]\s*)?"
    rf"|\s*(?:,\s*|;\s*|(?:and|or)\s+){_LABEL}\s*[:=]\s*",
    re.IGNORECASE,
)
# Words that make a gap a sentence, not a label: "is wrong and", "then", "so".
_NOT_LABELS = frozenset(
    "is are was were be not no but then so thus hence therefore answer final gives give get "
    "gets we which that because since wrong incorrect correct check if equivalently also "
    "alternatively namely simplified simply written expressed ie".split()
)


@dataclass(frozen=True)
class Span:
    """A piece of math: `start`/`end` include its delimiters, `content` does not."""

    start: int
    end: int
    content: str


def matching_braces(text: str, start: int = 0) -> dict[int, int]:
    """Index of each unescaped `{` from `start` on -> index of its matching `}`."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            pairs[stack.pop()] = i
    return pairs


def _box_content(text: str, braces: dict[int, int], opening: int) -> str:
    """Content of the box whose `{` is at `opening`; `\\boxed{\\boxed{5}}` -> `5`."""
    start, end = opening + 1, braces[opening]
    while True:
        while start < end and text[start].isspace():
            start += 1
        last = end - 1
        while last > start and text[last].isspace():
            last -= 1
        inner = _BOX.match(text, start, end)
        if inner is None:
            break
        k = inner.end()
        while k < end and text[k] == " ":
            k += 1
        if k >= end or text[k] != "{" or braces.get(k) != last:
            break
        start, end = k + 1, last
    return text[start:end].strip()


def boxes(text: str) -> list[Span]:
    """Every outermost `\\boxed{...}` / `\\fbox{...}` (and `\\boxed 5`), in order."""
    first = _BOX.search(text)
    if first is None:
        return []
    braces = matching_braces(text, first.start())
    found: list[Span] = []
    position = 0
    while True:
        match = _BOX.search(text, position)
        if match is None:
            return found
        j = match.end()
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{" and j in braces:
            close = braces[j]
            found.append(Span(match.start(), close + 1, _box_content(text, braces, j)))
            position = close + 1
            continue
        if j > match.end():  # "\boxed 5": the token up to the next space or '$'
            token = re.match(r"[^\s$]+", text[j:j + 200])
            if token:
                found.append(Span(match.start(), j + token.end(), token.group(0)))
                position = j + token.end()
                continue
        position = match.end()  # unbalanced or empty: an inner box may still follow


def math_segments(text: str) -> list[Span]:
    """Every `$...$`, `$$...$$`, `\\(...\\)` and `\\[...\\]` segment, in order (not nested)."""
    found: list[Span] = []
    no_closer: set[str] = set()
    position = 0
    while True:
        opener = _OPENER.search(text, position)
        if opener is None:
            return found
        kind = opener.group(0)
        start = opener.end()
        closer = None if kind in no_closer else _CLOSERS[kind].search(text, start)
        if closer is None:
            no_closer.add(kind)
            if kind == "$$":  # an unclosed `$$` may still open an inline `$...$`
                position = opener.start() + 1
                continue
            position = start
            continue
        found.append(Span(opener.start(), closer.end(), text[start : closer.start()].strip()))
        position = closer.end()


def connected(text: str, left: Span, right: Span) -> bool:
    """True when only connectors (`,`, `and`, `or`, delimiters, spacing) separate two spans."""
    if right.start < left.end:
        return False
    gap = text[left.end : right.start]
    return len(gap) <= 200 and _CONNECTOR.fullmatch(gap) is not None


def labelled(text: str, left: Span, right: Span) -> bool:
    """True when two boxes are parts labelled by a few words (`\\boxed{1} papers and`)."""
    if right.start < left.end or right.start - left.end > 80:
        return False
    gap = _GAP_MARKUP.sub(" ", text[left.end : right.start])
    if _LABELLED_GAP.fullmatch(gap) is None:
        return False
    return not any(word.lower() in _NOT_LABELS for word in re.findall(r"[A-Za-z]+", gap))


def run_ending_at(
    text: str, spans: list[Span], last: int, labels: bool = False
) -> list[Span]:
    """spans[last] and the spans before it that are joined to it by connectors only
    (or, with `labels`, by labelled connectors: see `labelled`)."""
    run = [spans[last]]
    k = last
    while k > 0 and (
        connected(text, spans[k - 1], spans[k])
        or (labels and labelled(text, spans[k - 1], spans[k]))
    ):
        k -= 1
        run.insert(0, spans[k])
    return run


def run_starting_at(text: str, spans: list[Span], first: int) -> list[Span]:
    """spans[first] and the spans after it that are joined to it by connectors only."""
    k = first
    while k + 1 < len(spans) and connected(text, spans[k], spans[k + 1]):
        k += 1
    return spans[first : k + 1]


def _left_side(part: str) -> str | None:
    """`x` for `x = 5` (spaces removed); None when the part is not an equation."""
    if "=" not in part:
        return None
    return "".join(part.split("=", 1)[0].split())


def join_boxes(text: str, run: list[Span]) -> str | None:
    """A run of boxes as one answer. Boxes hold answers, so boxed equations are parts
    (`k = 45, n = 2`); parts labelled by words are ordered: `\\boxed{1} papers and
    \\boxed{2} bins` -> `(1, 2)`, never `2, 1` or the set `\\{1, 2\\}`."""
    ordered = any(not connected(text, a, b) for a, b in zip(run, run[1:]))
    parts = [span.content.strip().rstrip(",;").strip() for span in run]
    parts = [part for part in parts if part]
    if not ordered or all(_left_side(part) for part in parts):
        return join_run(run, equations=True)
    return "(" + ", ".join(parts) + ")" if len(parts) > 1 else (parts[0] if parts else None)


def join_run(run: list[Span], equations: bool = False) -> str | None:
    """The parts of one answer as a comma-separated list; repeated parts are kept once.

    Equations with different left sides (`$a = 1$ and $b = 0$`, `$37=37$ and $g(x)=...$`)
    are statements, not a list of values: only the last one is kept, unless `equations`
    (boxed equations are answers: `\\boxed{k = 45} and \\boxed{n = 2}`).
    """
    parts: list[str] = []
    seen: set[str] = set()
    for span in run:
        content = span.content.strip().rstrip(",;").strip()
        key = "".join(content.split())
        if key and key not in seen:
            seen.add(key)
            parts.append(content)
    if not equations and len({_left_side(part) for part in parts}) > 1:
        return parts[-1]
    return ", ".join(parts) or None
