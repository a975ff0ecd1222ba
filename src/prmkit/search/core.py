"""The records and the expand / score / select steps every search method shares.

A method never calls the sampler itself: it asks for expansions (`Expand`: sample k
continuations of a candidate, one step or to the end), and the runner batches the
expansions of many problems into one sampler call. The method then scores the children
(`ProblemRun.score`) and selects among them by the configured aggregation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

from prmkit.errors import PrmkitError
from prmkit.generation.base import Completion, Prompt, RequestOutput, SampleRequest, sample_seed
from prmkit.generation.prompts import trim_after_answer
from prmkit.models.formatting import ANSWER_HEADING, split_steps
from prmkit.scoring.aggregate import aggregate
from prmkit.search.config import SearchConfig
from prmkit.selection.vote import AnswerClusterer, weighted_vote


@runtime_checkable
class StepScorer(Protocol):
    """P(correct) per step for each partial or full solution of one problem; None for a
    step the model could not see (cut by max_length); an outcome model gives one value per
    solution. `tokens_scored`: tokens run through the model so far (the PRM compute)."""

    tokens_scored: int

    def score(self, problem: str, steps_list: Sequence[Sequence[str]]
              ) -> list[list[float | None]]: ...


@runtime_checkable
class PromptBuilder(Protocol):
    """The generator's prompt for a problem, and for a problem with steps already written
    (the model continues after them)."""

    def render(self, problem: str) -> Prompt: ...

    def render_partial(self, problem: str, steps: Sequence[str]) -> Prompt: ...


class RescoringScorer:
    """A `StepScorer` over the plain `prmkit.scoring.Scorer`: every solution is scored in
    full each time (no prefix cache), so a tree search pays again for the steps it has
    already scored; `tokens_scored` counts every token sent to the model."""

    def __init__(self, scorer):
        self.scorer = scorer
        self.tokens_scored = 0

    def score(self, problem: str, steps_list: Sequence[Sequence[str]]
              ) -> list[list[float | None]]:
        items = [(problem, list(steps)) for steps in steps_list]
        self.tokens_scored += sum(len(self.scorer.encode(p, s).input_ids) for p, s in items)
        return self.scorer.score(items)


# Why a candidate ended: a whole solution sampled to its end of sequence ("eos"), the
# "# Answer" step written ("answer"), cut by a token limit ("length"), an empty step
# ("empty"), the previous step written again ("repeat"). "" while it is still open.
ENDS = ("eos", "answer", "length", "empty", "repeat")


@dataclass
class Candidate:
    """One partial or complete solution: the only state the search methods share."""

    steps: list[str]
    step_scores: list[float | None] = field(default_factory=list)
    score: float = 0.0  # step_scores aggregated by the configured aggregation
    completed: bool = False
    end: str = ""
    answer: str | None = None
    generated_tokens: int = 0  # tokens sampled along this candidate's path
    path: tuple[int, ...] = ()  # child index taken at each round from the root
    subtree: int = 0  # DVTS subtree (0 for other methods)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["path"] = list(self.path)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Candidate:
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        d["path"] = tuple(d.get("path") or ())
        return cls(**d)


@dataclass
class SearchResult:
    """One problem's search: its final candidates, the pick, and what it cost."""

    key: str
    problem: str
    approach: str
    candidates: list[Candidate]
    chosen: int  # index into candidates (-1: none)
    generated_tokens: int  # every token sampled for this problem, pruned paths included
    prm_tokens: int  # tokens the step scorer ran for this problem
    details: dict = field(default_factory=dict)

    @property
    def answer(self) -> str | None:
        return self.candidates[self.chosen].answer if self.chosen >= 0 else None

    def to_dict(self) -> dict:
        return {"id": self.key, "problem": self.problem, "approach": self.approach,
                "chosen": self.chosen, "chosen_answer": self.answer,
                "generated_tokens": self.generated_tokens, "prm_tokens": self.prm_tokens,
                "details": self.details,
                "candidates": [c.to_dict() for c in self.candidates]}

    @classmethod
    def from_dict(cls, d: dict) -> SearchResult:
        return cls(key=str(d["id"]), problem=d["problem"], approach=d["approach"],
                   candidates=[Candidate.from_dict(c) for c in d["candidates"]],
                   chosen=int(d["chosen"]), generated_tokens=int(d["generated_tokens"]),
                   prm_tokens=int(d["prm_tokens"]), details=dict(d.get("details") or {}))


@dataclass(frozen=True)
class Expand:
    """Sample k continuations of `parent` (None: of the bare problem): one step each, or
    each to its end when `full`."""

    parent: Candidate | None
    k: int
    full: bool = False
    subtree: int = 0


