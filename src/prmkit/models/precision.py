"""The compute dtype chosen from the hardware.

bf16 pays only where the hardware computes it: CUDA devices with bf16 support, and CPUs
with AVX512_BF16 or AMX. On an AVX2-only CPU torch emulates bf16 and training runs about
8x slower than in fp32 (benchmarks/bench_cpu_dtype.py), so "auto" means fp32 there. An
explicit bf16 is honoured everywhere, with a warning where it is emulated.
"""

from __future__ import annotations

import functools
import logging
import warnings

import torch

log = logging.getLogger("prmkit.models")

NATIVE_CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU features torch reports present (torch.cpu.get_capabilities)."""
    get = getattr(getattr(torch, "cpu", None), "get_capabilities", None)
    caps = dict(get()) if get is not None else {}
    return frozenset(k for k, v in caps.items() if v is True)


def native_bf16(device: str | torch.device = "cpu") -> tuple[bool, str]:
    """Whether `device` computes bf16 natively, and why (for the log)."""
    device = torch.device(device)
    if device.type == "cuda":
        ok = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return ok, "CUDA device with bf16 support" if ok else "CUDA device without bf16"
    if device.type != "cpu":
        return False, f"{device.type} device"
    found = sorted(NATIVE_CPU_BF16_FLAGS & cpu_flags())
    if found:
        return True, f"CPU with {' and '.join(found)}"
    return False, "CPU without avx512_bf16 or amx_bf16 (bf16 would be emulated)"


@functools.cache
def _log_choice(choice: str, why: str) -> None:
    log.info("compute dtype %s: %s", choice, why)


@functools.cache
def _warn_emulated(why: str) -> None:
    warnings.warn(f"bf16 was asked for on a {why}: it runs about 8x slower than fp32 "
                  "here; leave it to auto (fp32 on this hardware) unless bf16 is what you "
                  "mean to measure", stacklevel=3)


def use_bf16(requested: bool | str | None, device: str | torch.device = "cpu") -> bool:
    """bf16 autocast on or off. requested: True/False as given (True warns where bf16 is
    emulated); None or "auto": on exactly where `device` computes bf16 natively."""
    native, why = native_bf16(device)
    if requested is None or requested == "auto":
        _log_choice("bf16" if native else "fp32", why)
        return native
    if requested and not native:
        _warn_emulated(why)
    return bool(requested)


def compute_dtype(dtype: str | torch.dtype | None,
                  device: str | torch.device = "cpu") -> str | torch.dtype | None:
    """A dtype argument with "auto" resolved for `device`: "bf16" or "fp32"; other values
    as given (an explicit bf16 warns where it is emulated)."""
    if dtype == "auto":
        return "bf16" if use_bf16("auto", device) else "fp32"
    if dtype in ("bf16", "bfloat16", torch.bfloat16):
        use_bf16(True, device)
    return dtype
