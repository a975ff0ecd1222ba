"""Prompts that make a model write PRM800K-style solutions: one step per paragraph, steps
separated by the PRM's step separator, ending with "# Answer\\n\\n<answer>".

    fmt = PromptFormat()                      # few-shot text, separator "\\n\\n"
    prompt = fmt.render(problem)              # Prompt(text=...)
    steps = fmt.completion_steps(completion)  # what the PRM scores

A completion becomes steps through `prmkit.models.formatting.split_steps`, the function the
scorer and the trainer use, so a generated solution is scored exactly as the PRM reads it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Literal

from prmkit.errors import PrmkitError
from prmkit.generation.base import Prompt
from prmkit.models.formatting import ANSWER_HEADING, render_prompt, split_steps

STYLES = ("fewshot", "chat")


@dataclass(frozen=True)
class Example:
    """A worked solution shown to the model."""

    problem: str
    steps: tuple[str, ...]
    answer: str

    def solution(self, separator: str) -> str:
        return separator.join([*self.steps, f"{ANSWER_HEADING}\n\n{self.answer}"])


DEFAULT_EXAMPLES = (
    Example(
        "If $f(x) = 2x^2 - 3$, what is the value of $f(-2)$?",
        ("Substitute $x = -2$ into the definition: $f(-2) = 2(-2)^2 - 3$.",
         "Since $(-2)^2 = 4$, this is $2 \\cdot 4 - 3 = 8 - 3 = 5$."),
        "5"),
    Example(
        "How many positive divisors does 36 have?",
        ("Factor 36 into primes: $36 = 2^2 \\cdot 3^2$.",
         "Every positive divisor is $2^a 3^b$ with $0 \\le a \\le 2$ and $0 \\le b \\le 2$.",
         "So there are $(2 + 1)(2 + 1) = 9$ choices of $(a, b)$, one per divisor."),
        "9"),
)

DEFAULT_INSTRUCTION = (
    "Solve the math problem step by step. Write each step as its own paragraph. After the "
    f"last step, write \"{ANSWER_HEADING}\" on its own line, then the final answer alone.")

EXAMPLE_BREAK = "\n\n\n"  # between worked examples in a few-shot prompt
FEWSHOT_STOP = ("\nProblem:",)  # the model starting the next example


@dataclass(frozen=True)
class PromptFormat:
    """How problems become prompts.

    style "fewshot": a text prompt, `instruction` then the worked `examples` then the
    problem (or `template`, a whole text with `{problem}`, when given); "chat": messages,
    `instruction` as the system turn, each example as a user/assistant exchange, then the
    problem as the user turn. `stop` defaults to the start of a next example (fewshot) or
    nothing (chat: the end-of-turn token ends the answer).
    """

    style: Literal["fewshot", "chat"] = "fewshot"
    step_separator: str = "\n\n"
    instruction: str = DEFAULT_INSTRUCTION
    examples: tuple[Example, ...] = DEFAULT_EXAMPLES
    template: str | None = None
    stop: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.style not in STYLES:
            raise PrmkitError(f"unknown prompt style {self.style!r}; choose one of "
                              f"{', '.join(STYLES)}")
        if not self.step_separator:
            raise PrmkitError("the step separator is empty")
        if self.template is not None:
            if self.style != "fewshot":
                raise PrmkitError("a text template applies to the fewshot style only")
            render_prompt(self.template, "")  # checks the {problem} placeholder

    @property
    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is not None:
            return self.stop
        return FEWSHOT_STOP if self.style == "fewshot" else ()

    def render(self, problem: str) -> Prompt:
        if self.style == "chat":
            return Prompt(messages=tuple(self._messages(problem)))
        if self.template is not None:
            return Prompt(text=render_prompt(self.template, problem))
        shots = [f"Problem: {ex.problem}\n\nSolution:\n{ex.solution(self.step_separator)}"
                 for ex in self.examples]
        return Prompt(text=EXAMPLE_BREAK.join(
            [self.instruction, *shots, f"Problem: {problem}\n\nSolution:\n"]))

    def _messages(self, problem: str) -> list[dict]:
        messages = [{"role": "system", "content": self.instruction}] if self.instruction else []
        for ex in self.examples:
            messages += [{"role": "user", "content": ex.problem},
                         {"role": "assistant", "content": ex.solution(self.step_separator)}]
        return [*messages, {"role": "user", "content": problem}]

    def render_partial(self, problem: str, steps) -> Prompt:
        """The prompt followed by the steps so far, each ending with the separator: the
        continuation is the next step (sample it with `stop=fmt.step_stop_strings`).
        Fewshot: one text. Chat: the same messages as `render`, with the steps as the
        assistant's `continuation`, so every backend encodes every round's prompt the way
        it encodes round 0's (`generation.base.prompt_token_ids`)."""
        written = "".join(step + self.step_separator for step in steps)
        if self.style == "chat":
            if not written:
                return self.render(problem)
            return Prompt(messages=tuple(self._messages(problem)), continuation=written)
        return Prompt(text=self.render(problem).text + written)

    @property
    def step_stop_strings(self) -> tuple[str, ...]:
        """Stops for sampling one step: the separator, and the ends of a solution."""
        return (self.step_separator, *self.stop_strings)

    def completion_steps(self, completion: str) -> list[str]:
        """The steps of a generated solution, as the PRM reads them (see trim_after_answer)."""
        return split_steps(trim_after_answer(completion), self.step_separator)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def template_hash(self) -> str:
        """sha256 of everything that determines the prompts and the steps read back."""
        payload = {**self.to_dict(), "stop": list(self.stop_strings),
                   "layout": [EXAMPLE_BREAK, "Problem: ", "\n\nSolution:\n"]}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def get_format(style: str = "fewshot", step_separator: str = "\n\n") -> PromptFormat:
    """The default prompt of a style with the PRM's step separator."""
    return PromptFormat(style=style, step_separator=step_separator)


_HEADING = re.compile(rf"^{re.escape(ANSWER_HEADING)}[ \t]*$", re.MULTILINE)
_FIRST_LINE = re.compile(r"\S[^\n]*")


def trim_after_answer(completion: str) -> str:
    """Cut what follows the answer: the first non-empty line after the first "# Answer"
    heading ends the solution (a model often goes on with another problem or a comment)."""
    heading = _HEADING.search(completion)
    if heading is None:
        return completion
    line = _FIRST_LINE.search(completion, heading.end())
    return completion if line is None else completion[:line.end()]
