"""Score solutions with a trained step (or outcome) reward model.

Every step of a solution is scored from ONE forward pass: the solution is encoded with
the model's own `SegmentEncoder` (the formatting used in training) and the class logits
are read at each step's label position. Many solutions are scored in length-sorted
dynamic batches under a token budget (right padding, 2D attention mask); results come
back in input order. With `share_prefixes`, completions of one prompt reuse the prompt's
keys and values: the prompt runs once (prmkit.scoring.prefix_batches).
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from prmkit.errors import PrmkitError
from prmkit.models.attention import (
    TREE_MASK_IMPLEMENTATIONS,
    attn_implementation_of,
    full_attention_within,
)
from prmkit.models.backbones import resolve_dtype
from prmkit.scoring.length_batches import length_batches
from prmkit.scoring.parallel import DataParallel
from prmkit.scoring.prefix_batches import (
    MIN_SAVED_TOKENS,
    PromptCache,
    collate_shared,
    group_by_prompt,
    pays,
    shared_label_logits,
    waves,
)

log = logging.getLogger("prmkit.scoring")

@dataclass
class SolutionScores:
    """Scores of one solution.

    step_probs[i] is P(step i correct), or None when step i was cut by max_length. An
    outcome model (objective "orm") gives one value: the score after the last step.
    class_probs (three-class models only) holds [p(+1), p(0), p(-1)] per entry of
    step_probs (None where the step was cut).
    """

    step_probs: list[float | None]
    class_probs: list[list[float] | None] | None = None
    truncated: int = 0  # entries of step_probs left None by max_length


@dataclass
class Encoded:
    input_ids: list[int]
    label_positions: list[int]
    slots: list[int]  # index into the result's step_probs for each label position (-1: an
    num_slots: int    # anchor the model reads but that gets no score, see LayoutEncoder)
    prompt_len: int = 0  # the first prompt_len input_ids are the prompt's

    @property
    def scored(self) -> int:
        return sum(s >= 0 for s in self.slots)


def encode_for_scoring(encoder, config, problem: str, steps: Sequence[str]) -> Encoded:
    """Token ids and label positions of one solution (what gets scored): every step's label
    for a PRM, the last one for an ORM (none when the last step was cut by max_length)."""
    steps = list(steps)
    orm = config.objective == "orm"
    num_slots = (1 if steps else 0) if orm else len(steps)
    if not steps:
        return Encoded([], [], [], 0)
    if len(encoder.prompt_ids(problem)) > encoder.fmt.max_length:
        return Encoded([], [], [], num_slots)  # nothing fits: every score is None
    enc = encoder.encode(problem, steps)
    if orm:
        if len(enc.step_indices) < len(steps):  # the last step was cut: no outcome score
            return Encoded([], [], [], 1)
        positions, slots = enc.label_positions[-1:], [0]
    else:
        positions, slots = enc.label_positions, enc.step_indices
    # Tokens after the last label cannot change any score (causal attention).
    ids = enc.input_ids[: positions[-1] + 1] if positions else []
    return Encoded(ids, positions, slots, num_slots, len(encoder.prompt_ids(problem)))


@dataclass
class Batch:
    """One padded batch: `rows[r]` is the item index of row r. With `shared`, the rows
    hold completions only, run on their prompts' cached keys/values (prefix_batches)."""

    rows: list[int]
    input_ids: torch.Tensor  # [B, L], right padded
    attention_mask: torch.Tensor | None  # [B, L] (None when no row is padded)
    label_positions: torch.Tensor  # [K, 2] (row, token index)
    owners: list[tuple[int, int]] = field(default_factory=list)  # (item, slot) per label
    shared: Any = None  # a prefix_batches.SharedRows

    @property
    def num_tokens(self) -> int:
        """Real (unpadded) tokens in the batch (a shared prompt's not counted)."""
        if self.shared is not None:
            return self.shared.num_tokens
        if self.attention_mask is None:
            return self.input_ids.numel()
        return int(self.attention_mask.sum())


def as_problem_steps(item: Any) -> tuple[str, Sequence[str]]:
    """(problem, steps) from a pair, a dict with problem/steps or a record with attributes."""
    if isinstance(item, dict):
        return item["problem"], item.get("steps") or []
    if isinstance(item, tuple | list) and len(item) == 2:
        return item[0], item[1]
    if hasattr(item, "problem") and hasattr(item, "steps"):
        problem = item.problem
        return getattr(problem, "text", problem), item.steps
    raise PrmkitError(f"cannot score {type(item).__name__}: expected (problem, steps)")


