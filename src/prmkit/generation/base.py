"""The one interface every sampling backend implements, and the records it trades in.

`search` and `active` import only this module; a backend (vLLM in process, an
OpenAI-compatible server, Hugging Face `generate`) is picked by name with `get_sampler`,
which imports the backend's module (and its heavy dependencies) only when asked for.
"""

from __future__ import annotations

import hashlib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal, Protocol

from prmkit.errors import PrmkitError

Backend = Literal["vllm", "openai", "hf"]
BACKENDS: dict[str, str] = {
    "vllm": "prmkit.generation.vllm_backend:VllmSampler",
    "openai": "prmkit.generation.openai_backend:OpenAISampler",
    "hf": "prmkit.generation.hf_backend:HFSampler",
}


# The one default of each sampling setting: `prmkit generate`, `prmkit search`, the search
# config and the active loop all start from these (temperature 0.8 as search-and-learn).
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_P = 1.0
DEFAULT_MAX_TOKENS = 1024


@dataclass(frozen=True)
class SamplingParams:
    """What every backend honours. `stop` strings end a completion and are not part of it.
    `max_tokens` bounds one completion (a whole solution, or one search step)."""

    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    max_tokens: int = DEFAULT_MAX_TOKENS
    stop: tuple[str, ...] = ()

    def __post_init__(self):
        if self.temperature < 0:
            raise PrmkitError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise PrmkitError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise PrmkitError(f"max_tokens must be >= 1, got {self.max_tokens}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Prompt:
    """Plain text (a completion prompt) or chat messages (the backend applies the model's
    chat template with its generation prompt, or sends them to `/v1/chat/completions`).
    `continuation`, with messages only: the start of the assistant's answer (the steps
    written so far), which the model continues; the prompt is then the template's text
    followed by it, so it extends the same conversation's prompt without it."""

    text: str | None = None
    messages: tuple[dict, ...] | None = None
    continuation: str | None = None

    def __post_init__(self):
        if (self.text is None) == (self.messages is None):
            raise PrmkitError("a prompt is either text or chat messages, not both or neither")
        if self.continuation is not None and self.messages is None:
            raise PrmkitError("a continuation goes with chat messages; a text prompt holds "
                              "it in its text")


def prompt_token_ids(tokenizer, prompt: Prompt) -> list[int]:
    """The one encoding of a prompt for a local tokenizer (the hf and vllm backends): text
    with the tokenizer's special tokens (its BOS); chat messages through the chat template
    with the generation prompt, then the continuation, encoded without adding special
    tokens (the template writes its own), so a conversation's prompt with a continuation
    starts with its tokens without one."""
    if prompt.messages is None:
        return list(tokenizer(prompt.text)["input_ids"])
    if not getattr(tokenizer, "chat_template", None):
        raise PrmkitError("a chat prompt needs a tokenizer with a chat template")
    text = tokenizer.apply_chat_template([dict(m) for m in prompt.messages], tokenize=False,
                                         add_generation_prompt=True)
    return list(tokenizer(text + (prompt.continuation or ""),
                          add_special_tokens=False)["input_ids"])


@dataclass(frozen=True)
class SampleRequest:
    """`n` samples of one prompt. `seed` makes them repeatable on the same backend;
    `key` is the caller's id for the request (outputs are matched to requests by it)."""

    key: str
    prompt: Prompt
    n: int = 1
    seed: int | None = None


@dataclass
class Completion:
    """`extra["stop_reason"]`: the stop string that ended the completion, None when it
    ended at the end of sequence or the length limit (as vLLM reports it). Backends that
    know set it; step-by-step search reads a missing one as "ended at the step separator"."""

    text: str
    num_tokens: int  # generated tokens
    finish_reason: str  # "stop" (a stop string or end of sequence) or "length"
    extra: dict = field(default_factory=dict)


@dataclass
class RequestOutput:
    key: str
    completions: list[Completion]
    prompt_tokens: int = 0


class ProgressBar(Protocol):
    """What a caller may pass as `progress` to a streaming backend (a tqdm bar is one): the
    backend advances it by one as each sample finishes."""

    def update(self, n: int = 1) -> object: ...

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> object: ...


class _BorrowedBar:
    """The caller's bar, advanced by a backend and left open for the caller to close."""

    def __init__(self, bar: ProgressBar):
        self.bar = bar

    def update(self, n: int = 1) -> None:
        self.bar.update(n)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.bar.set_postfix_str(s, refresh=refresh)

    def close(self) -> None:
        return None


def sample_bar(progress: bool | ProgressBar, total: int, desc: str = "sampling"):
    """The bar a backend advances by one per finished sample: its own tqdm bar (shown when
    `progress` is True) or the caller's bar, which stays open after `close()`."""
    if not isinstance(progress, bool) and hasattr(progress, "update"):
        return _BorrowedBar(progress)
    from tqdm import tqdm

    return tqdm(total=total, unit="sample", desc=desc, disable=not progress,
                dynamic_ncols=True)


class Sampler(ABC):
    """Samples completions. Backends own their engine or connection pool: use `with`."""

    backend: str = ""
    model: str = ""

    @abstractmethod
    def generate(self, requests: Sequence[SampleRequest], params: SamplingParams,
                 progress: bool = False) -> list[RequestOutput]:
        """One output per request, in the order of `requests` (whatever order they finish in)."""

    def iter_generate(self, requests: Sequence[SampleRequest], params: SamplingParams,
                      progress: bool | ProgressBar = False
                      ) -> Iterator[tuple[int, RequestOutput]]:
        """`(index in requests, output)` pairs; backends that can yield each as it finishes,
        so callers keep finished outputs when a later request fails. Streaming backends
        also take a caller's bar as `progress` and advance it as each sample finishes; this
        default shows its own bar only for `progress=True`."""
        yield from enumerate(self.generate(requests, params, progress is True))

    def close(self) -> None:
        """Release the engine, GPU memory or connections (idempotent)."""
        return None

    def describe(self) -> dict:
        """What produced the samples, for the output file's provenance record."""
        return {"backend": self.backend, "model": self.model}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class StreamingSampler(Sampler):
    """A backend that yields each request as it finishes (`iter_generate`) and advances
    its progress bar (`sample_bar`) as each sample finishes; `generate` collects the
    outputs back in the order of the requests."""

    def generate(self, requests: Sequence[SampleRequest], params: SamplingParams,
                 progress: bool | ProgressBar = False) -> list[RequestOutput]:
        outputs: list[RequestOutput | None] = [None] * len(requests)
        for index, output in self.iter_generate(requests, params, progress):
            outputs[index] = output
        return outputs  # type: ignore[return-value]

    @abstractmethod
    def iter_generate(self, requests: Sequence[SampleRequest], params: SamplingParams,
                      progress: bool | ProgressBar = False
                      ) -> Iterator[tuple[int, RequestOutput]]:
        """`(index in requests, output)` as each request finishes; `progress` (see
        `sample_bar`) moves by one per finished sample."""


def get_sampler(backend: str, model: str, **options) -> Sampler:
    """Build the sampler of `backend` for `model`; unknown backends are an error."""
    if backend not in BACKENDS:
        raise PrmkitError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    module_name, cls_name = BACKENDS[backend].split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in ("vllm", "httpx"):
            raise PrmkitError(
                f"backend {backend!r} needs the package {e.name.split('.')[0]!r}: "
                f"pip install 'prmkit[{backend}]'") from e
        raise
    return getattr(module, cls_name)(model, **options)


def sample_seed(base_seed: int, key: str, index: int = 0) -> int:
    """A per-sample seed from the run's seed, the request key and the sample's index: the
    same sample gets the same seed whatever else is in the run (resume, other batching)."""
    h = hashlib.blake2b(f"{base_seed}\x00{key}\x00{index}".encode(), digest_size=4)
    return int.from_bytes(h.digest(), "little") & 0x7FFFFFFF
