"""A published family's solutions as its authors' code formats them (see
prmkit.models.family), with every label position known by construction, never searched
for in the rendered text.

The model reads the text its authors' code gives it: the problem and the steps as given,
except that a spec with `strip_steps` strips each step first (RLHFlow's code does), and
then whatever the chat template does to a message (Llama 3.1's trims each one). Templates
are filled in one pass (`fill_template`), so a problem holding "{steps}" reads as text. A
chat template must render the conversation so far, then the text prmkit put there: where
it rewrites that text (trims it, say), encoding fails with an error instead of placing
labels elsewhere. Kinds:

- text: the template filled; each step's label at its marker's token.
- chat: the tokenizer's chat template; the steps start where the generation prompt ends.
- chat_turns: one user turn per step, each answered by `reply`; the label at the reply's
  marker (or the token before it), after the turn rendered with the generation prompt.
- lines: the prompt and every line of every step tokenised on their own (no whole-text
  tokenisation), the marker's token after each line; a step's label after its last line.
- implicit (`read: implicit`, kind chat): an anchor before the response, then each
  step's boundary as its authors find it (the conversation re-rendered up to the step).

Every encoder tokenises the text whole (lines aside), so none is prefix-stable: a
published PRM gets no prefix cache.
"""

from __future__ import annotations

from functools import lru_cache

from prmkit.errors import PrmkitError
from prmkit.models.formatting import EncodedSolution, StepFormat, fill_template


def layout_encoder(tokenizer, spec, fmt: StepFormat):
    """The encoder of a family spec's layout (its `read: implicit` boundaries included)."""
    if spec.read == "implicit":
        return ImplicitLayout(tokenizer, spec.layout, fmt)
    kinds = {"text": TextLayout, "chat": ChatLayout, "chat_turns": TurnsLayout,
             "lines": LinesLayout}
    return kinds[spec.layout.kind](tokenizer, spec.layout, fmt)


