"""Which model and settings scored a file: the `scored_by` record of every scored line.

    {"model": "/abs/runs/prm/model", "fingerprint": "3f2a9c0d1e4b5a6c", "aggregation": "prod",
     "max_length": 2048, "dtype": "bfloat16"}

The fingerprint of a saved model folder digests the full sha256 of its config and weight
files, not its path: a moved folder keeps its fingerprint, and two models that differ in
any weight differ (LoRA on the top layers leaves the first and last MiB of a weight file
unchanged, so a cheaper sampled hash would not tell them apart). A file's sha256 is kept
in a cache (`$PRMKIT_CACHE/sha256.json`, default `~/.cache/prmkit`, keyed by path, size
and mtime: prmkit.data.digest_cache), so a multi-GB model is read once. A model given
in memory is fingerprinted from its config and the first and last 1,024 values of every
tensor.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import torch

from prmkit.data.digest_cache import file_sha256
from prmkit.data.resume import refuse_other_writer

_ENDS = 1024
COMPARED = ("fingerprint", "aggregation", "max_length", "dtype", "format")


def _short(payload) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def folder_fingerprint(folder: str | Path) -> str:
    files = {}
    for f in sorted(Path(folder).iterdir()):
        if f.name.endswith("config.json") or f.suffix in (".safetensors", ".bin"):
            files[f.name] = [f.stat().st_size, file_sha256(f)]
    return _short(files)


def weights_fingerprint(model) -> str:
    digest = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        flat = t.detach().reshape(-1)
        ends = flat if flat.numel() <= 2 * _ENDS else torch.cat([flat[:_ENDS], flat[-_ENDS:]])
        digest.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        digest.update(ends.cpu().contiguous().view(torch.uint8).numpy().tobytes())
    config = dataclasses.asdict(model.config) if dataclasses.is_dataclass(model.config) else {}
    return _short([digest.hexdigest(), json.loads(json.dumps(config, default=str))])


def check_same_scorer(path: str | Path, saved: dict, current: dict) -> None:
    """Refuse to append to `path` with another model or other settings than its lines'."""
    refuse_other_writer(path, saved, current, COMPARED,
                        f"scored by {saved.get('model')} (fingerprint "
                        f"{saved.get('fingerprint')}), not by this run's {current['model']} "
                        f"(fingerprint {current['fingerprint']})")
