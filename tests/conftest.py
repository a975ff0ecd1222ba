import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _threads_per_worker() -> None:
    """Under pytest-xdist (`make test` runs 2 workers), each worker and every process it
    starts get the cores divided among the workers: torch's default, a thread per core in
    each worker, oversubscribes them (the suite on a 2-core AVX2 CPU: 747-795 s with one
    thread per worker, 834-901 s with two). An OMP_NUM_THREADS already set is kept."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2:
        return
    if "OMP_NUM_THREADS" not in os.environ:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        os.environ["OMP_NUM_THREADS"] = str(max(1, (cores or 1) // workers))
    import torch  # a plugin may have imported it before the variable was set

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


_threads_per_worker()

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
RL_ENGINES = Path(sys.prefix) / "rl-engines"


@pytest.fixture
def shared_data() -> Path:
    """../shared/data beside the checkout (where CI and every checkout have it): a test that
    needs it fails, never skips, when it is absent."""
    if not (SHARED_DATA / "prm800k").is_dir():
        pytest.fail(f"{SHARED_DATA} is missing: these tests read the real data there")
    return SHARED_DATA


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The converted SmolLM2-135M-Instruct folder under $PRMKIT_CACHE (default
    ~/.cache/prmkit), converted on first use (~30 s) by prmkit itself, under a file lock
    that makes parallel workers (pytest -n) wait for one conversion; a failed conversion
    fails the tests that use this fixture."""
    from prmkit.models.backbones import smollm2_folder

    return smollm2_folder()


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory) -> Path:
    """A saved tiny random Llama causal LM with its tokenizer (a model folder)."""
    from prmkit.models.backbones import tiny_random

    folder = tmp_path_factory.mktemp("tiny-lm")
    model, tok = tiny_random(seed=0)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture
def rl_engines() -> Path:
    """verl 0.9.1 and OpenRLHF 0.11.2, installed by `make test` without their dependencies
    into <venv>/rl-engines (each pins another transformers), on sys.path for the test that
    asks, after this venv's own packages, and off it again after; the test fails when the
    folder is missing. What the test imported stays loaded (ray cannot be unloaded)."""
    if not (RL_ENGINES / "verl").is_dir() or not (RL_ENGINES / "openrlhf").is_dir():
        pytest.fail(f"{RL_ENGINES} has no verl or openrlhf: `make test` installs them there "
                    "(in a venv made before, remove .venv/.prmkit-test-installed first)")
    sys.path.append(str(RL_ENGINES))
    try:
        yield RL_ENGINES
    finally:
        sys.path.remove(str(RL_ENGINES))
