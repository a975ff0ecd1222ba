"""Answer grading: extraction, cheap normalised checks in-process, sympy work in a worker.

Decision order (the `reason` of a Grade names the rule that decided):
  no-gold / no-answer / too-long   nothing (or too much) to compare
  exact                            same text up to spacing, or normalised strings equal
  choice-mismatch, text-mismatch   multiple-choice letters / word answers differ
  bracket-mismatch                 a set `\\{..\\}` against a tuple or interval
  list-mismatch / parts-equal      a list against one value: False unless every part of
                                   the list equals that value (`15\\frac{39}{40}, \\frac{639}{40}`);
                                   labelled parts (`k = 45, n = 2`) against bare values
                                   (`45, 2`): part by part, in the labels' order
  rational-equal/-unequal          both plain numbers: exact fraction arithmetic
  math-verify / math-verify-unequal / exact-unequal / *-unparsed
                                   symbolic comparison in the worker; exact arithmetic
                                   vetoes math-verify's approximate numeric matches
  timeout                          the worker passed the time limit: correct is None
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from fractions import Fraction

from tqdm.auto import tqdm

from prmkit.grading.extract import extract_answer
from prmkit.grading.normalize import (
    answer_key,
    bare_values,
    bracket_kind,
    choice_letter,
    clean_answer,
    is_text_answer,
    labelled_values,
    list_size,
    top_level_items,
)
from prmkit.grading.pool import WorkerPool, default_pool

DEFAULT_TIMEOUT_S = 5.0
MAX_ANSWER_CHARS = 5000
MAX_PARTS = 8
UNDECIDED_REASONS = ("timeout", "worker-crashed", "memory-limit", "recursion-limit", "too-long")

_FRACTION = re.compile(r"^(-?)\\frac\{(\d+)\}\{(\d+)\}$")
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")


@dataclass(frozen=True)
class Grade:
    """Verdict for one (given, gold) pair, with the audit trail that produced it."""

    correct: bool | None
    reason: str
    given_extracted: str | None
    gold_extracted: str | None
    given_normalised: str | None = None
    gold_normalised: str | None = None

    def explain(self) -> dict:
        """The audit trail as a plain dict (extracted answers, normalised forms, rule)."""
        return asdict(self)


class _LRU:
    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        return None

    def put(self, key, value) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_symbolic_cache = _LRU(200_000)


def clear_cache() -> None:
    """Forget cached symbolic verdicts."""
    _symbolic_cache.clear()


def _as_fraction(key: str) -> Fraction | None:
    if _NUMBER.match(key):
        return Fraction(key)
    match = _FRACTION.match(key)
    if match and int(match.group(3)) != 0:
        value = Fraction(int(match.group(2)), int(match.group(3)))
        return -value if match.group(1) else value
    return None


def _same_text(given: str, gold: str) -> bool:
    """Identical up to spacing (`58, 500` and `58,500` are one way of writing the answer)."""
    return "".join(given.split()) == "".join(gold.split())


def _list_sizes_differ(gold: str, given: str) -> bool:
    """True when one answer lists more values than the other: a list is never a number."""
    if any(sign in text for sign in ("\\pm", "\\mp") for text in (gold, given)):
        return False  # `\\pm 2` stands for two values: math-verify decides
    gold_size, given_size = list_size(gold), list_size(given)
    return bool(gold_size and given_size and gold_size != given_size)


@dataclass
class _Prepared:
    """A pair after the in-process rules; `grade` is set when they decided it."""

    given_extracted: str | None
    gold_extracted: str | None
    given_clean: str | None = None
    gold_clean: str | None = None
    grade: Grade | None = None
    parts: list[_Prepared] | None = None  # a list given against one value, part by part

    @property
    def key(self) -> tuple[str | None, str | None]:
        return (self.gold_clean, self.given_clean)

    def decide(self, correct: bool | None, reason: str) -> Grade:
        return Grade(
            correct,
            reason,
            self.given_extracted,
            self.gold_extracted,
            self.given_clean,
            self.gold_clean,
        )


def _prepare(
    given: str | Sequence[str] | None, gold: str | None, max_chars: int, last_line: bool = True
) -> _Prepared:
    gold_extracted = extract_answer(gold, last_line=True) if gold is not None else None
    given_extracted = extract_answer(given, last_line=last_line)
    prepared = _Prepared(given_extracted, gold_extracted)
    if gold_extracted is None:
        prepared.grade = prepared.decide(None, "no-gold")
        return prepared
    if given_extracted is None:
        prepared.grade = prepared.decide(False, "no-answer")
        return prepared
    if len(given_extracted) > max_chars or len(gold_extracted) > max_chars:
        prepared.grade = prepared.decide(None, "too-long")
        return prepared
    prepared.gold_clean = clean_answer(gold_extracted)
    prepared.given_clean = clean_answer(given_extracted)
    gold_key = answer_key(prepared.gold_clean, cleaned=True)
    given_key = answer_key(prepared.given_clean, cleaned=True)
    if gold_key == given_key or _same_text(given_extracted, gold_extracted):
        prepared.grade = prepared.decide(True, "exact")
    elif choice_letter(prepared.gold_clean) or choice_letter(prepared.given_clean):
        prepared.grade = prepared.decide(False, "choice-mismatch")
    elif is_text_answer(prepared.gold_clean) or is_text_answer(prepared.given_clean):
        prepared.grade = prepared.decide(False, "text-mismatch")
    elif {bracket_kind(prepared.gold_clean), bracket_kind(prepared.given_clean)} == {"set", "seq"}:
        prepared.grade = prepared.decide(False, "bracket-mismatch")
    elif (pairs := _in_order(prepared.gold_clean, prepared.given_clean)) is not None:
        _prepare_pairs(prepared, pairs, max_chars)
    elif _list_sizes_differ(prepared.gold_clean, prepared.given_clean):
        _prepare_parts(prepared, max_chars)
    else:
        gold_value, given_value = _as_fraction(gold_key), _as_fraction(given_key)
        if gold_value is not None and given_value is not None:
            equal = gold_value == given_value
            prepared.grade = prepared.decide(equal, "rational-equal" if equal else "rational-unequal")
    return prepared


def _in_order(gold: str, given: str) -> list[tuple[str, str]] | None:
    """(given, gold) value pairs when one side labels its parts (`k = 45, n = 2`) and the
    other gives bare values (`45, 2`): the labels fix the order, so `2, 45` is wrong."""
    gold_labelled, given_labelled = labelled_values(gold), labelled_values(given)
    if (gold_labelled is None) == (given_labelled is None):
        return None
    labelled = gold_labelled or given_labelled
    bare = bare_values(given if gold_labelled else gold)
    if bare is None or len(bare) != len(labelled):
        return None
    return list(zip(bare, labelled)) if gold_labelled else list(zip(labelled, bare))


def _prepare_parts(prepared: _Prepared, max_chars: int) -> None:
    """A list given against a single value is right only if every part equals that value."""
    items = top_level_items(prepared.given_clean or "")
    if list_size(prepared.gold_clean or "") != 1 or not 1 < len(items) <= MAX_PARTS:
        prepared.grade = prepared.decide(False, "list-mismatch")
        return
    _prepare_pairs(prepared, [(item, prepared.gold_extracted) for item in items], max_chars)


def _prepare_pairs(prepared: _Prepared, pairs: list[tuple[str, str]], max_chars: int) -> None:
    """Right only if every (given part, gold part) pair is equal."""
    if len(pairs) > MAX_PARTS:
        prepared.grade = prepared.decide(False, "list-mismatch")
        return
    prepared.parts = [_prepare(given, gold, max_chars) for given, gold in pairs]
    if any(part.grade is not None and part.grade.correct is False for part in prepared.parts):
        prepared.grade = prepared.decide(False, "list-mismatch")
    elif all(part.grade is not None and part.grade.correct for part in prepared.parts):
        prepared.grade = prepared.decide(True, "parts-equal")


def _symbolic_units(prepared: _Prepared) -> list[_Prepared]:
    """The comparisons still to be done by the worker for this pair."""
    if prepared.grade is not None:
        return []
    if prepared.parts is None:
        return [prepared]
    return [part for part in prepared.parts if part.grade is None]


def _finish(prepared: _Prepared, verdicts: dict) -> Grade:
    """The Grade of a pair once the worker's verdicts for its comparisons are known."""
    if prepared.grade is not None:
        return prepared.grade
    if prepared.parts is None:
        return prepared.decide(*verdicts[prepared.key])
    results = [
        (part.grade.correct, part.grade.reason) if part.grade else verdicts[part.key]
        for part in prepared.parts
    ]
    if any(correct is False for correct, _ in results):
        return prepared.decide(False, "list-mismatch")
    undecided = [reason for correct, reason in results if correct is None]
    return prepared.decide(None, undecided[0]) if undecided else prepared.decide(True, "parts-equal")


