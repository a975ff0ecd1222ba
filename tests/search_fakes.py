"""Deterministic stand-ins for a sampler, a step scorer and a prompt builder.

TreeSampler walks a scripted tree: child i of the node labelled L is labelled "L.i" (the
root's children "0", "1", ...); a prompt asked again gets fresh children (its second
request of n=2 yields i = 2, 3). A node at `depth` ends the solution with an answer
(end of sequence); a whole-solution request follows child 0 down to `depth`. Each
completion costs one token per word. TableScorer scores a step by its label.
"""

from __future__ import annotations

import random
import re
import zlib
from collections import Counter, defaultdict

from prmkit.generation.base import Completion, Prompt, RequestOutput, Sampler

SEP = "\n\n"
_LABEL = re.compile(r"step ([\d.]+)")


def label_of(step: str) -> str:
    return _LABEL.match(step).group(1)


class FakePrompts:
    def render(self, problem: str) -> Prompt:
        return Prompt(text=problem + SEP)

    def render_partial(self, problem: str, steps) -> Prompt:
        return Prompt(text=problem + SEP + SEP.join(steps) + SEP)


class TreeSampler(Sampler):
    backend, model = "fake", "tree"

    def __init__(self, depth: int = 3, answers: dict[str, str] | None = None):
        self.depth = depth
        self.answers = answers or {}
        self.asked: Counter = Counter()
        self.log: list[dict] = []  # one entry per request

    def step(self, label: str) -> tuple[str, bool]:
        if label.count(".") + 1 < self.depth:
            return f"step {label}", False
        answer = self.answers.get(label, label.split(".")[0])
        return f"step {label}: the answer is \\boxed{{{answer}}}", True

    def generate(self, requests, params, progress=False):
        outputs = []
        for req in requests:
            text = req.prompt.text
            parts = [p for p in text.split(SEP) if p.startswith("step ")]
            parent = label_of(parts[-1]) if parts else ""
            offset = self.asked[text] * req.n
            self.asked[text] += 1
            full = SEP not in params.stop
            completions = []
            for i in range(offset, offset + req.n):
                label = f"{parent}.{i}" if parent else str(i)
                step, ends = self.step(label)
                pieces = [step]
                while full and not ends:
                    label += ".0"
                    step, ends = self.step(label)
                    pieces.append(step)
                body = SEP.join(pieces)
                completions.append(Completion(
                    body, len(body.split()), "stop",
                    {"stop_reason": None if ends else SEP}))
            self.log.append({"key": req.key, "parent": parent, "n": req.n, "full": full,
                             "seed": req.seed, "tokens": sum(c.num_tokens for c in completions),
                             "children": [label_of(c.text.split(SEP)[0]) for c in completions]})
            outputs.append(RequestOutput(req.key, completions))
        return outputs


class RandomSampler(Sampler):
    """Steps and endings drawn from the request's seed (and nothing else)."""

    backend, model = "fake", "random"

    def generate(self, requests, params, progress=False):
        outputs = []
        for req in requests:
            rng = random.Random(req.seed)
            completions = []
            for _ in range(req.n):
                words = [f"w{rng.randrange(1000)}" for _ in range(rng.randrange(1, 6))]
                ends = rng.random() < 0.3 or SEP not in params.stop
                text = " ".join(words)
                if ends:
                    text += f" so the answer is \\boxed{{{rng.randrange(4)}}}"
                completions.append(Completion(text, len(text.split()), "stop",
                                              {"stop_reason": None if ends else SEP}))
            outputs.append(RequestOutput(req.key, completions))
        return outputs


class TableScorer:
    """P(correct) of a step: table[label] (default 0.5); a step without a label scores by
    a hash of its text. Cost: one token per word of every step of every solution scored."""

    def __init__(self, table: dict[str, float] | None = None, default: float = 0.5):
        self.table = table or {}
        self.default = default
        self.tokens_scored = 0
        self.per_problem: dict[str, int] = defaultdict(int)
        self.calls: list[list[list[str]]] = []

    def step_score(self, step: str) -> float:
        m = _LABEL.match(step)
        if m:
            return self.table.get(m.group(1), self.default)
        return (zlib.crc32(step.encode()) % 1000) / 1000

    def score(self, problem, steps_list):
        self.calls.append([list(s) for s in steps_list])
        cost = sum(len(step.split()) for steps in steps_list for step in steps)
        self.tokens_scored += cost
        self.per_problem[problem] += cost
        return [[self.step_score(s) for s in steps] for steps in steps_list]
