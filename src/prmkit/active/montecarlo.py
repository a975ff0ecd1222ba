"""Monte Carlo step labels: continue each step prefix K times and grade where it ends.

Math-Shepherd: a step's label is estimated from K rollouts that continue the solution
after it, "hard" (1 if any reaches the gold answer) or "soft" (the share that does).
`search="all"` rolls out every prefix; `search="binary"` (OmegaPRM) finds the first step
whose prefix no rollout can complete correctly by binary search, assuming a prefix that
can still succeed has only steps that can: about log2(n) prefixes instead of n. The last
prefix (the whole solution) is graded as it is when it has an answer; no rollout needed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from prmkit.active.labelers import LabelItem, mc_step_labels, process_example
from prmkit.data.records import StepExample
from prmkit.errors import PrmkitError
from prmkit.generation.base import Sampler, SampleRequest, SamplingParams, sample_seed
from prmkit.generation.prompts import PromptFormat


@dataclass
class RolloutBudget:
    rollouts: int = 0  # sampled continuations
    tokens: int = 0  # generated tokens
    prefixes: int = 0  # prefixes rolled out
    prefixes_exhaustive: int = 0  # prefixes `search="all"` would roll out for the same items
    graded_whole: int = 0  # whole solutions graded as they are (no rollout)
    dropped: int = 0  # items without a gold answer


@dataclass
class MonteCarloLabeler:
    sampler: Sampler
    params: SamplingParams = field(default_factory=lambda: SamplingParams(max_tokens=512))
    prompt_format: PromptFormat = field(default_factory=PromptFormat)
    k: int = 4  # rollouts per prefix
    mode: Literal["hard", "soft"] = "hard"
    search: Literal["all", "binary"] = "binary"
    seed: int = 0
    name: str = "monte_carlo"
    budget: RolloutBudget = field(default_factory=RolloutBudget)

    def __post_init__(self):
        if self.k < 1:
            raise PrmkitError(f"k (rollouts per step) must be >= 1, got {self.k}")
        if self.mode not in ("hard", "soft"):
            raise PrmkitError(f"mode must be hard or soft, got {self.mode!r}")
        if self.search not in ("all", "binary"):
            raise PrmkitError(f"search must be all or binary, got {self.search!r}")
        stop = tuple(dict.fromkeys(self.params.stop + self.prompt_format.stop_strings))
        self.params = dataclasses.replace(self.params, stop=stop)

    # values[i] = rollout verdicts after steps[:i + 1]
    def _rollout(self, jobs: list[tuple[LabelItem, int]]) -> list[list[bool]]:
        from prmkit.grading import extract_answer, grade_many

        requests = []
        for it, i in jobs:
            key = f"{it.problem_id}#{it.sample_index}@{i}"
            prompt = self.prompt_format.render_partial(it.problem, it.steps[: i + 1])
            requests.append(SampleRequest(key, prompt, self.k, sample_seed(self.seed, key)))
        outputs = self.sampler.generate(requests, self.params) if requests else []
        pairs, shape = [], []
        for (it, i), out in zip(jobs, outputs, strict=True):
            shape.append(len(out.completions))
            for c in out.completions:
                steps = [*it.steps[: i + 1], *self.prompt_format.completion_steps(c.text)]
                pairs.append((extract_answer(steps), it.gold_answer))
                self.budget.tokens += c.num_tokens
        grades = iter(grade_many(pairs, progress=False))
        self.budget.rollouts += len(pairs)
        self.budget.prefixes += len(jobs)
        return [[next(grades).correct is True for _ in range(n)] for n in shape]

    def _whole(self, items: Sequence[LabelItem]) -> dict[int, list[bool]]:
        """The whole solution's verdict, for items that have an answer."""
        from prmkit.grading import grade_many

        known = [j for j, it in enumerate(items) if it.answer is not None]
        grades = grade_many([(items[j].answer, items[j].gold_answer) for j in known],
                            progress=False)
        self.budget.graded_whole += len(known)
        return {j: [g.correct is True] for j, g in zip(known, grades, strict=True)}

    def label(self, items: Sequence[LabelItem]) -> list[StepExample]:
        todo = [it for it in items if it.gold_answer is not None and it.steps]
        self.budget.dropped += len(items) - len(todo)
        self.budget.prefixes_exhaustive += sum(len(it.steps) for it in todo)
        values: list[dict[int, list[bool]]] = [{} for _ in todo]
        for j, v in self._whole(todo).items():
            values[j][len(todo[j].steps) - 1] = v
        if self.search == "all":
            jobs = [(j, i) for j, it in enumerate(todo) for i in range(len(it.steps))
                    if i not in values[j]]
            for (j, i), v in zip(jobs, self._rollout([(todo[j], i) for j, i in jobs]), strict=True):
                values[j][i] = v
            return [process_example(it, mc_step_labels([values[j][i] for i in range(len(it.steps))],
                                                       self.mode))
                    for j, it in enumerate(todo)]
        return self._binary(todo, values)

    def _binary(self, todo: list[LabelItem], values: list[dict[int, list[bool]]]) -> list[StepExample]:
        last = [len(it.steps) - 1 for it in todo]
        missing = [(j, last[j]) for j in range(len(todo)) if last[j] not in values[j]]
        for (j, i), v in zip(missing, self._rollout([(todo[j], i) for j, i in missing]), strict=True):
            values[j][i] = v
        # invariant: prefix lo can succeed (lo = -1: the bare problem, assumed), prefix hi cannot
        bounds = {j: (-1, last[j]) for j in range(len(todo)) if not any(values[j][last[j]])}
        while True:
            jobs = [(j, (lo + hi) // 2) for j, (lo, hi) in bounds.items() if hi - lo > 1]
            if not jobs:
                break
            for (j, mid), v in zip(jobs, self._rollout([(todo[j], m) for j, m in jobs]), strict=True):
                values[j][mid] = v
                lo, hi = bounds[j]
                bounds[j] = (mid, hi) if any(v) else (lo, mid)
        out = []
        for j, it in enumerate(todo):
            first_error = bounds[j][1] if j in bounds else None
            positives = last[j] + 1 if first_error is None else first_error
            labels, later = [], 1.0
            for i in range(positives - 1, -1, -1):  # unmeasured: the next measured estimate
                if i in values[j]:
                    later = mc_step_labels([values[j][i]], self.mode)[0]
                labels.append(later)
            labels.reverse()
            out.append(process_example(it, labels + ([0.0] if first_error is not None else [])))
        return out

    def report(self) -> dict:
        return {"source": self.name, "k": self.k, "mode": self.mode, "search": self.search,
                **dataclasses.asdict(self.budget)}