def _symbolic(
    prepared: _Prepared, timeout: float, pool: WorkerPool | None = None
) -> tuple[bool | None, str]:
    key = (prepared.gold_clean, prepared.given_clean)
    cached = _symbolic_cache.get(key)
    if cached is not None:
        return cached
    verdict = (pool or default_pool()).compare(prepared.given_clean, prepared.gold_clean, timeout)
    if verdict[1] not in UNDECIDED_REASONS:
        _symbolic_cache.put(key, verdict)
    return verdict


def grade_answer(
    given: str | Sequence[str] | None,
    gold: str,
    timeout: float = DEFAULT_TIMEOUT_S,
    max_chars: int = MAX_ANSWER_CHARS,
    *,
    last_line: bool = True,
) -> Grade:
    """Grade `given` (an answer, a solution, or a list of steps) against the reference `gold`.

    correct is True/False, or None when undecided (timeout, answer over `max_chars`).
    `last_line`: a `given` that states no final answer is read by its last line (bare
    answers, human-written solutions); False for generated samples, where it is then
    `no-answer` (see `extract_answer`). The gold always falls back to its last line.
    The sympy comparison runs in a worker process killed at `timeout` seconds; safe to call
    from any thread and from inside worker processes.
    """
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    prepared = _prepare(given, gold, max_chars, last_line)
    verdicts: dict = {}
    for unit in _symbolic_units(prepared):
        verdicts[unit.key] = verdict = _symbolic(unit, timeout)
        if verdict[0] is False:  # one unequal part settles a list
            break
    if prepared.parts is not None and any(v[0] is False for v in verdicts.values()):
        return prepared.decide(False, "list-mismatch")
    return _finish(prepared, verdicts)


