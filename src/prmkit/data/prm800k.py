"""Raw PRM800K records (the original OpenAI schema), phases 1 and 2.

Reads strict JSONL and the pretty-printed "concatenated" form; writes JSONL that
reads back into identical records. Unknown keys are kept in `extra`: top-level ones
directly, unknown `question` keys under extra["question_extra"], unknown `label` keys
under extra["label_extra"].

JSONL lines shaped like the official files decode with msgspec straight into typed
structs (completions into `Step`), with no dict in between; any other line takes the
validating dict path, which gives the same records and names a bad field.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Annotated, Any, Literal

import msgspec
import orjson
from msgspec import UNSET, UnsetType

from prmkit.data.io import atomic_write, dumps_line, json_line_error
from prmkit.data.jsonstream import iter_json_values, sniff
from prmkit.data.records import (
    LabelledSolution,
    LabelledStep,
    Problem,
    Provenance,
    Rating,
    Step,
)
from prmkit.errors import DataError

FORMAT = "prm800k"

TOP_KEYS = (
    "labeler",
    "timestamp",
    "generation",
    "is_quality_control_question",
    "is_initial_screening_question",
    "question",
    "label",
)
QUESTION_KEYS = (
    "problem",
    "ground_truth_solution",
    "ground_truth_answer",
    "pre_generated_steps",
    "pre_generated_answer",
    "pre_generated_verifier_score",
)
PRE_GENERATED_KEYS = ("pre_generated_steps", "pre_generated_answer", "pre_generated_verifier_score")
LABEL_KEYS = ("steps", "total_time", "finish_reason")
STEP_KEYS = ("completions", "human_completion", "chosen_completion")
COMPLETION_KEYS = ("text", "rating", "flagged")
FINISH_REASONS = ("found_error", "solution", "bad_problem", "give_up")
RATINGS = (-1, 0, 1, None)


class _Ctx:
    """Where a record came from, for error messages."""

    def __init__(self, path: str | None, line: int | None):
        self.path, self.line = path, line

    def error(self, field: str, message: str) -> DataError:
        return DataError(self.path, self.line, field, message)


def _expect(ctx: _Ctx, value: Any, types: type | tuple, field: str, nullable: bool = False):
    if value is None and nullable:
        return None
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        want = " or ".join(t.__name__ for t in _as_tuple(types)) + (" or null" if nullable else "")
        raise ctx.error(field, f"expected {want}, got {type(value).__name__}")
    return value


def _as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _parse_step(ctx: _Ctx, obj: Any, field: str) -> Step:
    _expect(ctx, obj, dict, field)
    if "text" not in obj:
        raise ctx.error(f"{field}.text", "missing")
    text = _expect(ctx, obj["text"], str, f"{field}.text")
    rating = obj.get("rating")
    if rating not in RATINGS or isinstance(rating, bool):
        raise ctx.error(f"{field}.rating", f"expected -1, 0, 1 or null, got {rating!r}")
    flagged = _expect(ctx, obj.get("flagged"), bool, f"{field}.flagged", nullable=True)
    extra = {k: v for k, v in obj.items() if k not in COMPLETION_KEYS}
    return Step(text=text, rating=rating, flagged=flagged, extra=extra)


def _parse_labelled_step(ctx: _Ctx, obj: Any, field: str) -> LabelledStep:
    _expect(ctx, obj, dict, field)
    raw = obj.get("completions")
    _expect(ctx, raw, list, f"{field}.completions", nullable=True)
    completions = [
        _parse_step(ctx, c, f"{field}.completions[{j}]") for j, c in enumerate(raw or [])
    ]
    human = obj.get("human_completion")
    human_step = None if human is None else _parse_step(ctx, human, f"{field}.human_completion")
    chosen = _expect(ctx, obj.get("chosen_completion"), int, f"{field}.chosen_completion", True)
    if chosen is not None and not 0 <= chosen < len(completions):
        raise ctx.error(
            f"{field}.chosen_completion",
            f"index {chosen} out of range for {len(completions)} completions",
        )
    extra = {k: v for k, v in obj.items() if k not in STEP_KEYS}
    return LabelledStep(
        completions=completions, chosen=chosen, human_completion=human_step, extra=extra
    )


def parse_record(
    obj: Any, path: str | None = None, line: int | None = None
) -> LabelledSolution:
    """One raw PRM800K object -> LabelledSolution; DataError names the offending field."""
    ctx = _Ctx(path, line)
    _expect(ctx, obj, dict, "<record>")
    question = _expect(ctx, obj.get("question"), dict, "question")
    label = _expect(ctx, obj.get("label"), dict, "label")
    problem_text = _expect(ctx, question.get("problem"), str, "question.problem")
    steps_raw = _expect(ctx, label.get("steps"), list, "label.steps")
    steps = [_parse_labelled_step(ctx, s, f"label.steps[{i}]") for i, s in enumerate(steps_raw)]
    finish = _expect(ctx, label.get("finish_reason"), str, "label.finish_reason", nullable=True)
    if finish is not None and finish not in FINISH_REASONS:
        raise ctx.error("label.finish_reason", f"unknown value {finish!r}")
    total_time = _expect(ctx, label.get("total_time"), int, "label.total_time", nullable=True)
    generation = _expect(ctx, obj.get("generation"), int, "generation", nullable=True)
    pre_steps = question.get("pre_generated_steps")
    _expect(ctx, pre_steps, list, "question.pre_generated_steps", nullable=True)
    score = question.get("pre_generated_verifier_score")
    _expect(ctx, score, (int, float), "question.pre_generated_verifier_score", nullable=True)

    extra: dict[str, Any] = {k: v for k, v in obj.items() if k not in TOP_KEYS}
    q_extra = {k: v for k, v in question.items() if k not in QUESTION_KEYS}
    l_extra = {k: v for k, v in label.items() if k not in LABEL_KEYS}
    if q_extra:
        extra["question_extra"] = q_extra
    if l_extra:
        extra["label_extra"] = l_extra
    # Which optional question keys were present, so that a writer emits the same keys.
    present = [k for k in _OPTIONAL_QUESTION_KEYS if k in question]
    if present != _default_present(generation, question):
        extra["question_keys"] = present

    return LabelledSolution(
        problem=Problem(
            text=problem_text,
            answer=_expect(
                ctx, question.get("ground_truth_answer"), str, "question.ground_truth_answer", True
            ),
            solution=_expect(
                ctx,
                question.get("ground_truth_solution"),
                str,
                "question.ground_truth_solution",
                True,
            ),
        ),
        steps=steps,
        finish_reason=finish,
        total_time=total_time,
        pre_generated_steps=pre_steps,
        pre_generated_answer=question.get("pre_generated_answer"),
        pre_generated_verifier_score=score,
        provenance=Provenance(
            source_format=FORMAT,
            source_path=None if path is None else str(path),
            source_line=line,
            labeler=_expect(ctx, obj.get("labeler"), str, "labeler", nullable=True),
            timestamp=_expect(ctx, obj.get("timestamp"), str, "timestamp", nullable=True),
            generation=generation,
            is_quality_control_question=bool(obj.get("is_quality_control_question", False)),
            is_initial_screening_question=bool(obj.get("is_initial_screening_question", False)),
        ),
        extra=extra,
    )


class _Unusual(Exception):
    """The fast path met something it does not handle; the validating parser takes over."""


def _fast_record(obj: Any, path: str | None, line: int | None) -> LabelledSolution:
    """parse_record for records shaped exactly like the official files (nearly all of them).

    No per-field bookkeeping: any missing key, odd type or unknown key raises, and the
    validating parser then builds the record or names the bad field.
    """
    if len(obj) != 7:
        raise _Unusual
    question = obj["question"]
    label = obj["label"]
    if len(label) != 3 or type(question["problem"]) is not str:
        raise _Unusual
    steps = []
    for s in label["steps"]:
        if len(s) != 3:
            raise _Unusual
        raw = s["completions"]
        completions = []
        if raw is not None:
            for c in raw:
                text, rating, flagged = c["text"], c["rating"], c["flagged"]
                if (
                    len(c) != 3
                    or type(text) is not str
                    or not (rating is None or (type(rating) is int and -1 <= rating <= 1))
                    or not (flagged is None or type(flagged) is bool)
                ):
                    raise _Unusual
                completions.append(Step(text, rating, flagged))
        chosen = s["chosen_completion"]
        if chosen is not None and (type(chosen) is not int or not 0 <= chosen < len(completions)):
            raise _Unusual
        human = s["human_completion"]
        if human is not None:
            human = _parse_step(_Ctx(path, line), human, "human_completion")
        steps.append(LabelledStep(completions, chosen, human))
    answer = question.get("ground_truth_answer")
    solution = question.get("ground_truth_solution")
    generation = obj["generation"]
    finish = label["finish_reason"]
    total_time = label["total_time"]
    pre_steps = question.get("pre_generated_steps")
    score = question.get("pre_generated_verifier_score")
    labeler, timestamp = obj["labeler"], obj["timestamp"]
    qc, screening = obj["is_quality_control_question"], obj["is_initial_screening_question"]
    if (
        not (answer is None or type(answer) is str)
        or not (solution is None or type(solution) is str)
        or not (generation is None or type(generation) is int)
        or not (finish is None or finish in FINISH_REASONS)
        or not (total_time is None or type(total_time) is int)
        or not (pre_steps is None or type(pre_steps) is list)
        or not (score is None or type(score) in (int, float))
        or not (labeler is None or type(labeler) is str)
        or not (timestamp is None or type(timestamp) is str)
        or type(qc) is not bool
        or type(screening) is not bool
        or not question.keys() <= _QUESTION_SET
    ):
        raise _Unusual
    present = [k for k in _OPTIONAL_QUESTION_KEYS if k in question]
    extra = {}
    if present != _default_present(generation, question):
        extra["question_keys"] = present
    return LabelledSolution(
        Problem(question["problem"], answer, None, solution),
        steps,
        finish,
        total_time,
        pre_steps,
        question.get("pre_generated_answer"),
        score,
        Provenance(FORMAT, path, line, labeler, timestamp, generation, qc, screening),
        extra,
    )


_QUESTION_SET = frozenset(QUESTION_KEYS)
_OPTIONAL_QUESTION_KEYS = ("ground_truth_solution", *PRE_GENERATED_KEYS)


def _default_present(generation: int | None, question: dict) -> list[str]:
    """Optional question keys the official files carry: all of them in phase 2, none in phase 1
    (ground_truth_solution only when it has a value)."""
    if generation is not None:
        return ["ground_truth_solution", *PRE_GENERATED_KEYS]
    return ["ground_truth_solution"] if question.get("ground_truth_solution") is not None else []


# --- JSONL lines shaped like the official files: msgspec structs -------------------------
# Every field is required (optional question keys may be absent), unknown keys and odd
# types fail to decode; the line then takes the dict path. Integers stay within int64,
# beyond which orjson (the dict path) reads them differently.
_Int = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _RawHuman(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    text: str
    rating: Rating | None = None
    flagged: bool | None = None
    source: Any = UNSET  # the one extra key of the official human completions


class _RawStep(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    completions: list[Step] | None
    human_completion: _RawHuman | None
    chosen_completion: _Int | None


class _RawLabel(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    steps: list[_RawStep]
    total_time: _Int | None
    finish_reason: Literal["found_error", "solution", "bad_problem", "give_up"] | None


class _RawQuestion(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    problem: str
    ground_truth_answer: str | None
    ground_truth_solution: str | None | UnsetType = UNSET
    pre_generated_steps: list[str] | None | UnsetType = UNSET
    pre_generated_answer: str | None | UnsetType = UNSET
    pre_generated_verifier_score: _Int | float | None | UnsetType = UNSET


class _RawRecord(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    labeler: str | None
    timestamp: str | None
    generation: _Int | None
    is_quality_control_question: bool
    is_initial_screening_question: bool
    question: _RawQuestion
    label: _RawLabel


_decoder = msgspec.json.Decoder(_RawRecord)


def _none(value: Any) -> Any:
    return None if value is UNSET else value


def _from_struct(r: _RawRecord, path: str, line: int) -> LabelledSolution:
    """A decoded line -> LabelledSolution, equal to what parse_record builds from its dict."""
    steps = []
    for s in r.label.steps:
        completions = [] if s.completions is None else s.completions
        chosen = s.chosen_completion
        if chosen is not None and not 0 <= chosen < len(completions):
            raise _Unusual
        h = s.human_completion
        if h is not None:
            h = Step(h.text, h.rating, h.flagged, {} if h.source is UNSET else {"source": h.source})
        steps.append(LabelledStep(completions, chosen, h))
    q = r.question
    present = [k for k in _OPTIONAL_QUESTION_KEYS if getattr(q, k) is not UNSET]
    solution = _none(q.ground_truth_solution)
    default = _default_present(r.generation, {"ground_truth_solution": solution})
    return LabelledSolution(
        Problem(q.problem, q.ground_truth_answer, None, solution),
        steps,
        r.label.finish_reason,
        r.label.total_time,
        _none(q.pre_generated_steps),
        _none(q.pre_generated_answer),
        _none(q.pre_generated_verifier_score),
        Provenance(FORMAT, path, line, r.labeler, r.timestamp, r.generation,
                   r.is_quality_control_question, r.is_initial_screening_question),
        {} if present == default else {"question_keys": present},
    )


def _read_jsonl(path: str, skip_bad: bool, bad: list | None) -> Iterator[LabelledSolution]:
    # A large buffer: lines are kilobytes long, and the default one makes reading them
    # cost about a third of decoding them.
    with open(path, "rb", buffering=1 << 20) as f:
        for line, raw in enumerate(f, 1):
            try:
                sol = _from_struct(_decoder.decode(raw), path, line)
            except (msgspec.DecodeError, msgspec.ValidationError, _Unusual, UnicodeDecodeError):
                sol = None
            if sol is not None:
                yield sol
                continue
            # Blank, malformed or unusual: the dict path, with its exact error messages.
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                if not skip_bad:
                    raise DataError(path, line, None, json_line_error(raw)) from None
                if bad is not None:
                    bad.append((line, json_line_error(raw)))
                continue
            try:
                yield _parse_dict(obj, path, line)
            except DataError as e:
                if not skip_bad:
                    raise
                if bad is not None:
                    bad.append((line, str(e)))


def _parse_dict(obj: Any, path: str, line: int) -> LabelledSolution:
    try:
        return _fast_record(obj, path, line)
    except (_Unusual, KeyError, TypeError, AttributeError, DataError):
        return parse_record(obj, path, line)


def read_prm800k(
    path: str | os.PathLike, skip_bad: bool = False, bad: list | None = None
) -> Iterator[LabelledSolution]:
    """Stream LabelledSolution records from raw PRM800K JSONL or concatenated JSON."""
    path_str = str(path)
    layout = sniff(path)
    if layout == "jsonl":
        yield from _read_jsonl(path_str, skip_bad, bad)
        return
    if layout == "empty":
        return
    for line, obj in iter_json_values(path, skip_bad=skip_bad, bad=bad):
        try:
            yield _parse_dict(obj, path_str, line)
        except DataError as e:
            if not skip_bad:
                raise
            if bad is not None:
                bad.append((line, str(e)))


def _step_to_dict(step: Step) -> dict:
    out = {"text": step.text, "rating": step.rating, "flagged": step.flagged}
    out.update(step.extra)
    return out


def to_dict(sol: LabelledSolution) -> dict:
    """LabelledSolution -> raw PRM800K object (the official key order)."""
    prov = sol.provenance
    extra = dict(sol.extra)
    q_extra = extra.pop("question_extra", {})
    l_extra = extra.pop("label_extra", {})
    question: dict[str, Any] = {"problem": sol.problem.text}
    values = {
        "ground_truth_solution": sol.problem.solution,
        "pre_generated_steps": sol.pre_generated_steps,
        "pre_generated_answer": sol.pre_generated_answer,
        "pre_generated_verifier_score": sol.pre_generated_verifier_score,
    }
    present = extra.pop("question_keys", None)
    if present is None:
        present = _default_present(prov.generation, {"ground_truth_solution": sol.problem.solution})
        # Values set on a record built in code are never dropped.
        present += [k for k in PRE_GENERATED_KEYS if values[k] is not None and k not in present]
    if "ground_truth_solution" in present:
        question["ground_truth_solution"] = sol.problem.solution
    question["ground_truth_answer"] = sol.problem.answer
    for k in PRE_GENERATED_KEYS:
        if k in present:
            question[k] = values[k]
    question.update(q_extra)

    steps = []
    for s in sol.steps:
        # The official files write null for a step without completions (a give-up position).
        completions = [_step_to_dict(c) for c in s.completions] or None
        d = {
            "completions": completions,
            "human_completion": None
            if s.human_completion is None
            else _step_to_dict(s.human_completion),
            "chosen_completion": s.chosen,
        }
        d.update(s.extra)
        steps.append(d)
    label = {"steps": steps, "total_time": sol.total_time, "finish_reason": sol.finish_reason}
    label.update(l_extra)
    out = {
        "labeler": prov.labeler,
        "timestamp": prov.timestamp,
        "generation": prov.generation,
        "is_quality_control_question": prov.is_quality_control_question,
        "is_initial_screening_question": prov.is_initial_screening_question,
        "question": question,
        "label": label,
    }
    out.update(extra)
    return out


def write_prm800k(records: Iterable[LabelledSolution], path: str | os.PathLike) -> int:
    """Write raw PRM800K JSONL atomically; returns the number of records written."""
    n = 0
    with atomic_write(path) as f:
        for sol in records:
            if not isinstance(sol, LabelledSolution):
                raise DataError(
                    str(path), None, None,
                    f"cannot write {type(sol).__name__} as PRM800K (needs labelled solutions)",
                )
            f.write(dumps_line(to_dict(sol)))
            n += 1
    return n
