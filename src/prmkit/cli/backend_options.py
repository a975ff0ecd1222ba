"""Sampler backend options shared by `prmkit generate` and `prmkit search`: typed flags,
passed to the backend only when given."""

from __future__ import annotations

BACKEND_OPTIONS = {  # option -> help; passed to the backend only when given
    "device": "hf: e.g. cpu, cuda (default: cuda when available)",
    "dtype": "hf: fp32, bf16, fp16; vllm: auto, bfloat16, ...",
    "batch_size": "hf: samples per generate call (default 16)",
    "base_url": "openai: the server, e.g. http://localhost:8000/v1",
    "api_key_env": "openai: the environment variable holding the API key",
    "concurrency": "openai: requests in flight",
    "gpu_memory_utilization": "vllm: share of GPU memory for the engine",
    "max_model_len": "vllm: context length",
    "tensor_parallel_size": "vllm: GPUs per model",
}
OPTION_TYPES = {"batch_size": int, "concurrency": int, "max_model_len": int,
                "tensor_parallel_size": int, "gpu_memory_utilization": float}


def add_backend_arguments(parser) -> None:
    group = parser.add_argument_group("backend options (passed on only when given)")
    for name, help_text in BACKEND_OPTIONS.items():
        group.add_argument("--" + name.replace("_", "-"), type=OPTION_TYPES.get(name, str),
                           default=None, help=help_text)


def backend_options(args) -> dict:
    return {k: getattr(args, k) for k in BACKEND_OPTIONS if getattr(args, k) is not None}
