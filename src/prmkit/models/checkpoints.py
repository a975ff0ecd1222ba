"""Tensors read by name from a Hugging Face checkpoint folder (model.safetensors,
pytorch_model.bin, or either sharded with its index), without building its model: what a
published PRM keeps beside its base model (Skywork's `v_head.summary`) is loaded strictly,
so a head under another name is an error, never a random head."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from prmkit.errors import PrmkitError

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def _open(path: Path) -> dict[str, Callable[[], torch.Tensor]]:
    """name -> a function giving the tensor, without reading the others (safetensors are
    opened lazily, pytorch_model.bin memory-mapped)."""
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            names = list(f.keys())
        return {n: (lambda n=n: _safetensor(path, n)) for n in names}
    tensors = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    return {n: (lambda t=t: t) for n, t in tensors.items()}


def _safetensor(path: Path, name: str) -> torch.Tensor:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return f.get_tensor(name)


def read_tensors(folder: str | Path, names: list[str]) -> tuple[dict[str, torch.Tensor],
                                                                  list[str]]:
    """The tensors of `names` the checkpoint holds, and every name it holds."""
    folder = Path(folder)
    for file in WEIGHT_FILES:
        index = folder / f"{file}.index.json"
        if index.is_file():
            where = {k: folder / v for k, v in json.loads(index.read_text())["weight_map"].items()}
            break
        if (folder / file).is_file():
            where = dict.fromkeys(_open(folder / file), folder / file)
            break
    else:
        raise PrmkitError(f"{folder} holds no checkpoint ({' or '.join(WEIGHT_FILES)}, or an "
                          "index of shards)")
    found: dict[str, torch.Tensor] = {}
    for path in sorted({where[n] for n in names if n in where}):
        tensors = _open(path)
        found |= {n: tensors[n]() for n in names if n in tensors}
    return found, sorted(where)


def read_linear(folder: str | Path, prefix: str, in_features: int, out_features: int,
                what: str) -> nn.Linear:
    """nn.Linear(in_features, out_features), fp32, from `{prefix}.weight` and `.bias`
    (none: no bias) of the checkpoint; a missing or misshapen weight is an error naming
    the checkpoint's keys that look like a head."""
    weight, bias = f"{prefix}.weight", f"{prefix}.bias"
    found, names = read_tensors(folder, [weight, bias])
    shape = (out_features, in_features)
    if weight not in found or tuple(found[weight].shape) != shape or (
            bias in found and tuple(found[bias].shape) != (out_features,)):
        got = (f"{weight} has shape {list(found[weight].shape)}" if weight in found
               else f"it has no {weight}")
        others = [n for n in names if not n.startswith(("model.", "lm_head."))][:8]
        raise PrmkitError(f"{folder}: {what} from {weight} {list(shape)}, but {got} (keys "
                          f"outside the base model: {', '.join(others) or 'none'})")
    head = nn.Linear(in_features, out_features, bias=bias in found)
    with torch.no_grad():
        head.weight.copy_(found[weight].float())
        if bias in found:
            head.bias.copy_(found[bias].float())
    return head
