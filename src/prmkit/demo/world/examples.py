"""Training data from the world: PRM / ORM step examples, best-of-N records, corpus text."""

from __future__ import annotations

from collections.abc import Sequence

from prmkit.data.records import ScoredSample, StepExample
from prmkit.demo.world.checker import check_solution
from prmkit.demo.world.problems import WorldProblem
from prmkit.errors import PrmkitError


def to_step_examples(
    problems: Sequence[WorldProblem],
    pools: Sequence[Sequence[Sequence[str]]],
    kind: str = "prm",
    dedupe: bool = False,
) -> list[StepExample]:
    """StepExamples for a process ("prm") or outcome ("orm") reward model.

    prm: labels 1.0 up to the first error, 0.0 at it, None after (PRM800K's policy); ratings
    +1/-1 likewise. orm: no step labels. Both carry outcome = final-answer correctness and the
    problem id as group. dedupe drops repeated solutions of the same problem.
    """
    if kind not in ("prm", "orm"):
        raise PrmkitError(f"kind must be 'prm' or 'orm', got {kind!r}")
    if len(problems) != len(pools):
        raise PrmkitError(f"{len(problems)} problems but {len(pools)} solution pools")
    out = []
    for prob, pool in zip(problems, pools):
        seen: set[tuple[str, ...]] = set()
        for steps in pool:
            key = tuple(steps)
            if dedupe:
                if key in seen:
                    continue
                seen.add(key)
            chk = check_solution(prob, steps)
            outcome = 1.0 if chk.final_correct else 0.0
            if kind == "orm":
                out.append(StepExample(prob.text, key, outcome=outcome, group=prob.id))
                continue
            first = chk.first_error if chk.first_error >= 0 else len(key)
            labels = tuple(
                1.0 if i < first else 0.0 if i == first else None for i in range(len(key))
            )
            ratings = tuple(None if v is None else (1 if v == 1.0 else -1) for v in labels)
            out.append(StepExample(prob.text, key, labels, ratings, outcome, prob.id))
    return out


def to_scored_samples(
    problem: WorldProblem, solutions: Sequence[Sequence[str]]
) -> list[ScoredSample]:
    """Best-of-N pool records (no scores yet), with the checker's verdict in `extra`."""
    out = []
    for k, steps in enumerate(solutions):
        chk = check_solution(problem, steps)
        out.append(
            ScoredSample(
                problem=problem.text,
                answer=chk.answer,
                is_correct=chk.final_correct,
                steps=list(steps),
                ground_truth_answer=problem.answer,
                subject=problem.kind,
                level=problem.level,
                unique_id=f"{problem.id}/{k}",
                extra={"first_error": chk.first_error, "step_labels": chk.labels},
            )
        )
    return out


def corpus_documents(
    problems: Sequence[WorldProblem], pools: Sequence[Sequence[Sequence[str]]] | None = None
) -> list[str]:
    """One document per solution: the problem line, then one line per step.

    Without pools each problem contributes its reference solution.
    """
    docs = []
    for k, prob in enumerate(problems):
        sols = [prob.reference_solution()] if pools is None else pools[k]
        docs.extend(prob.text + "\n" + "\n".join(s) for s in sols)
    return docs


def corpus_text(
    problems: Sequence[WorldProblem], pools: Sequence[Sequence[Sequence[str]]] | None = None
) -> str:
    """All corpus documents in one string, separated by blank lines (tokenizer training)."""
    return "\n\n".join(corpus_documents(problems, pools)) + "\n"