def grade_many(
    pairs: Iterable[tuple[str | Sequence[str] | None, str]],
    workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    max_chars: int = MAX_ANSWER_CHARS,
    progress: bool = True,
    *,
    last_line: bool = True,
) -> list[Grade]:
    """Grade (given, gold) pairs; returns Grades in input order (`last_line`: as in
    `grade_answer`).

    Cheap rules run in this process; the remaining distinct pairs go to `workers` grading
    processes (default: os.cpu_count()), each comparison with its own hard `timeout`.
    Repeated (gold, given) pairs are graded once.
    """
    workers = max(1, workers or os.cpu_count() or 1)
    prepared = [_prepare(given, gold, max_chars, last_line) for given, gold in pairs]
    pending: dict[tuple[str, str], tuple[_Prepared, list[int]]] = {}
    verdicts: dict[tuple[str, str], tuple[bool | None, str]] = {}
    waiting = [0] * len(prepared)  # comparisons each pair still waits for
    for index, item in enumerate(prepared):
        for unit in _symbolic_units(item):
            cached = _symbolic_cache.get(unit.key)
            if cached is not None:
                verdicts[unit.key] = cached
                continue
            indices = pending.setdefault(unit.key, (unit, []))[1]
            if not indices or indices[-1] != index:
                indices.append(index)
                waiting[index] += 1
    # removed when done, and also when grading fails (nothing half drawn stays on screen)
    with tqdm(total=len(prepared), desc="grading", unit="pair", disable=not progress,
              leave=False) as bar:
        bar.update(sum(1 for count in waiting if count == 0))
        if pending:
            _grade_pending(pending, verdicts, waiting, workers, timeout, bar)
    return [_finish(item, verdicts) for item in prepared]


def _grade_pending(pending: dict, verdicts: dict, waiting: list[int], workers: int,
                   timeout: float, bar) -> None:
    """The symbolic comparisons, in worker processes; a pair's verdict is complete (and
    the bar moves) when its last comparison has answered."""
    n_workers = min(workers, len(pending))
    pool = WorkerPool(max_idle=n_workers)
    try:
        pool.start(n_workers)
        with ThreadPoolExecutor(n_workers) as executor:
            futures = {
                executor.submit(_symbolic, unit, timeout, pool): key
                for key, (unit, _) in pending.items()
            }
            for future in as_completed(futures):
                key = futures[future]
                verdicts[key] = future.result()
                for index in pending[key][1]:
                    waiting[index] -= 1
                    if waiting[index] == 0:
                        bar.update(1)
    finally:
        pool.close()
