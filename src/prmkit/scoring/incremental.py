"""Score partial solutions that grow one step at a time (step-by-step search).

A search scores the same prefixes round after round: with `Scorer` every round re-runs
the prompt and every earlier step. `IncrementalScorer` keeps, for each scored step
prefix, the model's key/value cache (prompt + steps so far) and the step scores; a
partial solution then runs only its new steps on top of the longest cached prefix. The
model's `SegmentEncoder` makes the encoding of a prefix a prefix of the encoding, so the
result is the same computation as `Scorer.score` (equal within float rounding).

    inc = IncrementalScorer.from_pretrained("runs/prm/model")
    inc.score(problem, [steps_a, steps_b])         # P(correct) per step, like Scorer.score
    inc.score(problem, [steps_a + [next_a], ...])  # runs only next_a's tokens
    inc.forget(problem)                            # frees that problem's caches

A prefix's cache holds only its own tokens' keys/values and a link to its parent's, so
siblings share their common past in memory. In one forward pass, the partial solutions
that extend the same cached prefix share one row: their new segments are packed after
that past, each seeing the past and itself only (a 4D mask); rows of different pasts
are padded (pasts right-aligned against the new tokens).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from prmkit.errors import PrmkitError
from prmkit.models.attention import additive_attention_mask, full_attention_within
from prmkit.scoring.length_batches import length_batches
from prmkit.scoring.scorer import Scorer, as_problem_steps

Key = tuple[str, tuple[str, ...]]  # (problem, steps of the prefix)


class _Past:
    """The key/value cache of one prefix: its own tokens' [2, layers, kv_heads, n, head_dim]
    on top of its parent's (None: the prefix starts at the first token)."""

    __slots__ = ("own", "parent", "length")

    def __init__(self, own: torch.Tensor, parent: _Past | None):
        self.own, self.parent = own, parent
        self.length = own.shape[-2] + (parent.length if parent is not None else 0)

    def pieces(self) -> list[torch.Tensor]:
        """The own caches from the first token on."""
        out, node = [], self
        while node is not None:
            out.append(node.own)
            node = node.parent
        return out[::-1]


@dataclass
class _Job:
    """Steps to score: `new_ids` on top of `past` (None: nothing cached)."""

    key: Key  # the prefix whose cache this job leaves
    past: _Past | None
    new_ids: list[int]
    label_offsets: list[int]  # index in new_ids of each new step's label token
    label_keys: list[Key]  # the prefix each label scores


@dataclass
class _Row:
    """Jobs packed in one row after their shared past."""

    past: _Past | None
    jobs: list[_Job] = field(default_factory=list)
    width: int = 0  # new tokens

    @property
    def past_len(self) -> int:
        return 0 if self.past is None else self.past.length


