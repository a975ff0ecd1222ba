"""Request and response bodies of the reward server, and their translation to engine items.

`POST /get_reward` speaks OpenRLHF's remote reward protocol: it sends
`{"query": [prompt + response, ...], "prompts": [...], "labels": [...]}` (newer versions
may add fields such as `datasources`; they are ignored) and reads `rewards` (one float
each), `scores` (used for dynamic filtering) and `extra_logs` (name -> one value each).
The response of each query is the text after its prompt (or after the end of a prompt
OpenRLHF cut), without trailing end-of-text tokens; a query holding none of its prompt gets
the null reward (`prmkit.rewards.contract.response_text`, the rule of OpenRLHF's
reward-file entry point, whose `openrlhf_answer` builds both answers).

`POST /v1/step_rewards` returns the step contract (`prmkit.rewards.contract`):
`{"prompts": [...], "completions": [...], "policy_token_ids": [[...], ...] | null}` ->
`{"results": [{"steps": [{"probability", "char_start", "char_end", "policy_token_end"}],
"score"}], "request_id"}`. Policy token ids are checked before anything is queued: ids the
policy tokenizer does not have, or that do not decode to their completion, get a 422 naming
the item.

`prepare_openrlhf` and `prepare_steps` parse and check a body (CPU work, run off the event
loop by the app, a piece at a time: `jsonbody`); a list longer than a request may hold is
refused (413) as soon as its parse reaches that length.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from prmkit.rewards.contract import END_TOKENS, CompletionRewards, PolicyTokens, response_text
from prmkit.rewards.serving import jsonbody
from prmkit.rewards.serving.engine import Item, TooLarge


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


def parse(model: type[BaseModel], body: bytes | Sequence[bytes],
          max_entries: int | None = None) -> BaseModel:
    """`body` (bytes or its chunks) as `model`; its lists may hold at most `max_entries`
    (TooLarge, checked as they are parsed: see jsonbody)."""
    try:
        data = jsonbody.loads(body, max_entries)
    except jsonbody.TooManyEntries as e:
        raise TooLarge(f"{e.key} {e}") from None
    except (jsonbody.BadJSON, UnicodeDecodeError) as e:
        raise BadField("body", f"not UTF-8 JSON: {e}") from None
    try:
        return model.model_validate(data)
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
    """One item per query; a query without its prompt has completion None (no steps)."""
    if req.prompts is None:
        raise BadField("prompts", "is required: the response of each query is the text after "
                                  "its prompt")
    _equal_lengths("query", req.query, prompts=req.prompts, labels=req.labels)
    return [Item(rules.problem(prompt, f"prompts[{i}]"),
                 response_text(query, prompt, rules.end_tokens))
            for i, (query, prompt) in enumerate(zip(req.query, req.prompts, strict=True))]


def step_items(req: StepRewardsRequest, rules: TextRules,
               policy: PolicyTokens | None) -> list[Item]:
    if req.policy_token_ids is not None and policy is None:
        raise BadField("policy_token_ids", "this server has no policy tokenizer to decode them "
                                           "(start it with --policy-tokenizer)")
    ids = req.policy_token_ids or [None] * len(req.prompts)
    items = []
    for i, (p, c, t) in enumerate(zip(req.prompts, req.completions, ids, strict=True)):
        problem = None if t is None else policy.ids_problem(t, c)
        if problem is not None:
            raise BadField(f"policy_token_ids[{i}]", problem)
        items.append(Item(rules.problem(p, f"prompts[{i}]"), c, None if t is None else tuple(t)))
    return items


def prepare_openrlhf(body: bytes | Sequence[bytes], rules: TextRules,
                     max_entries: int | None = None) -> tuple[OpenRLHFRequest, list[Item]]:
    req = parse(OpenRLHFRequest, body, max_entries)
    return req, openrlhf_items(req, rules)


def prepare_steps(body: bytes | Sequence[bytes], rules: TextRules, policy: PolicyTokens | None,
                  max_entries: int | None = None) -> tuple[StepRewardsRequest, list[Item]]:
    req = parse(StepRewardsRequest, body, max_entries)
    return req, step_items(req, rules, policy)


def step_response(results: Sequence[CompletionRewards], request_id: str | None) -> dict:
    return {"results": [{"steps": [{"probability": s.probability, "char_start": s.char_start,
                                    "char_end": s.char_end, "policy_token_end": s.policy_token_end}
                                   for s in r.steps], "score": r.score} for r in results],
            "request_id": request_id}
