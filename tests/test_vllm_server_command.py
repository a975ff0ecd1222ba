"""The vLLM server command users copy (docs/generation.md, vllm_cpu.server_command) gives
the server a KV cache that fits a small machine: left to vLLM's CPU default, the worker
asked for 0.92 of the NUMA node's memory and refused to start on a 24 GiB machine with
2 GiB in use. tests/test_generation_vllm_server.py starts this command for real."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from prmkit.generation import vllm_cpu

DOCS = Path(__file__).resolve().parents[1] / "docs" / "generation.md"
GIB = 1 << 30


def kv_cache_bytes(cmd: list[str]) -> int:
    """--kv-cache-memory-bytes as vLLM reads the forms server_command writes ("1G" is
    1 GiB, digits are bytes)."""
    value = cmd[cmd.index("--kv-cache-memory-bytes") + 1]
    found = re.fullmatch(r"(\d+)G", value)
    return int(found.group(1)) * GIB if found else int(value)


def test_vllm_server_command_sets_kv_cache_that_fits():
    cmd = vllm_cpu.server_command("MODEL", 8000)
    size = kv_cache_bytes(cmd)
    # SmolLM2-135M, float32: keys and values of 30 layers x 3 KV heads x 64 dimensions
    sequence = 2 * 30 * 3 * 64 * 4 * 2048
    assert size >= 8 * sequence  # several full-length requests at once
    # the machine where vLLM's default (13.42 GiB) did not fit had 12.67 GiB free on the
    # node; the size asked now leaves most of it to everything else
    assert size <= 2 * GIB
    assert "--gpu-memory-utilization" not in cmd  # the explicit size replaces the share
    larger = vllm_cpu.server_command("MODEL", 8000, kv_cache_gib=1.5)
    assert kv_cache_bytes(larger) == 3 * GIB // 2


def test_generation_docs_start_the_server_with_server_command():
    text = DOCS.read_text()
    block = re.search(r"\n    (python -m vllm\.entrypoints\.openai\.api_server .*?)\n\n", text,
                      re.S)
    assert block, "docs/generation.md has no vLLM server command"
    documented = shlex.split(block.group(1).replace("\\\n", " "))
    built = vllm_cpu.server_command("MODEL_DIR", 8000, dtype="float32")
    assert built[0] == sys.executable and documented[0] == "python"
    assert documented[1:] == built[1:]
