"""Answer grading: extraction, cheap normalised checks in-process, sympy work in a worker.

Decision order (the `reason` of a Grade names the rule that decided):
  no-gold / no-answer / too-long   nothing (or too much) to compare
  exact                            same text up to spacing, or normalised strings equal
  choice-mismatch, text-mismatch   multiple-choice letters / word answers differ
  bracket-mismatch                 a set `\\{..\\}` against a tuple or interval
  list-mismatch                    lists of different lengths (`5, 125` vs `5125`)
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
    bracket_kind,
    choice_letter,
    clean_answer,
    is_text_answer,
    list_size,
)
from prmkit.grading.pool import WorkerPool, default_pool

DEFAULT_TIMEOUT_S = 5.0
MAX_ANSWER_CHARS = 5000
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

    def decide(self, correct: bool | None, reason: str) -> Grade:
        return Grade(
            correct,
            reason,
            self.given_extracted,
            self.gold_extracted,
            self.given_clean,
            self.gold_clean,
        )


def _prepare(given: str | Sequence[str] | None, gold: str | None, max_chars: int) -> _Prepared:
    gold_extracted = extract_answer(gold) if gold is not None else None
    given_extracted = extract_answer(given)
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
    elif _list_sizes_differ(prepared.gold_clean, prepared.given_clean):
        prepared.grade = prepared.decide(False, "list-mismatch")
    else:
        gold_value, given_value = _as_fraction(gold_key), _as_fraction(given_key)
        if gold_value is not None and given_value is not None:
            equal = gold_value == given_value
            prepared.grade = prepared.decide(equal, "rational-equal" if equal else "rational-unequal")
    return prepared


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
) -> Grade:
    """Grade `given` (an answer, a solution, or a list of steps) against the reference `gold`.

    correct is True/False, or None when undecided (timeout, answer over `max_chars`).
    The sympy comparison runs in a worker process killed at `timeout` seconds; safe to call
    from any thread and from inside worker processes.
    """
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    prepared = _prepare(given, gold, max_chars)
    if prepared.grade is not None:
        return prepared.grade
    return prepared.decide(*_symbolic(prepared, timeout))


def grade_many(
    pairs: Iterable[tuple[str | Sequence[str] | None, str]],
    workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    max_chars: int = MAX_ANSWER_CHARS,
    progress: bool = True,
) -> list[Grade]:
    """Grade (given, gold) pairs; returns Grades in input order.

    Cheap rules run in this process; the remaining distinct pairs go to `workers` grading
    processes (default: os.cpu_count()), each comparison with its own hard `timeout`.
    Repeated (gold, given) pairs are graded once.
    """
    workers = max(1, workers or os.cpu_count() or 1)
    prepared = [_prepare(given, gold, max_chars) for given, gold in pairs]
    pending: dict[tuple[str, str], list[int]] = {}
    verdicts: dict[tuple[str, str], tuple[bool | None, str]] = {}
    for index, item in enumerate(prepared):
        if item.grade is None:
            key = (item.gold_clean, item.given_clean)
            cached = _symbolic_cache.get(key)
            if cached is not None:
                verdicts[key] = cached
            else:
                pending.setdefault(key, []).append(index)
    bar = tqdm(
        total=len(prepared), desc="grading", unit="pair", disable=not progress, leave=False
    )
    bar.update(len(prepared) - sum(len(v) for v in pending.values()))
    if pending:
        n_workers = min(workers, len(pending))
        pool = WorkerPool(max_idle=n_workers)
        try:
            pool.start(n_workers)
            with ThreadPoolExecutor(n_workers) as executor:
                futures = {
                    executor.submit(_symbolic, prepared[indices[0]], timeout, pool): key
                    for key, indices in pending.items()
                }
                for future in as_completed(futures):
                    key = futures[future]
                    verdicts[key] = future.result()
                    bar.update(len(pending[key]))
        finally:
            pool.close()
    bar.close()
    grades = []
    for item in prepared:
        if item.grade is not None:
            grades.append(item.grade)
        else:
            grades.append(item.decide(*verdicts[(item.gold_clean, item.given_clean)]))
    return grades
