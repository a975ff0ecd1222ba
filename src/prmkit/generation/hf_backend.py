"""Sampling with transformers over a local model folder: no dependency beyond transformers.

Batches run `prmkit.models.decoding.decode`: `generate`'s loop (transformers' forward and
KV cache) with each row taken out of the batch as it ends, so a batch whose rows end at
different lengths does not compute the ended ones to the longest's end.

Every sample (row) draws its tokens from its own `torch.Generator`, seeded with
`sample_seed(request seed, key, index)` (as the vLLM backend does; seed + index would make
requests with seeds 0 and 1 share samples), so a sample depends on its request only, not on `n`, on the other rows of its batch or on resume. Rows of
several requests share a batch (left padding, KV cache); batching changes only the
rounding of the logits, which in float32 never moved a sample in our tests. In bf16/fp16
a near tie can resolve differently in another batch: use `batch_size=1` or float32 for
bit-identical repeats there.

Stop strings are checked on the generated text only (never across the prompt boundary);
the completion is cut before the first one. `Completion.extra["token_ids"]` holds the
generated tokens counted in `num_tokens` (up to the stop or the end-of-sequence token).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from prmkit.errors import PrmkitError
from prmkit.generation.base import (
    Completion,
    ProgressBar,
    RequestOutput,
    SampleRequest,
    SamplingParams,
    StreamingSampler,
    prompt_token_ids,
    sample_bar,
    sample_seed,
)
from prmkit.models.decoding import decode, left_padded

log = logging.getLogger(__name__)

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
          "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}


def model_folder(model: str | Path) -> Path:
    """The local folder of `model` (a folder, the `smollm2-135m` alias, or a Hub id through
    the Hub cache or the Hub), checked to hold a model."""
    from prmkit.data.hub import check_not_a_run, parse_hub_name, resolve_model_folder

    if str(model) == "smollm2-135m":
        from prmkit.models.backbones import smollm2_folder

        return smollm2_folder()
    path = Path(model).expanduser()
    if not path.exists() and parse_hub_name(str(model)) is not None:
        path = resolve_model_folder(str(model))
    if not path.is_dir():
        raise PrmkitError(f"model folder {str(path)!r} not found (a local folder, the "
                          "smollm2-135m alias or a Hub id OWNER/NAME)")
    check_not_a_run(path)
    if not (path / "config.json").is_file():
        raise PrmkitError(f"{str(path)!r} is not a Hugging Face model folder: no config.json")
    return path.resolve()


class RowSampler:
    """`decode`'s pick: each running row's next token drawn with that row's generator
    (temperature, top-p; greedy at temperature 0).

    The pick is `torch.multinomial(p, 1, generator=g)`'s, token for token: for one sample
    torch draws q ~ Exp(1) per token from `g` and takes argmax(p / q). Here each row draws
    its q from its own generator and one batched division and argmax pick every row's
    token instead of one multinomial call per row (a test checks the picks equal
    multinomial's; benchmarks/bench_hf_sampling.py times both)."""

    def __init__(self, generators: list[torch.Generator], temperature: float, top_p: float):
        self.generators, self.temperature, self.top_p = generators, temperature, top_p

    def __call__(self, scores: torch.Tensor, running: torch.Tensor) -> torch.Tensor:
        """The tokens of the rows `running` (the generators' indices of `scores`' rows)."""
        if self.temperature == 0:
            return scores.argmax(dim=-1)
        return self.pick(self.probabilities(scores), running.tolist())

    def probabilities(self, scores: torch.Tensor) -> torch.Tensor:
        """Each row's sampling distribution: tempered, then cut to its top-p nucleus."""
        probs = torch.softmax(scores.float() / self.temperature, dim=-1)
        if self.top_p < 1:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            drop = sorted_probs.cumsum(-1) - sorted_probs >= self.top_p  # keeps at least one
            probs = probs.scatter(-1, order, sorted_probs.masked_fill(drop, 0.0))
        if not torch.isfinite(probs).all():
            raise PrmkitError("the model returned scores that are not finite numbers")
        return probs

    def pick(self, probs: torch.Tensor, rows: Sequence[int]) -> torch.Tensor:
        """One token per row, drawn from `probs` with the row's generator (`rows`: the
        generators' indices of `probs`' rows)."""
        q = torch.empty_like(probs)
        for row, g in zip(q, (self.generators[r] for r in rows), strict=True):
            row.exponential_(1, generator=g)
        return (probs / q).argmax(dim=-1)


class StopOnText:
    """Stops a row when its generated text (not the prompt) contains a stop string, and
    records after how many generated tokens."""

    def __init__(self, tokenizer, stops: Sequence[str], prompt_length: int, rows: int):
        self.tokenizer, self.stops, self.prompt_length = tokenizer, tuple(stops), prompt_length
        self.window = max((len(s) for s in stops), default=0) + 4  # tokens: >= 1 char each
        self.stopped_at: list[int | None] = [None] * rows

    def check(self, input_ids: torch.Tensor, rows: Sequence[int]) -> torch.Tensor:
        """Whether each of `rows` (of the batch `input_ids`) has stopped."""
        done = torch.zeros(len(rows), dtype=torch.bool, device=input_ids.device)
        generated = input_ids.shape[1] - self.prompt_length
        if not self.stops:
            return done
        start = max(self.prompt_length, input_ids.shape[1] - self.window)
        tails = self.tokenizer.batch_decode(input_ids[list(rows), start:].tolist(),
                                            skip_special_tokens=False)
        for i, (row, tail) in enumerate(zip(rows, tails, strict=True)):
            if self.stopped_at[row] is None and any(s in tail for s in self.stops):
                self.stopped_at[row] = generated
            done[i] = self.stopped_at[row] is not None
        return done


class RowsEnded:
    """Advances `bar` by one as each row ends (its end-of-sequence token, or a stop string
    seen by `stop`, which must run first), so progress moves while a batch is generated;
    `finish()` counts the rows still running (cut by the length)."""

    def __init__(self, eos_ids: Sequence[int], stop: StopOnText, bar: ProgressBar):
        self.eos_ids, self.stop, self.bar = set(eos_ids), stop, bar
        self.ended = [False] * len(stop.stopped_at)

    def seen(self, input_ids: torch.Tensor, rows: Sequence[int]) -> None:
        """Counts which of `rows` ended with the last token of `input_ids`."""
        new = 0
        for row, token in zip(rows, input_ids[list(rows), -1].tolist(), strict=True):
            if not self.ended[row] and (token in self.eos_ids
                                        or self.stop.stopped_at[row] is not None):
                self.ended[row] = True
                new += 1
        if new:
            self.bar.update(new)

    def finish(self) -> None:
        rest = self.ended.count(False)
        self.ended = [True] * len(self.ended)
        if rest:
            self.bar.update(rest)


@dataclass
class _Row:
    request: int
    index: int
    prompt_ids: list[int]
    seed: int


class HFSampler(StreamingSampler):
    """Samples with transformers (`decode`: `generate`'s loop) from a local model folder.

    device: default cuda when available, else cpu. dtype: fp32/bf16/fp16 (default fp32 on
    cpu, bf16 on cuda). batch_size: rows (samples) decoded together. seed: the base of
    request seeds when a request gives none (then derived from it and the request key).
    Options meant for other backends are ignored with a warning.
    """

    backend = "hf"

    def __init__(self, model: str | Path, device: str | None = None, dtype: str | None = None,
                 batch_size: int = 16, seed: int = 0, **ignored_options):
        if ignored_options:
            log.warning("the hf backend ignores options %s", ", ".join(sorted(ignored_options)))
        if batch_size < 1:
            raise PrmkitError(f"batch_size must be >= 1, got {batch_size}")
        folder = model_folder(model)
        self.model = str(folder)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if dtype is None:
            dtype = "bf16" if self.device.type == "cuda" else "fp32"
        if dtype not in DTYPES:
            raise PrmkitError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
        self.dtype, self.batch_size, self.seed = DTYPES[dtype], batch_size, seed
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(folder)
            self.lm = AutoModelForCausalLM.from_pretrained(folder, dtype=self.dtype)
        except (OSError, ValueError, KeyError) as e:
            raise PrmkitError(f"cannot load a causal LM and its tokenizer from {str(folder)!r}: "
                              f"{e}") from e
        self.lm.to(self.device).eval()
        eos = {self.tokenizer.eos_token_id, *_as_list(self.lm.generation_config.eos_token_id)}
        self.eos_ids = sorted(i for i in eos if i is not None)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0)
        from prmkit.scoring.provenance import folder_fingerprint

        self.fingerprint = folder_fingerprint(folder)

    def describe(self) -> dict:
        return {"backend": self.backend, "model": self.model, "fingerprint": self.fingerprint,
                "dtype": str(self.dtype).removeprefix("torch.")}

    def close(self) -> None:
        self.lm = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def prompt_ids(self, request: SampleRequest) -> list[int]:
        if request.prompt.messages is not None and not getattr(self.tokenizer, "chat_template",
                                                               None):
            raise PrmkitError(f"request {request.key!r} is a chat prompt but the tokenizer "
                              f"of {self.model} has no chat template")
        return prompt_token_ids(self.tokenizer, request.prompt)

    def iter_generate(self, requests: Sequence[SampleRequest], params: SamplingParams,
                      progress: bool | ProgressBar = False
                      ) -> Iterator[tuple[int, RequestOutput]]:
        """Yield `(index in requests, output)` as soon as a batch completes a request's
        rows; the bar moves as each row ends (its end of sequence or stop string), inside
        a `generate` call."""
        if self.lm is None:
            raise PrmkitError("the sampler is closed")
        rows = []
        prompt_tokens = []
        for r, req in enumerate(requests):
            ids = self.prompt_ids(req)
            prompt_tokens.append(len(ids))
            seed = req.seed if req.seed is not None else sample_seed(self.seed, req.key)
            rows += [_Row(r, j, ids, sample_seed(seed, req.key, j)) for j in range(req.n)]
        done: list[list[Completion | None]] = [[None] * req.n for req in requests]
        left = [req.n for req in requests]
        for r, req in enumerate(requests):
            if req.n == 0:
                yield r, RequestOutput(req.key, [], prompt_tokens[r])
        order = sorted(range(len(rows)), key=lambda i: len(rows[i].prompt_ids))  # less padding
        bar = sample_bar(progress, len(rows), "generating")
        tokens, start = 0, time.perf_counter()
        try:
            for b in range(0, len(order), self.batch_size):
                batch = [rows[i] for i in order[b:b + self.batch_size]]
                for row, completion in zip(batch, self._generate_rows(batch, params, bar),
                                           strict=True):
                    done[row.request][row.index] = completion
                    left[row.request] -= 1
                    tokens += completion.num_tokens
                    if left[row.request] == 0:
                        yield row.request, RequestOutput(requests[row.request].key,
                                                         done[row.request],
                                                         prompt_tokens[row.request])
                bar.set_postfix_str(f"{tokens / (time.perf_counter() - start):.1f} tok/s",
                                    refresh=False)
        finally:
            bar.close()

    @torch.inference_mode()
    def _generate_rows(self, rows: list[_Row], params: SamplingParams,
                       bar: ProgressBar) -> list[Completion]:
        input_ids, mask = left_padded([r.prompt_ids for r in rows], self.pad_id)
        width = input_ids.size(1)
        generators = [torch.Generator(self.device).manual_seed(r.seed) for r in rows]
        stop = StopOnText(self.tokenizer, params.stop, width, len(rows))
        ended = RowsEnded(self.eos_ids, stop, bar)

        def stopped(ids: torch.Tensor, running: torch.Tensor) -> torch.Tensor:
            running = running.tolist()
            done = stop.check(ids, running)
            ended.seen(ids, running)
            return done

        out = decode(self.lm, input_ids.to(self.device), mask.to(self.device),
                     params.max_tokens, self.eos_ids, self.pad_id,
                     RowSampler(generators, params.temperature, params.top_p), stopped)
        ended.finish()  # the rows cut at max_new_tokens
        generated = out[:, width:].tolist()
        return [self._completion(ids, stop.stopped_at[i], params)
                for i, ids in enumerate(generated)]

    def _completion(self, ids: list[int], stopped_at: int | None,
                    params: SamplingParams) -> Completion:
        eos_at = next((k for k, t in enumerate(ids) if t in self.eos_ids), None)
        if stopped_at is not None and (eos_at is None or stopped_at <= eos_at):
            kept = ids[:stopped_at]
            text = self.tokenizer.decode(kept, skip_special_tokens=True)
            found = [(p, s) for s in params.stop if (p := text.find(s)) >= 0]
            cut, which = min(found) if found else (None, None)
            return Completion(text if cut is None else text[:cut], len(kept), "stop",
                              {"token_ids": kept, "stop_reason": which})
        if eos_at is not None:  # the end-of-sequence token counts as generated
            text = self.tokenizer.decode(ids[:eos_at], skip_special_tokens=True)
            return Completion(text, eos_at + 1, "stop",
                              {"token_ids": ids[:eos_at + 1], "stop_reason": None})
        return Completion(self.tokenizer.decode(ids, skip_special_tokens=True), len(ids),
                          "length", {"token_ids": ids, "stop_reason": None})


def _as_list(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]