class Scorer:
    """Batch scoring with a `StepRewardModel`; the caller's model is never modified (its
    weights, dtype and training flag stay as they are; only `device` moves it, when given).

    dtype: the compute dtype; "auto" (the default): bf16 where the device computes it
    natively, else fp32 (prmkit.models.precision); None runs the model as it is,
    and so does a dtype equal to the backbone's. By default the forward runs under
    torch.autocast(dtype) on the caller's weights. cast_weights=True scores with a copy of
    the model whose backbone is cast to dtype (the classification head stays fp32): bf16
    matmuls without per-call weight casts, at the cost of the copy's memory. fp32 on
    lower-precision weights always takes a copy (autocast cannot raise precision).
    `Scorer.from_pretrained` loads a model of its own and casts it in place (no copy).
    token_budget: the most tokens (padding included) in one forward pass.
    max_padding: a row joins a batch only if it needs at most this fraction of padding.
    device: where to run ("auto": the GPU when there is one); None leaves the model where
    it is. parallel: a `DataParallel` of the launch's processes, each scoring its share of
    every chunk (results merged in input order on every process).
    share_prefixes: items whose prompts encode to the same tokens run the prompt once and
    each completion on its cached keys/values, same results; ignored for published-family
    models, flash_attention_2 and sliding-window models, which keep padded rows. Prompts
    are shared where that pays: `min_shared_tokens`, the prompt tokens sharing must save
    to pay for the prompts' own forward (prefix_batches; measured).
    """

    def __init__(self, model, token_budget: int = 16384, dtype: str | torch.dtype | None = "auto",
                 device: str | torch.device | None = None, cast_weights: bool = False,
                 max_batch_size: int | None = None, max_padding: float = 0.15,
                 parallel: DataParallel | None = None, share_prefixes: bool = False, *,
                 _source: str | None = None):
        from prmkit.models.backbones import resolve_device
        from prmkit.models.precision import compute_dtype

        if token_budget < 1:
            raise PrmkitError(f"token_budget must be positive, got {token_budget}")
        self.token_budget = int(token_budget)
        self.max_batch_size = max_batch_size
        self.max_padding = max_padding
        self.share_prefixes = share_prefixes
        self.min_shared_tokens = MIN_SAVED_TOKENS
        first = next(model.backbone.parameters())
        self.dtype = resolve_dtype(compute_dtype(
            dtype, first.device if device is None else resolve_device(device)))
        weights = first.dtype
        change = self.dtype is not None and self.dtype != weights
        self.cast_weights = change and (cast_weights or self.dtype == torch.float32)
        self.autocast = change and not self.cast_weights
        self.source = _source  # the folder of from_pretrained, else None
        self.parallel = parallel or DataParallel()
        self._given_model = model  # never modified: fingerprinted on demand
        if self.cast_weights and _source is None:
            model = copy.deepcopy(model)
        self.model = model
        if device is not None:
            self.model.to(resolve_device(device))
        self.device = next(self.model.backbone.parameters()).device
        if self.cast_weights:
            self.model.backbone.to(self.dtype)
        self.config = model.config
        self.encoder = model.encoder
        pad = model.tokenizer.pad_token_id
        if pad is None:
            pad = model.tokenizer.eos_token_id
        self.pad_id = 0 if pad is None else int(pad)

    @classmethod
    def from_pretrained(cls, folder: str | Path, token_budget: int = 16384,
                        dtype: str | torch.dtype | None = "auto",
                        device: str | torch.device | None = "auto",
                        attn_implementation: str | None = None, format: str | None = None,
                        trust_remote_code: bool = False, **kw) -> Scorer:
        """Load a saved model straight in `dtype` (the head stays fp32) on `device` (auto:
        the GPU when there is one; under a multi-process launch, each process's own).
        `folder` may also be a Hub id or a published PRM: `format` (a family name or spec
        file) and `trust_remote_code` as in `prmkit.models.loading.load_reward_model`."""
        from prmkit.models.backbones import resolve_device
        from prmkit.models.loading import load_reward_model
        from prmkit.models.precision import compute_dtype

        parallel = kw.get("parallel")
        if parallel is not None and parallel.world > 1 and device in (None, "auto"):
            device = parallel.device
        device = resolve_device(device)
        dtype = compute_dtype(dtype, device)
        from prmkit.data.hub import resolve_model_folder

        folder = resolve_model_folder(folder)
        model = load_reward_model(folder, dtype=dtype, device=device,
                                  attn_implementation=attn_implementation, format=format,
                                  trust_remote_code=trust_remote_code)
        kw.setdefault("cast_weights", True)  # nobody else holds this model: cast in place
        return cls(model, token_budget=token_budget, dtype=dtype, device=device,
                   _source=str(Path(folder).resolve()), **kw)

    @functools.cached_property
    def fingerprint(self) -> str:
        """Short digest of the model (see prmkit.scoring.provenance)."""
        from prmkit.scoring.provenance import folder_fingerprint, weights_fingerprint

        if self.source is not None:
            return folder_fingerprint(self.source)
        return weights_fingerprint(self._given_model)

    def record(self, aggregation: str) -> dict:
        """The `scored_by` record written with every scored line."""
        dtype = self.dtype or next(self.model.backbone.parameters()).dtype
        return {"model": self.source or f"in-memory {type(self._given_model).__name__}",
                "fingerprint": self.fingerprint, "aggregation": str(aggregation),
                "max_length": self.encoder.fmt.max_length,
                "dtype": str(dtype).removeprefix("torch."),
                **({"format": self.config.family} if self.config.family else {})}

    # ---- encoding and batching ------------------------------------------------------
    def encode(self, problem: str, steps: Sequence[str]) -> Encoded:
        """Token ids and label positions of one solution (what gets scored)."""
        return encode_for_scoring(self.encoder, self.config, problem, steps)

    @property
    def shares_prefixes(self) -> bool:
        """Whether completions of one prompt run on the prompt's cached keys/values."""
        backbone = self.model.backbone
        return (self.share_prefixes and not self.config.family
                and getattr(self.encoder, "prefix_stable", True)
                and attn_implementation_of(backbone) in TREE_MASK_IMPLEMENTATIONS
                and full_attention_within(backbone, self.encoder.fmt.max_length))

    def plan_batches(self, encoded: Sequence[Encoded]) -> list[Batch]:
        """Length-sorted batches whose padded size stays within the token budget; a row is
        never padded by more than `max_padding` of the batch's longest row."""
        if self.shares_prefixes:
            return self._plan_shared_batches(encoded)
        return self._plain_batches([i for i, e in enumerate(encoded) if e.label_positions],
                                   encoded)

    def _plain_batches(self, items: list[int], encoded: Sequence[Encoded]) -> list[Batch]:
        groups = self._length_batches([len(encoded[i].input_ids) for i in items])
        return [self._collate([items[k] for k in g], encoded) for g in groups]

    def _length_batches(self, lengths: Sequence[int], past: Sequence[int] | None = None
                        ) -> list[list[int]]:
        return length_batches(lengths, past, token_budget=self.token_budget,
                              max_padding=self.max_padding, max_batch_size=self.max_batch_size)

    def _collate(self, rows: list[int], encoded: Sequence[Encoded]) -> Batch:
        width = max(len(encoded[i].input_ids) for i in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        positions, owners = [], []
        for r, i in enumerate(rows):
            e = encoded[i]
            ids[r, : len(e.input_ids)] = torch.tensor(e.input_ids, dtype=torch.long)
            mask[r, : len(e.input_ids)] = 1
            positions.extend((r, p) for p in e.label_positions)
            owners.extend((i, s) for s in e.slots)
        padded = bool((mask == 0).any())
        return Batch(rows, ids, mask if padded else None,
                     torch.tensor(positions, dtype=torch.long), owners)

    def _plan_shared_batches(self, encoded: Sequence[Encoded]) -> list[Batch]:
        """Waves of prompts with several completions (at most token_budget prompt tokens),
        shared where that pays: their completions batched by length, each row reading its
        prompt's cached keys/values; padded rows for the rest."""
        plain, groups = group_by_prompt(encoded)
        out = []
        for wave in waves(groups, self.token_budget):
            items = [i for members in wave.values() for i in members]
            if not pays(wave, self.min_shared_tokens):
                plain.extend(items)
                continue
            cache = PromptCache(list(wave))
            cache.plan(self.token_budget)
            suffix = [len(encoded[i].input_ids) - encoded[i].prompt_len for i in items]
            for group in self._length_batches(suffix, [encoded[i].prompt_len for i in items]):
                rows = collate_shared([items[k] for k in group], encoded, cache, self.pad_id)
                out.append(Batch(rows=[items[k] for k in group], input_ids=rows.input_ids,
                                 attention_mask=rows.real, label_positions=rows.label_positions,
                                 owners=rows.owners, shared=rows))
        return self._plain_batches(sorted(plain), encoded) + out

    # ---- forward ------------------------------------------------------------------------
    def run_batch(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(P(correct) [K], class probabilities [K, C]) for the batch's label positions."""
        dev = self.device
        mask = None if batch.attention_mask is None else batch.attention_mask.to(dev)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode(), torch.autocast(self.device.type, dtype=self.dtype,
                                                        enabled=self.autocast):
                if batch.shared is not None:
                    logits = shared_label_logits(self.model, batch.shared, self.pad_id, dev)
                else:
                    logits = self.model(batch.input_ids.to(dev), batch.label_positions.to(dev),
                                        attention_mask=mask)
        finally:
            self.model.train(was_training)
        logits = logits.float().cpu()
        return self.model.correct_probability(logits), logits.softmax(-1)

    def score_chunk(self, items: Sequence[Any],
                    on_solutions_done: Callable[[int], Any] | None = None
                    ) -> list[SolutionScores]:
        """Score `items` (this process's share of them under data parallelism);
        `on_solutions_done(n)` is called after each batch with the number of solutions it
        completed (for progress bars), or once for the whole chunk under data parallelism,
        where one process's batches are only its share."""
        if self.parallel.world == 1:
            return self._score_local(items, on_solutions_done)
        out = self.parallel.map(items, lambda mine: self._score_local(mine))
        if on_solutions_done is not None:
            on_solutions_done(len(items))
        return out

    def _score_local(self, items: Sequence[Any],
                     on_solutions_done: Callable[[int], Any] | None = None
                     ) -> list[SolutionScores]:
        encoded = [self.encode(*as_problem_steps(it)) for it in items]
        three = self.config.num_classes == 3
        out = [SolutionScores([None] * e.num_slots, [None] * e.num_slots if three else None,
                              truncated=e.num_slots - e.scored) for e in encoded]
        slots_left = [e.scored for e in encoded]
        advance = on_solutions_done or (lambda n: None)
        advance(slots_left.count(0))
        for batch in self.plan_batches(encoded):
            p_correct, classes = self.run_batch(batch)
            p_correct, classes = p_correct.tolist(), classes.tolist()
            completed = 0
            for k, (item, slot) in enumerate(batch.owners):
                if slot < 0:
                    continue
                out[item].step_probs[slot] = p_correct[k]
                if three:
                    out[item].class_probs[slot] = classes[k]
                slots_left[item] -= 1
                completed += slots_left[item] == 0
            advance(completed)
        return out

    def iter_scores(self, items: Iterable[Any], chunk_size: int = 512,
                    progress: bool = False) -> Iterator[SolutionScores]:
        """Stream `SolutionScores` in input order, sorting and batching `chunk_size` items
        at a time (memory stays bounded for any number of items)."""
        from prmkit.progress import progress_bar

        total = len(items) if hasattr(items, "__len__") else None
        with progress_bar(total=total, desc="scoring", unit="solution",
                          enabled=progress) as bar:
            chunk: list[Any] = []
            for item in items:
                chunk.append(item)
                if len(chunk) >= chunk_size:
                    yield from self.score_chunk(chunk, bar.update)
                    chunk = []
            if chunk:
                yield from self.score_chunk(chunk, bar.update)

    def score(self, items: Iterable[Any], chunk_size: int = 512,
              progress: bool = False) -> list[list[float | None]]:
        """Per-step P(correct) for each item ((problem, steps) pairs, dicts or records)."""
        return [s.step_probs for s in self.iter_scores(items, chunk_size, progress)]

    def score_detailed(self, items: Iterable[Any], chunk_size: int = 512,
                       progress: bool = False) -> list[SolutionScores]:
        """Like `score`, with the class probabilities of three-class models."""
        return list(self.iter_scores(items, chunk_size, progress))

    score_many = score

    def score_file(self, in_path, out_path, **kw):
        """Score a JSONL file into another (see `prmkit.scoring.files.score_file`)."""
        from prmkit.scoring.files import score_file

        return score_file(self, in_path, out_path, **kw)


def score_steps(model, problem: str, steps: Sequence[str]) -> list[float | None]:
    """P(correct) of every step of one solution, from one forward pass of `model` as it
    is (its own dtype, in eval mode). Steps cut by the model's max_length get None; an
    outcome model gives a single value for the whole solution."""
    return Scorer(model, dtype=None, token_budget=1 << 62).score([(problem, steps)])[0]