class IncrementalScorer:
    """Per-step P(correct) of partial solutions, re-using the cache of scored prefixes.

    model_or_scorer: a `StepRewardModel` (a `Scorer` is built with `dtype`, `device`,
    `cast_weights`: the same dtype handling, the caller's model untouched), or a `Scorer`
    whose model and settings are used as they are.
    max_cached_prefixes: most prefixes whose key/value cache is kept (least recently used
    dropped first); max_cached_tokens optionally bounds the sum of their lengths
    (`cached_tokens`), which bounds the memory held: prefixes share their common past, so
    the memory is that of the distinct tokens, at most `cached_tokens` tokens. A cached
    token costs 2 x layers x kv_heads x head_dim values of the compute dtype (23 KB for
    SmolLM2-135M in bf16). Dropped prefixes are recomputed from a shorter one when needed.
    max_cached_scores: most step scores kept (one float each).
    token_budget: most new tokens (padding included) in one forward pass; past_budget:
    most cached tokens read by one pass (padding included), bounding its memory.
    max_padding: a row joins a batch only if its new tokens need at most this fraction of
    padding.
    tokens_scored counts the tokens actually run through the model (padding excluded).
    """

    def __init__(self, model_or_scorer, max_cached_prefixes: int = 1024,
                 max_cached_tokens: int | None = None, max_cached_scores: int = 1_000_000,
                 token_budget: int = 16384, past_budget: int = 65536,
                 dtype: str | torch.dtype | None = "auto",
                 device: str | torch.device | None = None, cast_weights: bool = False,
                 max_batch_size: int | None = None, max_padding: float = 0.5):
        if isinstance(model_or_scorer, Scorer):
            scorer = model_or_scorer
        else:
            scorer = Scorer(model_or_scorer, token_budget=token_budget, dtype=dtype,
                            device=device, cast_weights=cast_weights)
        if max_cached_prefixes < 0 or token_budget < 1 or past_budget < 1:
            raise PrmkitError("max_cached_prefixes must be >= 0 and the budgets positive")
        if getattr(scorer.config, "surprise_window", 0):
            raise PrmkitError("a model with surprise_window reads its step's earlier tokens "
                              "through the LM head, which a cached prefix does not keep: score "
                              "it with Scorer (full forwards), not IncrementalScorer")
        self.scorer = scorer
        self.model = scorer.model
        self.encoder = scorer.encoder
        self.max_length = self.encoder.fmt.max_length
        self.orm = scorer.config.objective == "orm"
        self.max_cached_prefixes = max_cached_prefixes
        self.max_cached_tokens = max_cached_tokens
        self.max_cached_scores = max_cached_scores
        self.token_budget = token_budget
        self.past_budget = past_budget
        self.max_batch_size = max_batch_size
        self.max_padding = max_padding
        self.tokens_scored = 0
        self._pasts: OrderedDict[Key, _Past] = OrderedDict()
        self._cached_tokens = 0
        self._scores: OrderedDict[Key, float] = OrderedDict()
        _check_full_attention(self.model.backbone, self.max_length)
        if getattr(self.model.config, "family", None):
            raise PrmkitError(f"a {self.model.config.family} PRM is tokenised whole, as its "
                              "model card does, so its prefixes are not cached: score it "
                              "with Scorer (search --no-incremental)")

    @classmethod
    def from_pretrained(cls, folder: str | Path, dtype: str | torch.dtype | None = "auto",
                        device: str | torch.device | None = None, token_budget: int = 16384,
                        **kw) -> IncrementalScorer:
        """Load a saved model (weights cast to dtype in place, as `Scorer.from_pretrained`)."""
        scorer = Scorer.from_pretrained(folder, token_budget=token_budget, dtype=dtype,
                                        device=device)
        return cls(scorer, token_budget=token_budget, **kw)

    # ---- public API ---------------------------------------------------------------------
    def score(self, problem: str, steps_list: Sequence[Sequence[str]]
              ) -> list[list[float | None]]:
        """P(correct) per step of each partial solution of `problem` (None: cut by
        max_length; an outcome model gives one value), as `Scorer.score` would."""
        return self.score_many([(problem, steps) for steps in steps_list])

    def score_many(self, items: Sequence[Any]) -> list[list[float | None]]:
        """Like `score` for (problem, steps) items of several problems, batched together."""
        requests = []
        for item in items:
            problem, steps = as_problem_steps(item)
            requests.append((problem, tuple(steps)))
        fits = [self._steps_that_fit(p, s) for p, s in requests]
        got: dict[Key, float] = {}  # this call's scores and pasts, safe from eviction
        made: dict[Key, _Past] = {}
        pending = sorted(range(len(requests)), key=lambda i: fits[i])
        while pending:  # a request that extends a prefix run in this wave waits for it
            jobs, planned = [], set()
            for i in pending:
                problem, steps = requests[i]
                job = self._plan(problem, steps[: fits[i]], planned, got, made)
                if job is not None:
                    planned.add(job.key)
                    jobs.append(job)
            for batch in self._batches(jobs):
                got.update(self._run(batch, made))
            pending = [i for i in pending
                       if self._missing(requests[i][0], requests[i][1][: fits[i]], got) is not None]
        return [self._result(p, s, fits[i], got) for i, (p, s) in enumerate(requests)]

    def reset(self) -> None:
        """Drop every cached prefix and score."""
        self._pasts.clear()
        self._scores.clear()
        self._cached_tokens = 0

    def forget(self, problem: str) -> None:
        """Drop the cached prefixes and scores of one problem."""
        for key in [k for k in self._pasts if k[0] == problem]:
            self._cached_tokens -= self._pasts.pop(key).length
        for key in [k for k in self._scores if k[0] == problem]:
            del self._scores[key]

    @property
    def cached_prefixes(self) -> int:
        return len(self._pasts)

    @property
    def cached_tokens(self) -> int:
        return self._cached_tokens

    # ---- planning -----------------------------------------------------------------------
    def _steps_that_fit(self, problem: str, steps: tuple[str, ...]) -> int:
        """How many leading steps fit in max_length (the rest are scored None)."""
        length = len(self.encoder.prompt_ids(problem))
        if length > self.max_length:
            return 0
        for i, step in enumerate(steps):
            length += len(self.encoder.step_ids(step))
            if length > self.max_length:
                return i
        return len(steps)

    def _missing(self, problem: str, steps: tuple[str, ...], got: dict[Key, float]
                 ) -> int | None:
        """Index of the first step without a score, None if all are known."""
        for i in range(len(steps)):
            key = (problem, steps[: i + 1])
            if key not in got and key not in self._scores:
                return i
        return None

    def _plan(self, problem: str, steps: tuple[str, ...], planned: set[Key],
              got: dict[Key, float], made: dict[Key, _Past]) -> _Job | None:
        """The job that scores the unknown steps of `steps` (all of which fit), or None
        when every score is known or the job must wait for a prefix planned in this wave."""
        first = self._missing(problem, steps, got)
        if first is None:
            return None
        start = next((k for k in range(first, -1, -1)
                      if (problem, steps[:k]) in made or (problem, steps[:k]) in self._pasts),
                     None)
        after = -1 if start is None else start
        if any((problem, steps[:j]) in planned for j in range(after + 1, len(steps) + 1)):
            return None  # a longer prefix is being computed in this wave: wait for it
        if start is None:  # nothing cached: the prompt first, shared by the problem's rows
            return _Job((problem, ()), None, list(self.encoder.prompt_ids(problem)), [], [])
        key = (problem, steps[:start])
        past = made.get(key) or self._pasts[key]
        if key in self._pasts:
            self._pasts.move_to_end(key)
        new_ids, offsets, keys = [], [], []
        for j in range(start, len(steps)):
            new_ids.extend(self.encoder.step_ids(steps[j]))
            offsets.append(len(new_ids) - 1)
            keys.append((problem, steps[: j + 1]))
        return _Job((problem, steps), past, new_ids, offsets, keys)

    def _batches(self, jobs: list[_Job]) -> list[list[_Row]]:
        """Jobs of one past packed in rows (at most token_budget new tokens each), rows
        sorted by width; a batch stays within both budgets and max_padding."""
        rows: dict[int, list[_Row]] = {}
        for job in jobs:
            shared = rows.setdefault(id(job.past) if job.past is not None else id(job), [])
            if not shared or shared[-1].width + len(job.new_ids) > self.token_budget:
                shared.append(_Row(job.past))
            shared[-1].jobs.append(job)
            shared[-1].width += len(job.new_ids)
        # widest past first: rows of one width stay in that order, pasts alike together
        order = sorted((r for group in rows.values() for r in group), key=lambda r: -r.past_len)
        groups = length_batches([r.width for r in order], [r.past_len for r in order],
                                token_budget=self.token_budget, max_padding=self.max_padding,
                                past_budget=self.past_budget, max_batch_size=self.max_batch_size)
        return [[order[k] for k in g] for g in groups]

    # ---- forward ------------------------------------------------------------------------
    def _run(self, rows: list[_Row], made: dict[Key, _Past]) -> dict[Key, float]:
        """One forward pass over `rows`; caches each job's new past (also in `made`) and
        step scores."""
        dev = self.scorer.device
        width = max(r.width for r in rows)
        past_width = max(r.past_len for r in rows)
        ids = torch.full((len(rows), width), self.scorer.pad_id, dtype=torch.long)
        positions = torch.zeros((len(rows), width), dtype=torch.long)
        # query i of row r may see its row's past (right-aligned before the new tokens)
        # and its own job's new tokens up to itself; a padding query sees itself only
        allowed = torch.zeros((len(rows), width, past_width + width), dtype=torch.bool)
        allowed[:, torch.arange(width), past_width + torch.arange(width)] = True
        labels, spans = [], []
        for r, row in enumerate(rows):
            a = 0
            allowed[r, : row.width, past_width - row.past_len: past_width] = True
            for job in row.jobs:
                b = a + len(job.new_ids)
                ids[r, a:b] = torch.tensor(job.new_ids, dtype=torch.long)
                positions[r, a:b] = torch.arange(row.past_len, row.past_len + b - a)
                allowed[r, a:b, past_width + a: past_width + b] = torch.ones(
                    b - a, b - a, dtype=torch.bool).tril()
                labels.extend((r, a + o) for o in job.label_offsets)
                spans.append((r, a, b, job))
                a = b

        model = self.model
        was_training = model.training
        model.eval()
        probs: list[float] = []
        try:
            with torch.inference_mode(), torch.autocast(dev.type, dtype=self.scorer.dtype,
                                                        enabled=self.scorer.autocast):
                cache = self._batch_cache(rows, past_width, dev)
                mask = additive_attention_mask(allowed.to(dev), model.compute_dtype)
                out = model.backbone.get_decoder()(
                    input_ids=ids.to(dev), attention_mask=mask, position_ids=positions.to(dev),
                    past_key_values=cache, use_cache=True)
                if labels:
                    at = torch.tensor(labels, dtype=torch.long, device=dev)
                    logits = model.classify(out.last_hidden_state[at[:, 0], at[:, 1]])
                    probs = model.correct_probability(logits.float()).cpu().tolist()
                # the new columns of every layer in one copy: [2, layers, rows, kv_heads, width, d]
                new = torch.stack([torch.stack([layer.keys[:, :, past_width:],
                                                layer.values[:, :, past_width:]])
                                   for layer in cache.layers], dim=1)
                for r, a, b, job in spans:
                    made[job.key] = _Past(new[:, :, r, :, a:b].clone(), job.past)
                    self._store_past(job.key, made[job.key])
        finally:
            model.train(was_training)
        self.tokens_scored += sum(r.width for r in rows)
        keys = (key for r in rows for job in r.jobs for key in job.label_keys)
        scores = dict(zip(keys, probs, strict=True))
        for key, p in scores.items():
            self._store_score(key, p)
        return scores

    def _batch_cache(self, rows: list[_Row], past_width: int, dev: torch.device):
        """A DynamicCache holding each row's past, right-aligned in `past_width` columns."""
        from transformers import DynamicCache

        if past_width == 0:
            return DynamicCache()
        ref = next(r.past for r in rows if r.past is not None).pieces()[0]
        shape = (ref.shape[0], ref.shape[1], len(rows), ref.shape[2], past_width, ref.shape[4])
        if len(rows) == 1:
            kv = torch.cat(rows[0].past.pieces(), dim=-2).unsqueeze(2)
        else:
            kv = torch.zeros(shape, dtype=ref.dtype, device=dev)
            for r, row in enumerate(rows):
                at = past_width - row.past_len
                for piece in row.past.pieces() if row.past is not None else []:
                    kv[:, :, r, :, at: at + piece.shape[-2]] = piece
                    at += piece.shape[-2]
        return DynamicCache([(kv[0, i], kv[1, i]) for i in range(shape[1])])

    # ---- caches -------------------------------------------------------------------------
    def _store_past(self, key: Key, past: _Past) -> None:
        old = self._pasts.pop(key, None)
        if old is not None:
            self._cached_tokens -= old.length
        self._pasts[key] = past
        self._cached_tokens += past.length
        while self._pasts and (
                len(self._pasts) > self.max_cached_prefixes
                or (self.max_cached_tokens is not None
                    and self._cached_tokens > self.max_cached_tokens)):
            self._cached_tokens -= self._pasts.popitem(last=False)[1].length

    def _store_score(self, key: Key, p: float) -> None:
        self._scores[key] = p
        self._scores.move_to_end(key)
        while len(self._scores) > self.max_cached_scores:
            self._scores.popitem(last=False)

    def _result(self, problem: str, steps: tuple[str, ...], fit: int,
                got: dict[Key, float]) -> list[float | None]:
        probs: list[float | None] = []
        for i in range(fit):
            key = (problem, steps[: i + 1])
            if key in got:
                probs.append(got[key])
            else:
                probs.append(self._scores[key])
                self._scores.move_to_end(key)
        probs.extend([None] * (len(steps) - fit))
        if self.orm:
            return probs[-1:]
        return probs


def _check_full_attention(backbone, max_length: int) -> None:
    """Cached prefixes assume every layer attends to every earlier token."""
    if not full_attention_within(backbone, max_length):
        window = backbone.config.get_text_config().sliding_window
        raise PrmkitError(f"{type(backbone).__name__} uses sliding-window attention "
                          f"({window} tokens < max_length {max_length}): incremental scoring "
                          "supports full-attention models only")