def extend(parent: Candidate | None, completion: Completion, index: int,
           expand: Expand, config: SearchConfig) -> Candidate:
    """The child of `parent` made of one sampled completion (see ENDS for when it ends)."""
    sep = config.step_separator
    prev = list(parent.steps) if parent else []
    new = split_steps(trim_after_answer(completion.text), sep)
    # re-read the whole text: a "# Answer" step and its answer become one step, and what
    # follows the answer's line is dropped
    steps = split_steps(trim_after_answer(sep.join(prev + new)), sep) if new else prev
    stop_reason = completion.extra.get("stop_reason", sep)
    if expand.full:
        end = "length" if completion.finish_reason == "length" else "eos"
    elif completion.finish_reason == "length":
        end = "length"
    elif not new:
        end = "empty"
    elif steps[-1].startswith(ANSWER_HEADING + "\n"):
        end = "answer"
    elif prev and new[-1] == prev[-1]:
        end = "repeat"
    elif stop_reason != sep:  # the end of sequence (or another stop string), not a step end
        end = "eos"
    else:
        end = ""
    return Candidate(
        steps=steps, completed=bool(end), end=end,
        generated_tokens=(parent.generated_tokens if parent else 0) + completion.num_tokens,
        path=(*(parent.path if parent else ()), index),
        subtree=parent.subtree if parent else expand.subtree)


class ProblemRun:
    """One problem under search: builds its requests, turns outputs into children, scores
    them, and keeps its token accounts."""

    def __init__(self, key: str, problem: str, scorer: StepScorer, prompts: PromptBuilder,
                 config: SearchConfig, clusterer: AnswerClusterer):
        self.key, self.problem = key, problem
        self.scorer, self.prompts, self.config = scorer, prompts, config
        self.clusterer = clusterer
        self.generated_tokens = 0
        self.prm_tokens = 0
        self.rounds: list[dict] = []  # per round: children sampled, candidates kept

    def request(self, expand: Expand) -> SampleRequest:
        parent = expand.parent
        if parent is None or not parent.steps:
            prompt = self.prompts.render(self.problem)
        else:
            prompt = self.prompts.render_partial(self.problem, parent.steps)
        path = ".".join(map(str, parent.path)) if parent else ""
        key = f"{self.key}\x1f{expand.subtree}\x1f{path}\x1f{int(expand.full)}"
        return SampleRequest(key=key, prompt=prompt, n=expand.k,
                             seed=sample_seed(self.config.seed, key))

    def children(self, expand: Expand, output: RequestOutput) -> list[Candidate]:
        if len(output.completions) != expand.k:
            raise PrmkitError(f"problem {self.key}: asked the sampler for {expand.k} "
                              f"completions, got {len(output.completions)}")
        self.generated_tokens += sum(c.num_tokens for c in output.completions)
        return [extend(expand.parent, c, i, expand, self.config)
                for i, c in enumerate(output.completions)]

    def score(self, candidates: Sequence[Candidate]) -> None:
        """Score every step of `candidates` (in place) and aggregate; a candidate without
        steps scores 0. Completed candidates get their answer extracted."""
        from prmkit.grading import extract_answer

        todo = [c for c in candidates if c.steps]
        before = self.scorer.tokens_scored
        scores = self.scorer.score(self.problem, [c.steps for c in todo]) if todo else []
        self.prm_tokens += self.scorer.tokens_scored - before
        if len(scores) != len(todo):
            raise PrmkitError(f"problem {self.key}: the step scorer returned {len(scores)} "
                              f"score lists for {len(todo)} solutions")
        for c, s in zip(todo, scores):
            if len(s) != len(c.steps) and len(s) != 1:  # one value: an outcome model
                raise PrmkitError(f"problem {self.key}: the step scorer returned {len(s)} "
                                  f"scores for {len(c.steps)} steps")
            c.step_scores = list(s)
            c.score = aggregate(s, self.config.aggregation)
        for c in candidates:
            if not c.steps:
                c.step_scores, c.score = [], 0.0
            if c.completed:
                c.answer = extract_answer(c.steps)

    def result(self, candidates: list[Candidate], approach: str) -> SearchResult:
        """The final pool: picks by top score ("best") and by score-weighted vote over
        equivalent answers ("weighted"); the approach says which one is `chosen`. (In a
        DVTS pool an open sibling never out-scores its subtree's completed best child.)"""
        best = top(candidates, 1)[0] if candidates else None
        best_index = candidates.index(best) if best is not None else -1
        weighted_index = self.weighted_pick(candidates)
        details = {"best": best_index, "weighted": weighted_index, "rounds": self.rounds}
        chosen = weighted_index if approach == "weighted_best_of_n" else best_index
        return SearchResult(self.key, self.problem, approach, candidates, chosen,
                            self.generated_tokens, self.prm_tokens, details)

    def weighted_pick(self, candidates: Sequence[Candidate]) -> int:
        """The best-scored member of the answer class with the largest score sum;
        the top-scored candidate when no candidate has an answer."""
        if not any(c.answer is not None for c in candidates):
            return candidates.index(top(candidates, 1)[0]) if candidates else -1
        return weighted_vote([c.answer for c in candidates], [c.score for c in candidates],
                             clusterer=self.clusterer)


def top(candidates: Sequence[Candidate], k: int) -> list[Candidate]:
    """The k best by aggregated score; equal scores keep their order (first sampled first)."""
    order = sorted(range(len(candidates)), key=lambda i: (-candidates[i].score, i))
    return [candidates[i] for i in order[:k]]


__all__ = ["ENDS", "Candidate", "Expand", "ProblemRun", "PromptBuilder", "RescoringScorer",
           "SearchResult", "StepScorer", "extend", "top"]
