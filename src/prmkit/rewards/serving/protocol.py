"""Request and response bodies of the reward server, and their translation to engine items.

`POST /get_reward` speaks OpenRLHF's remote reward protocol: it sends
`{"query": [prompt + response, ...], "prompts": [...], "labels": [...]}` (newer versions
may add fields such as `datasources`; they are ignored) and reads `rewards` (one float
each), `scores` (used for dynamic filtering) and `extra_logs` (name -> one value each).
The response of each query is the text after its prompt, without trailing end-of-text
tokens (`prmkit.rewards.openrlhf.response_text`, as OpenRLHF's reward-file entry point).

`POST /v1/step_rewards` returns the step contract (`prmkit.rewards.contract`):
`{"prompts": [...], "completions": [...], "policy_token_ids": [[...], ...] | null}` ->
`{"results": [{"steps": [{"probability", "char_start", "char_end", "policy_token_end"}],
"score"}], "request_id"}`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from prmkit.rewards.contract import CompletionRewards
from prmkit.rewards.openrlhf import END_TOKENS, response_text
from prmkit.rewards.serving.engine import Item
from prmkit.scoring.aggregate import NULL_STEP_SCORE


class BadField(ValueError):
    """Input that names the field at fault (HTTP 422)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def _equal_lengths(first: str, values: list, **others: list | None) -> None:
    for name, other in others.items():
        if other is not None and len(other) != len(values):
            raise BadField(name, f"has {len(other)} entries but {first} has {len(values)}")


class OpenRLHFRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    query: list[str]
    prompts: list[str] | None = None
    labels: list[Any] | None = None


class StepRewardsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str]
    completions: list[str]
    policy_token_ids: list[list[int] | None] | None = None
    request_id: str | None = Field(default=None, max_length=200)

    @model_validator(mode="after")
    def _lengths(self):
        _equal_lengths("prompts", self.prompts, completions=self.completions,
                       policy_token_ids=self.policy_token_ids)
        return self


def field_name(loc: Sequence[Any]) -> str:
    """("prompts", 3) -> "prompts[3]"."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def validation_problem(error: ValidationError) -> BadField:
    first = error.errors()[0]
    loc = first["loc"]
    if first["type"] == "value_error" and isinstance(first.get("ctx", {}).get("error"), BadField):
        return first["ctx"]["error"]
    return BadField(field_name(loc), first["msg"])


def parse(model: type[BaseModel], body: bytes) -> BaseModel:
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        raise validation_problem(e) from None


@dataclass(frozen=True)
class TextRules:
    """How the server turns a query into what the PRM reads.

    problem_regex: a regular expression whose group `problem` picks the problem out of a
    templated prompt (e.g. the user turn of a chat template); None: the prompt as it is.
    strip: more end-of-text strings cut from the end of responses (besides the common
    end-of-turn and padding tokens, `END_TOKENS`).
    """

    problem_regex: str | None = None
    strip: tuple[str, ...] = ()
    verifier_weight: float = 0.0  # /get_reward: + weight x the grader's verdict vs the label

    def __post_init__(self):
        if self.problem_regex is None:
            return
        try:
            groups = re.compile(self.problem_regex).groupindex
        except re.error as e:
            raise ValueError(f"{self.problem_regex!r} is not a regular expression: {e}") from None
        if "problem" not in groups:
            raise ValueError(f"{self.problem_regex!r} has no (?P<problem>...) group")

    def problem(self, prompt: str, field: str) -> str:
        if self.problem_regex is None:
            return prompt
        m = re.search(self.problem_regex, prompt, flags=re.DOTALL)
        if m is None:
            raise BadField(field, "does not match the server's --problem-regex")
        return m["problem"]

    @property
    def end_tokens(self) -> tuple[str, ...]:
        return (*END_TOKENS, *self.strip)


def openrlhf_items(req: OpenRLHFRequest, rules: TextRules) -> list[Item]:
    if req.prompts is None:
        raise BadField("prompts", "is required: the response of each query is the text after "
                                  "its prompt")
    _equal_lengths("query", req.query, prompts=req.prompts, labels=req.labels)
    items = []
    for i, (query, prompt) in enumerate(zip(req.query, req.prompts, strict=True)):
        response = response_text(query, prompt, rules.end_tokens)
        if response is None:
            raise BadField(f"query[{i}]", f"does not contain prompts[{i}]")
        items.append(Item(rules.problem(prompt, f"prompts[{i}]"), response))
    return items


def step_items(req: StepRewardsRequest, rules: TextRules, has_policy_tokenizer: bool) -> list[Item]:
    if req.policy_token_ids is not None and not has_policy_tokenizer:
        raise BadField("policy_token_ids", "this server has no policy tokenizer to decode them "
                                           "(start it with --policy-tokenizer)")
    ids = req.policy_token_ids or [None] * len(req.prompts)
    return [Item(rules.problem(p, f"prompts[{i}]"), c,
                 None if t is None else tuple(t))
            for i, (p, c, t) in enumerate(zip(req.prompts, req.completions, ids, strict=True))]


def openrlhf_response(results: Sequence[CompletionRewards],
                      verdicts: Sequence[float | None] | None = None,
                      verifier_weight: float = 0.0) -> dict:
    """scores = each completion's PRM score (NULL_STEP_SCORE when it has none); rewards =
    scores + verifier_weight x the grader's verdict (0 when ungraded), as OpenRLHF's
    reward-file entry point gives them; extra_logs: one value per completion."""
    prm = [NULL_STEP_SCORE if r.score is None else r.score for r in results]
    logs = {"prm_score": prm, "prm_steps": [float(len(r.steps)) for r in results],
            "prm_null_score": [float(r.score is None) for r in results]}
    rewards = list(prm)
    if verdicts is not None:
        rewards = [p + verifier_weight * (v or 0.0) for p, v in zip(prm, verdicts, strict=True)]
        logs["verifier"] = [v or 0.0 for v in verdicts]
        logs["verifier_graded"] = [float(v is not None) for v in verdicts]
    return {"rewards": rewards, "scores": prm, "extra_logs": logs}


def step_response(results: Sequence[CompletionRewards], request_id: str | None) -> dict:
    return {"results": [{"steps": [{"probability": s.probability, "char_start": s.char_start,
                                    "char_end": s.char_end, "policy_token_end": s.policy_token_end}
                                   for s in r.steps], "score": r.score} for r in results],
            "request_id": request_id}