class LayoutEncoder:
    """Shared by the kinds: `render` gives the text and, per step, the character of its
    label token; `encode` tokenises the text and maps them to token positions."""

    prefix_stable = False
    anchored = False  # the first label is an anchor (step index -1) that gets no score

    def __init__(self, tokenizer, layout, fmt: StepFormat):
        if not getattr(tokenizer, "is_fast", False):
            raise PrmkitError("a published format needs a fast tokenizer (character offsets)")
        if layout.kind not in ("text", "lines") and not getattr(tokenizer, "chat_template",
                                                                None):
            raise PrmkitError(f"format kind {layout.kind!r} needs the tokenizer's chat "
                              "template, and this tokenizer has none")
        self.tokenizer, self.layout, self.fmt = tokenizer, layout, fmt
        self.prompt_ids = lru_cache(maxsize=4096)(self._prompt_ids)

    def _prompt_ids(self, problem: str) -> tuple[int, ...]:
        """The tokens before the first label of the one-step solution "x" (with an anchor:
        up to the anchor), for the prompt-length check."""
        ids, positions = self.positions(problem, ["x"])
        return tuple(ids[: positions[0] + self.anchored])

    def step_body(self, steps) -> tuple[str, list[int]]:
        """The steps as one text (`step` filled per step, joined by `step_join`) and, per
        step, the character of its label token within it."""
        lay, body, chars = self.layout, "", []
        for i, step in enumerate(steps):
            pre, post = (fill_template(t, n=str(i + 1)) for t in lay.step.split("{step}", 1))
            body += (lay.step_join if i else "") + pre + step
            if lay.at == "step_end":
                chars.append(len(body) - 1)
            else:
                chars.append(len(body) + post.index(lay.marker) + self._marker_char())
            body += post
        return body, chars

    def _marker_char(self) -> int:
        return len(self.layout.marker) - 1 if self.layout.at == "marker" else 0

    def chat(self, messages, generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(
            [{"role": r, "content": c} for r, c in messages], tokenize=False,
            add_generation_prompt=generation_prompt)

    def render(self, problem: str, steps) -> tuple[str, list[int]]:
        raise NotImplementedError

    def positions(self, problem: str, steps) -> tuple[list[int], list[int]]:
        """Token ids of the whole text and each step's label position (not truncated)."""
        text, chars = self.render(problem, steps)
        enc = self.tokenizer(text, add_special_tokens=self.layout.add_special_tokens)
        positions = []
        for i, c in enumerate(chars):
            tok = enc.char_to_token(c)
            if tok is None:
                raise PrmkitError(f"the label marker {self.layout.marker!r} of step {i} maps "
                                  "to no token")
            positions.append(tok - (self.layout.at == "before_marker"))
        return list(enc["input_ids"]), positions

    def encode(self, problem: str, steps) -> EncodedSolution:
        """The whole solution; steps whose label falls past max_length get none."""
        if not steps:
            return EncodedSolution(list(self.prompt_ids(problem)), [], [])
        steps = [s.strip() for s in steps] if self.layout.strip_steps else list(steps)
        ids, positions = self.positions(problem, steps)
        kept, indices = [], []
        for i, p in enumerate(positions, -1 if self.anchored else 0):
            if p >= self.fmt.max_length:
                break  # a cut step drops every later one
            kept.append(p)
            indices.append(i)
        return EncodedSolution(ids[: self.fmt.max_length], kept, indices)


def _rewritten(what: str) -> PrmkitError:
    return PrmkitError(f"the chat template does not render {what} as the conversation so far "
                       "followed by the text given (it rewrites that text): the labels cannot "
                       "be placed")


class TextLayout(LayoutEncoder):
    def render(self, problem: str, steps) -> tuple[str, list[int]]:
        head, tail = (fill_template(t, problem=problem)
                      for t in self.layout.text.split("{steps}", 1))
        body, chars = self.step_body(steps)
        return head + body + tail, [len(head) + c for c in chars]


class ChatLayout(LayoutEncoder):
    """The steps in the last message's content: they start where the conversation before
    it, with the generation prompt, and the content's text before {steps} end."""

    def render(self, problem: str, steps) -> tuple[str, list[int]]:
        body, chars = self.step_body(steps)
        messages = [(r, fill_template(c, problem=problem, steps=body))
                    for r, c in self.layout.messages]
        role, content = self.layout.messages[-1]
        lead = fill_template(content.split("{steps}", 1)[0], problem=problem)
        before = self.chat(messages[:-1], generation_prompt=True) + lead
        text = self.chat(messages)
        if not text.startswith(before + body):
            raise _rewritten(f"the {role} turn")
        return text, [len(before) + c for c in chars]


class TurnsLayout(LayoutEncoder):
    """Per step a user turn (`first_step`, then `step`) answered by `reply`; step i's label
    lies in the reply that follows the conversation up to its turn."""

    def render(self, problem: str, steps) -> tuple[str, list[int]]:
        lay, messages, chars = self.layout, [], []
        for i, step in enumerate(steps):
            content = fill_template(lay.first_step if i == 0 else lay.step, problem=problem,
                                    step=step, n=str(i + 1))
            messages += [("user", content), ("assistant", lay.reply)]
        text = self.chat(messages)
        for i in range(len(steps)):
            before = self.chat(messages[: 2 * i + 1], generation_prompt=True)
            if not (text.startswith(before) and text[len(before):].startswith(lay.reply)):
                raise _rewritten(f"the reply to step {i}")
            chars.append(len(before) + lay.reply.index(lay.marker) + self._marker_char())
        return text, chars


class LinesLayout(LayoutEncoder):
    """The prompt (`text`, `{bos}` being the tokenizer's BOS token) tokenised alone, then
    each line of each step (the steps split at the marker) tokenised alone and followed by
    the marker's last token, which carries the label of a step's last line."""

    def positions(self, problem: str, steps) -> tuple[list[int], list[int]]:
        tok, lay = self.tokenizer, self.layout
        bos = tok.bos_token
        if "{bos}" in lay.text and bos is None:
            raise PrmkitError(f"format text {lay.text!r} starts with the tokenizer's BOS "
                              "token, and this tokenizer has none")

        def ids_of(text: str) -> list[int]:
            return list(tok(text, add_special_tokens=lay.add_special_tokens)["input_ids"])

        ids, marker, positions = ids_of(fill_template(lay.text, problem=problem,
                                                      bos=bos or "")), ids_of(lay.marker)[-1:], []
        for step in steps:
            for line in step.split(lay.marker):
                ids += (ids_of(line) if line else []) + marker
            positions.append(len(ids) - 1)
        return ids, positions


class ImplicitLayout(LayoutEncoder):
    """An implicit PRM's boundaries, as the EurusPRM card and PRIME-RL/ImplicitPRM
    (eval/prm_eval_utils.py, eval/processbench.py) find them: the conversation with the
    first k steps (k = 0..n) rendered, stripped, followed by the step join for 0 < k < n,
    and tokenised alone; its length less 2 is boundary k. Step k's label is boundary k + 1
    (the log-ratio sum gathered at boundary k covers the token after it). The anchor, the
    last token left out of the sum, is set by `sum_from`: `boundary` (the card and
    prm_eval_utils.py, whose label mask starts at boundary 0 and is applied shifted by one)
    sums from boundary 0's own token, the "\\n" after the assistant header, so the anchor
    is boundary 0 less 1; `after_boundary` (processbench.py, its mask applied unshifted)
    sums from the token after boundary 0, the anchor being boundary 0."""

    anchored = True

    def _conversation(self, problem: str, response: str) -> str:
        return self.chat([(r, fill_template(c, problem=problem, steps=response))
                          for r, c in self.layout.messages])

    def positions(self, problem: str, steps) -> tuple[list[int], list[int]]:
        lay, tok = self.layout, self.tokenizer
        steps = [fill_template(lay.step, step=s, n=str(i + 1)) for i, s in enumerate(steps)]
        ids = list(tok(self._conversation(problem, lay.step_join.join(steps)),
                       add_special_tokens=False)["input_ids"])
        bounds = []
        for k in range(len(steps) + 1):
            text = self._conversation(problem, lay.step_join.join(steps[:k])).strip()
            text += lay.step_join if 0 < k < len(steps) else ""
            bounds.append(len(tok(text, add_special_tokens=False)["input_ids"]) - 2)
        last = len(ids) - 1  # the authors' gather index stays inside the sequence
        anchor = bounds[0] - (lay.sum_from == "boundary")
        return ids, [anchor] + [min(b + 1, last) for b in bounds[1:]]
