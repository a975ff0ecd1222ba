"""What the scoring benchmarks share: score comparison, machine facts, the result file, and
a `prmkit serve` process on 127.0.0.1."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """`prmkit serve MODEL_DIR *options` in a subprocess on 127.0.0.1 under API key `key`
    (`env` added to this process's environment), returned once /health answers; a
    RuntimeError with the end of its stderr if it exits first, or after `start_timeout`."""

    def __init__(self, model_dir: Path, *options: str, key: str, env: dict | None = None,
                 start_timeout: float = 120.0):
        self.url = f"http://127.0.0.1:{free_port()}"
        self.headers = {"Authorization": f"Bearer {key}"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from prmkit.cli import main; sys.exit(main())",
             "serve", str(model_dir), "--port", self.url.rsplit(":", 1)[1],
             "--log-level", "warning", *options],
            env={**os.environ, "PRMKIT_API_KEY": key, **(env or {})},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(self.proc.stderr.read().decode()[-2000:])
            try:
                if httpx.get(self.url + "/health", headers=self.headers,
                             timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"the server did not start in {start_timeout:g} s")
            time.sleep(0.2)

    def stop(self, wait_s: float = 60.0) -> None:
        """SIGTERM, then SIGKILL after `wait_s`."""
        self.proc.terminate()
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
