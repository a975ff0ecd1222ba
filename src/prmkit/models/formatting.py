"""The one place that turns (problem, steps) into token ids and label positions.

Training, tree packing, scoring and evaluation all call these functions, so the
separator is tokenised the same way everywhere. A solution is encoded segment by
segment: the prompt, then each step followed by the step separator. The label of
step i is read at the LAST token of the separator that follows it. Segments are
tokenised independently and concatenated, which makes the encoding of a prefix a
prefix of the encoding (what tree packing relies on) and means a separator that also
appears inside a step's text never receives a label. A published family's own layout
(its model card's formatting) is prmkit.models.layouts, on the same templates.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from functools import lru_cache

from prmkit.errors import PrmkitError


@dataclass(frozen=True)
class StepFormat:
    step_separator: str = "\n\n"
    prompt_template: str = "{problem}\n\n"
    use_chat_template: bool = False  # wrap the problem as a user turn of the tokenizer's template
    max_length: int = 2048

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> StepFormat:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def fill_template(template: str, **values: str) -> str:
    """`template` with each `{name}` of `values` replaced, in one pass: text put in place of
    one placeholder is never read as a template (a problem holding "{steps}" stays as it
    is). Every other brace is literal, so `\\boxed{}` needs no escaping (`{{` and `}}` still
    give one brace, as in str.format)."""
    names = [re.escape("{" + k + "}") for k in values]
    pattern = re.compile("|".join([*names, r"\{\{", r"\}\}"]))

    def part(m: re.Match) -> str:
        return m[0][0] if m[0] in ("{{", "}}") else values[m[0][1:-1]]

    return pattern.sub(part, template)


def render_prompt(template: str, problem: str) -> str:
    """Put the problem in place of `{problem}` (see fill_template)."""
    if "{problem}" not in re.sub(r"\{\{|\}\}", "", template):
        raise PrmkitError(f"prompt_template {template!r} has no {{problem}} placeholder")
    return fill_template(template, problem=problem)


ANSWER_HEADING = "# Answer"


def split_steps(text: str, separator: str) -> list[str]:
    """Generated text to steps, as the scorer and the trainer read them: cut at each
    `separator`, strip each piece, drop empty ones. PRM800K's final `# Answer` heading and
    the answer after it stay one step ("# Answer\n\n42"), as in PRM800K's own records."""
    if not separator:
        raise PrmkitError("the step separator is empty")
    pieces = [p.strip() for p in text.split(separator)]
    steps = [p for p in pieces if p]
    for i, step in enumerate(steps):
        if step == ANSWER_HEADING and i + 1 < len(steps):
            return [*steps[:i], f"{ANSWER_HEADING}\n\n{' '.join(steps[i + 1:])}"]
    return steps


def strip_prompt(prompt: str, separator: str) -> str:
    """A prompt as the PRM reads it before the steps: without surrounding whitespace or
    trailing step separators, which the prompt template supplies itself. "What is 2+3?",
    "What is 2+3?\n\n" (as a policy's template renders it) and "What is 2+3? \n" are one
    prompt, and get the same rewards."""
    text, sep = prompt.strip(), separator.strip()
    while sep and text.endswith(sep):
        text = text[: -len(sep)].rstrip()
    return text


@dataclass
class EncodedSolution:
    input_ids: list[int]
    label_positions: list[int]  # token index carrying the label of step_indices[j]
    step_indices: list[int]  # which steps got a label (a step cut by max_length gets none)


class SegmentEncoder:
    """Tokenises prompts and steps for one (tokenizer, format) pair, with caches.

    Repeated prompts and steps (PRM800K rates many alternatives after one prefix) are
    tokenised once.
    """

    def __init__(self, tokenizer, fmt: StepFormat):
        self.tokenizer = tokenizer
        self.fmt = fmt
        self.separator_ids = self._encode(fmt.step_separator)
        if not self.separator_ids:
            raise PrmkitError(f"step separator {fmt.step_separator!r} encodes to no tokens")
        self.prompt_ids = lru_cache(maxsize=65536)(self._prompt_ids)
        self.step_ids = lru_cache(maxsize=1_000_000)(self._step_ids)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _prompt_ids(self, problem: str) -> tuple[int, ...]:
        tok = self.tokenizer
        if self.fmt.use_chat_template:
            if not getattr(tok, "chat_template", None):
                raise PrmkitError("use_chat_template is set but the tokenizer has no chat template")
            text = tok.apply_chat_template(
                [{"role": "user", "content": problem}], add_generation_prompt=True, tokenize=False
            )
            return tuple(self._encode(text))
        ids = self._encode(render_prompt(self.fmt.prompt_template, problem))
        if tok.bos_token_id is not None and getattr(tok, "add_bos_token", True):
            ids = [tok.bos_token_id, *ids]
        return tuple(ids)

    def _step_ids(self, step: str) -> tuple[int, ...]:
        """A step's tokens followed by the separator; its label sits on the last token."""
        return tuple(self._encode(step) + self.separator_ids)

    def encode(self, problem: str, steps: list[str] | tuple[str, ...]) -> EncodedSolution:
        """Encode a whole solution; steps that do not fit in max_length are dropped whole."""
        ids = list(self.prompt_ids(problem))
        if len(ids) > self.fmt.max_length:
            raise PrmkitError(
                f"the prompt alone has {len(ids)} tokens, more than max_length={self.fmt.max_length}"
            )
        positions, indices = [], []
        for i, step in enumerate(steps):
            seg = self.step_ids(step)
            if len(ids) + len(seg) > self.fmt.max_length:
                break
            ids.extend(seg)
            positions.append(len(ids) - 1)
            indices.append(i)
        return EncodedSolution(ids, positions, indices)


def encode_solution(tokenizer, problem: str, steps, fmt: StepFormat) -> EncodedSolution:
    """Convenience wrapper for one solution (use SegmentEncoder for many)."""
    return SegmentEncoder(tokenizer, fmt).encode(problem, steps)


def resolve_label_token_ids(tokenizer, label_tokens: tuple[str, ...]) -> list[int]:
    """Each label string must be exactly one token of the tokenizer."""
    ids = []
    for t in label_tokens:
        enc = tokenizer(t, add_special_tokens=False)["input_ids"]
        if len(enc) != 1:
            raise PrmkitError(
                f"label token {t!r} is {len(enc)} tokens for this tokenizer; choose single-token labels"
            )
        ids.append(enc[0])
    if len(set(ids)) != len(ids):
        raise PrmkitError(f"label tokens {label_tokens} map to the same token id")
    return ids
