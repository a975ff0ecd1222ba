"""Sampler backend options shared by `prmkit generate` and `prmkit search`: typed flags,
passed to the backend only when given; and the sampling flags, whose defaults are
`prmkit.generation.SamplingParams`'s (one default per setting)."""

from __future__ import annotations

from prmkit.generation.base import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P

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


def add_sampling_arguments(parser, max_tokens_help: str) -> None:
    parser.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE,
                        help=f"0 is greedy (default {DEFAULT_TEMPERATURE})")
    parser.add_argument("--top-p", type=float, default=DEFAULT_TOP_P,
                        help=f"nucleus sampling (default {DEFAULT_TOP_P})")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help=f"{max_tokens_help} (default {DEFAULT_MAX_TOKENS})")


def add_model_argument(parser, help_text: str) -> None:
    parser.add_argument("--model", default=None,
                        help=f"{help_text}; with --backend openai it may be left out when the "
                             "server serves one model")


def check_model(args) -> None:
    """`--model` is needed by the hf and vllm backends; the openai one may ask the server."""
    from prmkit.errors import PrmkitError

    if args.model is None and args.backend != "openai":
        raise PrmkitError(f"--model is required with --backend {args.backend}")


def backend_options(args) -> dict:
    return {k: getattr(args, k) for k in BACKEND_OPTIONS if getattr(args, k) is not None}
