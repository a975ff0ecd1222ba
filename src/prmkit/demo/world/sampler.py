"""The demo world's solver behind prmkit's `Sampler` interface.

Search runs on the world exactly as on a language model: a prompt is the rendered problem
("{problem}\\n", the demo PRM's format), optionally followed by steps already written, one
per line. The sampler continues the solution from there with the solver's own error
process and returns text: the next step when the separator is a stop string, else the
rest of the solution down to "Answer: v".

Continuing from written steps. The solver's hidden state (which tree it follows, the true
one or the problem's trap; its order of operations; the values it believes) is re-derived
from the text: each written "a op b = c" is matched to the not yet handled node of a tree
with the same operator whose operands fit best, its result `c` becomes the believed value
of that node, and an operand naming a node never written marks that node as done in the
head with the written value. The tree explaining the steps with the fewest unexplained
operands is kept (a tie, e.g. no step yet, is broken by the solver's own trap draw), then an
order of operations is drawn from the solver's prior among those that agree with the steps.
The solver goes on from that state, so a wrong value written earlier is carried into later
steps (only the solver's errors that cancel can bring the answer back). With no steps
written, the samples are those of `sample_solutions` for the same seed.

Seeds: the completions of a request with a seed are the first `n` draws of
`random.Random(seed)`; without one, the sampler's own stream (seeded at construction).
Temperature and top_p are not modelled (the world's error rates play their part); 0 is
refused. Token counts: with a tokenizer, the tokens of the text plus those of the stop
string that ended it, or one end-of-sequence token; without, one token per character.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from prmkit.demo.world.checker import STEP_RE, extract_final_answer
from prmkit.demo.world.plan import Plan
from prmkit.demo.world.problems import WorldProblem
from prmkit.demo.world.solver import continue_steps, pick_order
from prmkit.errors import PrmkitError
from prmkit.generation.base import (
    Completion,
    Prompt,
    RequestOutput,
    Sampler,
    SampleRequest,
    SamplingParams,
)
from prmkit.models.formatting import render_prompt, split_steps

_UNEXPLAINED_STEP = 2  # cost of a written step that matches no node: both operands unexplained


def _replay(plan: Plan, steps: Sequence[str]) -> tuple[int, list[int], list[int], list[int]]:
    """Read written steps as the solver following `plan` would have written them.

    Returns (unexplained operands, handled nodes in order, the nodes written, believed
    values of every node; nodes not handled keep their true value)."""
    tree = plan.tree
    vals = list(tree.values)
    done: list[int] = []
    written: list[int] = []
    cost = 0

    def in_head(j: int, value: int) -> None:
        for child, is_node in ((tree.nodes[j].a, tree.nodes[j].a_node),
                               (tree.nodes[j].b, tree.nodes[j].b_node)):
            if is_node and child not in done:
                in_head(child, vals[child])
        done.append(j)
        vals[j] = value

    for s in steps:
        m = STEP_RE.match(s)
        if m is None:
            cost += _UNEXPLAINED_STEP
            continue
        a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
        best = None
        for j, n in enumerate(tree.nodes):
            if n.op != op or j in done:
                continue
            expect = (vals[n.a] if n.a_node else n.a, vals[n.b] if n.b_node else n.b)
            pairs = [(a, b)] + ([(b, a)] if op in "+*" else [])
            for x, y in pairs:
                miss = (x != expect[0]) + (y != expect[1])
                skipped = sum(is_node and child not in done
                              for child, is_node in ((n.a, n.a_node), (n.b, n.b_node)))
                key = (miss, skipped, j)
                if best is None or key < best[0]:
                    best = (key, x, y)
        if best is None:
            cost += _UNEXPLAINED_STEP
            continue
        (miss, _, j), x, y = best
        cost += miss
        n = tree.nodes[j]
        for child, is_node, value in ((n.a, n.a_node, x), (n.b, n.b_node, y)):
            if is_node and child not in done:
                in_head(child, value)
        done.append(j)
        written.append(j)
        vals[j] = c
    return cost, done, written, vals


def _agrees(order: Sequence[int], done: list[int], written: list[int]) -> bool:
    """The order handles the `done` nodes first and writes the written ones in their order."""
    head = order[:len(done)]
    if set(head) != set(done):
        return False
    pos = {j: i for i, j in enumerate(head)}
    return all(pos[x] < pos[y] for x, y in zip(written, written[1:]))


def continue_solution(problem: WorldProblem, prefix: Sequence[str],
                      rng: random.Random) -> list[str]:
    """The steps the solver writes after `prefix` (a list of steps), down to "Answer: v";
    none when the prefix already has an answer."""
    if extract_final_answer(prefix) is not None:
        return []
    true_plan, trap_plan = problem.plans
    p = problem.propensity
    replays = {plan: _replay(plan, prefix) for plan in (true_plan, trap_plan) if plan is not None}
    least = min(r[0] for r in replays.values())
    fits = [plan for plan, r in replays.items() if r[0] == least]
    if len(fits) == 2:
        plan = trap_plan if rng.random() < p.trap else true_plan
    else:
        plan = fits[0]
    _, done, written, vals = replays[plan]
    if any(_agrees(o, done, written) for o in plan.orders):
        order = pick_order(plan, rng)
        while not _agrees(order, done, written):
            order = pick_order(plan, rng)
    else:  # steps in an order the solver never takes: go on in its first order
        order = tuple(done) + tuple(j for j in plan.orders[0] if j not in done)
    return continue_steps(plan, rng, p, done, order, vals)


@dataclass(frozen=True)
class WorldPrompts:
    """The prompts of the demo PRM's format: the problem, then each written step followed
    by the separator (what `WorldSampler` reads)."""

    step_separator: str = "\n"
    prompt_template: str = "{problem}\n"

    def render(self, problem: str) -> Prompt:
        return Prompt(text=render_prompt(self.prompt_template, problem))

    def render_partial(self, problem: str, steps: Sequence[str]) -> Prompt:
        head = render_prompt(self.prompt_template, problem)
        return Prompt(text=head + "".join(s + self.step_separator for s in steps))


class WorldSampler(Sampler):
    """Samples from the demo world's solver for the given problems (see the module doc).

    tokenizer: a Hugging Face tokenizer for token counts (the demo backbone's), or None
    for one token per character. step_separator and prompt_template: the PRM's format.
    seed: the stream of requests that carry no seed.
    """

    backend = "world"
    model = "prmkit.demo solver"

    def __init__(self, problems: Sequence[WorldProblem], tokenizer=None,
                 step_separator: str = "\n", prompt_template: str = "{problem}\n",
                 seed: int = 0):
        if not step_separator:
            raise PrmkitError("step_separator is empty")
        self.separator = step_separator
        self.prompts = WorldPrompts(step_separator, prompt_template)  # what it reads
        self.tokenizer = tokenizer
        self._suffix = prompt_template.split("{problem}", 1)[-1]
        self._problems: dict[str, WorldProblem] = {}
        for prob in problems:
            prompt = render_prompt(prompt_template, prob.text)
            other = self._problems.setdefault(prompt, prob)
            if other is not prob and other.key != prob.key:
                raise PrmkitError(f"problems {other.id} and {prob.id} render to the same "
                                  f"prompt {prompt[:80]!r}")
        self._rng = random.Random(seed)

    def describe(self) -> dict:
        return {**super().describe(), "problems": len(self._problems),
                "tokens": "tokenizer" if self.tokenizer is not None else "one per character"}

    # ---- prompts --------------------------------------------------------------------
    def parse(self, text: str) -> tuple[WorldProblem, list[str]]:
        """The problem a prompt names and the steps written after it."""
        cut = len(text) if not self._suffix else -1
        while True:
            if self._suffix:
                cut = text.find(self._suffix, cut + 1)
                if cut < 0:
                    break
                end = cut + len(self._suffix)
            else:
                end = cut
            prob = self._problems.get(text[:end])
            if prob is not None:
                rest = text[end:]
                return prob, split_steps(rest, self.separator) if rest.strip() else []
            if not self._suffix:
                break
        raise PrmkitError(f"the prompt names no problem of this sampler "
                          f"({len(self._problems)} registered): {text[:80]!r}")

    # ---- sampling -------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        if self.tokenizer is None:
            return len(text)
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _complete(self, problem: WorldProblem, prefix: list[str], rng: random.Random,
                  params: SamplingParams) -> Completion:
        steps = continue_solution(problem, prefix, rng)
        text = self.separator.join(steps)
        stops = [(text.find(s), s) for s in params.stop if s and s in text]
        stop = None  # as vLLM's stop_reason: the stop string that ended it, None for EOS
        if stops:
            at, stop = min(stops)
            text, tokens = text[:at], self.count_tokens(text[:at] + stop)
        else:
            tokens = self.count_tokens(text) + 1  # the end-of-sequence token
        if tokens <= params.max_tokens:
            return Completion(text, tokens, "stop", {"stop_reason": stop})
        if self.tokenizer is None:
            return Completion(text[:params.max_tokens], params.max_tokens, "length",
                              {"stop_reason": None})
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][:params.max_tokens]
        return Completion(self.tokenizer.decode(ids), len(ids), "length", {"stop_reason": None})

    def generate(self, requests: Sequence[SampleRequest], params: SamplingParams,
                 progress: bool = False) -> list[RequestOutput]:
        if params.temperature == 0:
            raise PrmkitError("the world's solver has no greedy mode: use a temperature > 0 "
                              "(its error rates, not the temperature, set how it samples)")
        it = requests
        if progress:
            from tqdm import tqdm

            it = tqdm(requests, desc="sampling (world)", unit="request")
        outs = []
        for req in it:
            if req.prompt.text is None:
                raise PrmkitError(f"request {req.key!r}: the world sampler takes text prompts, "
                                  "not chat messages")
            problem, prefix = self.parse(req.prompt.text)
            rng = random.Random(req.seed if req.seed is not None else self._rng.getrandbits(63))
            outs.append(RequestOutput(
                req.key, [self._complete(problem, prefix, rng, params) for _ in range(req.n)],
                prompt_tokens=self.count_tokens(req.prompt.text)))
        return outs
