"""bf16 against fp32 on this CPU, one thread: a 1024 x 1024 matmul, and the demo base's
forward and backward on 8 x 512 tokens (bf16 under autocast, as training runs it). On a
CPU without AVX512_BF16 or AMX torch emulates bf16; prmkit's dtype rule
(prmkit.models.precision) picks fp32 there.

    .venv/bin/python benchmarks/bench_cpu_dtype.py   # -> benchmarks/results/cpu_dtype.json
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from scoring_common import machine_facts, write_result

from prmkit.demo.lm.base import SHIPPED_BASE
from prmkit.models.backbones import load_backbone
from prmkit.models.precision import native_bf16

OUT = Path(__file__).resolve().parent / "results" / "cpu_dtype.json"


def seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    started, load = time.perf_counter(), os.getloadavg()[0]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a16, b16 = a.bfloat16(), b.bfloat16()
    model, _ = load_backbone(str(SHIPPED_BASE))
    model.train()
    x = torch.randint(0, model.config.vocab_size, (8, 512))

    def step(bf16: bool) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()

    native, why = native_bf16("cpu")
    result = {
        "native_bf16": native, "why": why,
        "matmul_1024_fp32_s": seconds(lambda: a @ b, 5),
        "matmul_1024_bf16_s": seconds(lambda: a16 @ b16, 2),
        "base_fwd_bwd_8x512_fp32_s": seconds(lambda: step(False), 3),
        "base_fwd_bwd_8x512_bf16_autocast_s": seconds(lambda: step(True), 2),
    }
    result["matmul_bf16_over_fp32"] = result["matmul_1024_bf16_s"] / result["matmul_1024_fp32_s"]
    result["fwd_bwd_bf16_over_fp32"] = (result["base_fwd_bwd_8x512_bf16_autocast_s"]
                                        / result["base_fwd_bwd_8x512_fp32_s"])
    write_result(OUT, {**result, **machine_facts(started, load)})


if __name__ == "__main__":
    main()
