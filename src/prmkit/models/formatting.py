"""The one place that turns (problem, steps) into token ids and label positions.

Training, tree packing, scoring and evaluation all call these functions, so the
separator is tokenised the same way everywhere. A solution is encoded segment by
segment: the prompt, then each step followed by the step separator. The label of
step i is read at the LAST token of the separator that follows it. Segments are
tokenised independently and concatenated, which makes the encoding of a prefix a
prefix of the encoding (what tree packing relies on) and means a separator that also
appears inside a step's text never receives a label.
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


_TEMPLATE_PARTS = re.compile(r"\{problem\}|\{\{|\}\}")


def render_prompt(template: str, problem: str) -> str:
    """Put the problem in place of `{problem}`; every other brace is literal text, so
    `\\boxed{}` needs no escaping (`{{` and `}}` still give one brace, as in str.format)."""
    found = False

    def part(m: re.Match) -> str:
        nonlocal found
        if m[0] == "{problem}":
            found = True
            return problem
        return m[0][0]

    text = _TEMPLATE_PARTS.sub(part, template)
    if not found:
        raise PrmkitError(f"prompt_template {template!r} has no {{problem}} placeholder")
    return text


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


class LayoutEncoder:
    """Encodes a solution as a published family's model card does (see
    prmkit.models.family): the whole text is rendered, then tokenised in one go, and each
    step's label position is the token holding the label marker that follows the step
    (its last character; with `at: before_marker`, the token before the marker's first).
    Not prefix-stable (the whole text is tokenised at once), so it offers no `step_ids`.
    anchor: also give the token before the first step, as step index -1 (an implicit
    PRM's step rewards sum the tokens after it).
    """

    prefix_stable = False

    def __init__(self, tokenizer, layout, fmt: StepFormat, anchor: bool = False):
        if not getattr(tokenizer, "is_fast", False):
            raise PrmkitError("a published format needs a fast tokenizer (character offsets)")
        if layout.kind != "text" and not getattr(tokenizer, "chat_template", None):
            raise PrmkitError(f"format kind {layout.kind!r} needs the tokenizer's chat "
                              "template, and this tokenizer has none")
        self.tokenizer, self.layout, self.fmt, self.anchor = tokenizer, layout, fmt, anchor
        self.prompt_ids = lru_cache(maxsize=4096)(self._prompt_ids)

    def _fill(self, template: str, **values: str) -> str:
        for key, value in values.items():
            template = template.replace("{" + key + "}", value)
        return template

    def render(self, problem: str, steps) -> tuple[str, list[int], int]:
        """The text, per step the character index of its label token, and the first
        step's first character."""
        lay = self.layout
        problem = problem.strip()
        steps = [s.strip() for s in steps]
        if lay.kind == "chat_turns":
            return self._render_turns(problem, steps)
        pre, post = lay.step.split("{step}", 1)
        body, chars, first = "", [], len(pre)
        for i, step in enumerate(steps):
            body += (lay.step_join if i else "") + pre + step
            chars.append(len(body) - 1 if lay.at == "step_end"
                         else len(body) + post.index(lay.marker) + self._marker_char())
            body += post
        if lay.kind == "text":
            head = self._fill(lay.text.split("{steps}", 1)[0], problem=problem)
            text = head + body + self._fill(lay.text.split("{steps}", 1)[1], problem=problem)
            offset = len(head)
        else:
            messages = [{"role": r, "content": self._fill(c, problem=problem, steps=body)}
                        for r, c in lay.messages]
            text = self.tokenizer.apply_chat_template(messages, tokenize=False)
            offset = text.find(body, text.find(problem) + len(problem)) if body else 0
            if offset < 0:
                raise PrmkitError("the chat template changed the steps' text; cannot place "
                                  "the labels")
        return text, [offset + c for c in chars], offset + first

    def _marker_char(self) -> int:
        return len(self.layout.marker) - 1 if self.layout.at == "marker" else 0

    def _render_turns(self, problem: str, steps: list[str]) -> tuple[str, list[int]]:
        lay = self.layout
        contents = [self._fill(lay.first_step if i == 0 else lay.step, problem=problem, step=s)
                    for i, s in enumerate(steps)]
        messages = []
        for content in contents:
            messages += [{"role": "user", "content": content},
                         {"role": "assistant", "content": lay.reply}]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False)
        chars, cursor, first = [], 0, None
        for i, content in enumerate(contents):
            at = text.find(content, cursor)
            reply = text.find(lay.reply, at + len(content)) if at >= 0 else -1
            if reply < 0:
                raise PrmkitError("the chat template changed a step's text; cannot place "
                                  "its label")
            if first is None:
                first = text.find(steps[0], at) if i == 0 else at
            if lay.at == "step_end":
                chars.append(at + len(content) - 1)
            else:
                chars.append(reply + lay.reply.index(lay.marker) + self._marker_char())
            cursor = reply + len(lay.reply)
        return text, chars, first

    def _tokens(self, text: str):
        return self.tokenizer(text, add_special_tokens=self.layout.add_special_tokens)

    def _prompt_ids(self, problem: str) -> tuple[int, ...]:
        """The tokens before the first step's text (for the prompt-length check)."""
        text, _, first = self.render(problem, ["x"])
        enc = self._tokens(text)
        return tuple(enc["input_ids"][: enc.char_to_token(first)])

    def encode(self, problem: str, steps) -> EncodedSolution:
        """Whole-text encoding; steps whose label falls past max_length get none."""
        if not steps:
            return EncodedSolution(list(self.prompt_ids(problem)), [], [])
        text, chars, first = self.render(problem, steps)
        enc = self._tokens(text)
        positions, indices = [], []
        if self.anchor:
            positions, indices = [enc.char_to_token(first) - 1], [-1]
        for i, c in enumerate(chars):
            tok = enc.char_to_token(c)
            if tok is None:
                raise PrmkitError(f"the label marker {self.layout.marker!r} of step {i} maps "
                                  "to no token")
            if self.layout.at == "before_marker":
                tok -= 1
            if tok >= self.fmt.max_length:
                break
            positions.append(tok)
            indices.append(i)
        ids = list(enc["input_ids"])
        return EncodedSolution(ids[: self.fmt.max_length], positions, indices)
