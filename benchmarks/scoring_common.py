"""What the scoring benchmarks share: score comparison, machine facts, the result file."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import torch


def max_diff(a: list[list[float | None]], b: list[list[float | None]]) -> float:
    """Largest |difference| of two methods' step scores; both must cut the same steps."""
    pairs = [(x, y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True)]
    assert all((x is None) == (y is None) for x, y in pairs), "different steps were cut"
    return max(abs(x - y) for x, y in pairs if x is not None)


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as /proc/loadavg writes them."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform reports."""
    if Path("/proc/cpuinfo").is_file():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine_facts(started: float, load_at_start: float) -> dict:
    return {
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average_at_start": round(load_at_start, 2),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "total_seconds": round(time.perf_counter() - started, 1),
    }


def write_result(out: str | Path, result: dict, shown: dict | None = None) -> dict:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result if shown is None else shown, indent=2))
    return result
