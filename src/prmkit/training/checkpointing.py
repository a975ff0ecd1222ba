"""Checkpoints for exact resumption: trainable weights, optimiser, scheduler, step, and
the RNG state of every process (`rng_state_rank{r}.pt`, one file per rank)."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

from prmkit.data.io import atomic_folder
from prmkit.errors import PrmkitError

STATE_FILE = "trainer_state.pt"
INFO_FILE = "trainer_state.json"
RNG_FILE = "rng_state_rank{rank}.pt"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def checkpoint_root(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints"


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_rng_state(folder: Path, rank: int, state: dict | None = None) -> Path:
    """Write one process's RNG state (this process's when `state` is None)."""
    path = Path(folder) / RNG_FILE.format(rank=rank)
    torch.save(state if state is not None else rng_state(), path)
    return path


def load_rng_state(folder: Path, rank: int) -> dict:
    """Read the RNG state that process `rank` saved in a checkpoint folder."""
    path = Path(folder) / RNG_FILE.format(rank=rank)
    if not path.is_file():
        raise PrmkitError(f"{path} is missing: the checkpoint was saved by fewer processes")
    return torch.load(path, map_location="cpu", weights_only=False)


def write_checkpoint_files(folder: Path, step: int, model, optimizer, scheduler, info: dict,
                           rng_states: list[dict] | None = None) -> None:
    """prmkit's files of a checkpoint: scheduler and step, with the trainable weights and
    optimizer when `model` is given (engines that shard them save their own files)."""
    state = {"scheduler": scheduler.state_dict(), "step": step}
    if model is not None:
        state.update(model=trainable_state(model), optimizer=optimizer.state_dict())
    torch.save(state, folder / STATE_FILE)
    for rank, rng in enumerate(rng_states or [rng_state()]):
        save_rng_state(folder, rank, rng)
    (folder / INFO_FILE).write_text(json.dumps({"step": step, **info}, indent=2) + "\n")


def prune_checkpoints(output_dir, keep: int) -> None:
    """Keep the last `keep` checkpoints (all when keep <= 0)."""
    for old in list_checkpoints(output_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)


def save_checkpoint(output_dir, step: int, model, optimizer, scheduler, info: dict,
                    keep: int = 2, rng_states: list[dict] | None = None) -> Path:
    """Write checkpoints/step-N atomically (temp folder, then rename); keep the last `keep`.
    `rng_states[r]` is the RNG state of process r (default: this process, as rank 0)."""
    final = checkpoint_root(output_dir) / f"step-{step:07d}"
    with atomic_folder(final) as tmp:
        write_checkpoint_files(tmp, step, model, optimizer, scheduler, info, rng_states)
    prune_checkpoints(output_dir, keep)
    return final


def list_checkpoints(output_dir) -> list[Path]:
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if (m := _STEP_DIR.match(p.name)) and (p / STATE_FILE).is_file()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(output_dir) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def checkpoint_info(path: Path) -> dict:
    """The JSON record saved beside a checkpoint (step, config, fingerprints...)."""
    f = Path(path) / INFO_FILE
    return json.loads(f.read_text()) if f.is_file() else {}


def load_checkpoint(path: Path, model, optimizer, scheduler, rank: int = 0) -> int:
    """Restore everything saved by save_checkpoint, with the RNG state of process `rank`;
    returns the optimizer step. `model` None: the weights and optimizer were restored by
    the engine (prmkit.training.distributed)."""
    state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=False)
    if model is not None:
        if "model" not in state:
            raise PrmkitError(f"{path}: this checkpoint holds sharded engine state (DeepSpeed "
                              "or FSDP): resume it with the same accelerate config")
        params = dict(model.named_parameters())
        missing = [n for n in state["model"] if n not in params]
        if missing:
            raise PrmkitError(f"{path}: checkpoint does not match the model (e.g. {missing[0]})")
        with torch.no_grad():
            for n, v in state["model"].items():
                params[n].copy_(v)
        optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    set_rng_state(state["rng"] if "rng" in state else load_rng_state(path, rank))
    return int(state["step"])
