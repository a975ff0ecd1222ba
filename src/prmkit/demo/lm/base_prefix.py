"""A short check of the shipped base's recipe: the first `PREFIX_STEPS` steps of each stage
rebuilt and compared with a record, in about a minute instead of the full build's half hour
and more (`make check-base`).

Each stage is rebuilt from what it starts from (the first from nothing, the reading stage
from the shipped first stage) with the same data, tokenizer, initial weights, batches and
learning-rate schedule as the full build, but stopped after its first steps, in fp32 (the
dtype every CPU computes the same way up to rounding). Compared with `RECORD`:

- exactly: the tokenizer (its file's hash), the counts of the data each stage reads, the
  recipe's key (a changed recipe with a stale record fails until the record is refreshed
  with `python -m prmkit.demo.lm.base_prefix --write`);
- to `LOSS_TOLERANCE` and `WEIGHT_TOLERANCE`: each step's loss and a few weight tensors'
  sums and norms after the last step (float rounding differs between CPUs, thread counts
  and kernels: BENCHMARKS.md, "The demo base's short check").

The first loss of each stage is also compared with the one the full build recorded in the
shipped base.json. What this catches: any change of the data, its order, the tokenizer, the
network, its initial weights, the optimizer or the schedule's first steps. What it cannot
catch: a change that acts only after the first steps (the schedule's tail, a later data
epoch), and whether a rebuilt base reaches the shipped base's skill; the shipped base's
own skill is checked in the suite (tests/test_demo_shipped_base.py), a full rebuild's by
`make check-base`.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from prmkit.demo.lm.base import (
    PREFIX_STEPS,
    SHIPPED_BASE,
    SHIPPED_FIRST_STAGE,
    base_info,
    train_stage,
)
from prmkit.demo.lm.base_settings import BaseConfig

RECORD = Path(__file__).with_name("base_prefix.json")
LOSS_TOLERANCE = 1e-3  # relative, per step
WEIGHT_TOLERANCE = 1e-3  # relative, per sum or norm
# the full build's first loss (base.json) was computed in another dtype or thread count
FULL_BUILD_FIRST_LOSS_TOLERANCE = 1e-2
# the tensors whose sums and norms stand for the weights
WEIGHTS = ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
           "model.layers.3.mlp.down_proj.weight", "model.norm.weight")


@dataclass
class StagePrefix:
    losses: list[float]
    weights: dict[str, list[float]]  # name -> [sum of absolute values, norm]
    data: dict  # what base.json records of the stage's data
    tokenizer_sha256: str

    def as_dict(self) -> dict:
        return {"losses": self.losses, "weights": self.weights, "data": self.data,
                "tokenizer_sha256": self.tokenizer_sha256}


def stage_prefix(cfg: BaseConfig, steps: int = PREFIX_STEPS) -> StagePrefix:
    """The first `steps` steps of the last stage of `cfg`, in fp32, without progress bars."""
    model, tokenizer, losses, data = train_stage(cfg, progress=False, device="cpu",
                                                 bf16=False, stop_after=steps)
    params = dict(model.named_parameters())
    weights = {name: [float(params[name].detach().abs().sum()), float(params[name].detach().norm())]
               for name in WEIGHTS}
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save_pretrained(tmp)
        sha = _sha256(Path(tmp) / "tokenizer.json")
    return StagePrefix(losses, weights, {k: v for k, v in data.items() if k != "first_stage"},
                       sha)


def measure(cfg: BaseConfig | None = None, steps: int = PREFIX_STEPS) -> dict:
    """Both stages' prefixes of `cfg` (the default recipe): what `RECORD` holds."""
    cfg = cfg or BaseConfig()
    return {"recipe": cfg.key(), "first_stage_recipe": cfg.first_stage().key(), "steps": steps,
            "first_stage": stage_prefix(cfg.first_stage(), steps).as_dict(),
            "reading": stage_prefix(cfg, steps).as_dict()}


def differences(measured: dict, record: dict) -> list[str]:
    """Where `measured` differs from `record` beyond the tolerances (empty: the same)."""
    out = []
    for key in ("recipe", "first_stage_recipe", "steps"):
        if measured[key] != record[key]:
            out.append(f"{key}: {measured[key]} measured, {record[key]} recorded (refresh the "
                       "record with `python -m prmkit.demo.lm.base_prefix --write`)")
    if out:
        return out
    for stage in ("first_stage", "reading"):
        m, r = measured[stage], record[stage]
        for key in ("data", "tokenizer_sha256"):
            if m[key] != r[key]:
                out.append(f"{stage} {key}: {m[key]} measured, {r[key]} recorded")
        for i, (a, b) in enumerate(zip(m["losses"], r["losses"], strict=True)):
            if not _close(a, b, LOSS_TOLERANCE):
                out.append(f"{stage} loss at step {i}: {a:.6f} measured, {b:.6f} recorded")
                break
        for name, (a, b) in ((n, pair) for n in WEIGHTS
                             for pair in zip(m["weights"][n], r["weights"][n], strict=True)):
            if not _close(a, b, WEIGHT_TOLERANCE):
                out.append(f"{stage} {name}: {a:.6g} measured, {b:.6g} recorded")
    return out


def full_build_differences(measured: dict) -> list[str]:
    """Where `measured` differs from what the shipped bases' full builds recorded: their keys,
    the counts of their data, their tokenizer and their first loss."""
    out = []
    for stage, folder, key in (("first_stage", SHIPPED_FIRST_STAGE, "first_stage_recipe"),
                               ("reading", SHIPPED_BASE, "recipe")):
        info, m = base_info(folder), measured[stage]
        if info["key"] != measured[key]:
            out.append(f"{stage}: the shipped base's key {info['key']} is not the recipe's "
                       f"{measured[key]}")
            continue
        for name, value in m["data"].items():
            if info.get(name) != value:
                out.append(f"{stage} {name}: {value} measured, {info.get(name)} in {folder}")
        if m["tokenizer_sha256"] != _sha256(folder / "tokenizer.json"):
            out.append(f"{stage}: its tokenizer is not the one in {folder}")
        if not _close(m["losses"][0], info["lm_loss"][0], FULL_BUILD_FIRST_LOSS_TOLERANCE):
            out.append(f"{stage} first loss: {m['losses'][0]:.6f} measured, "
                       f"{info['lm_loss'][0]:.6f} in {folder}/base.json")
    return out


def _close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-6)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> None:
    """`python -m prmkit.demo.lm.base_prefix [--write]`: rebuild the first steps of both
    stages of the default recipe and compare them with the record and the shipped bases
    (`--write`: refresh the record after a change of the recipe, once the full build,
    `make check-base`, has been run and shipped)."""
    import argparse
    import sys

    import torch

    p = argparse.ArgumentParser(prog="python -m prmkit.demo.lm.base_prefix",
                                description=main.__doc__)
    p.add_argument("--write", action="store_true", help=f"write the record ({RECORD.name})")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    measured = measure()
    problems = full_build_differences(measured)
    if args.write:
        RECORD.write_text(json.dumps(measured, indent=1) + "\n")
        print(f"wrote {RECORD}")
    else:
        problems += differences(measured, json.loads(RECORD.read_text()))
    for line in problems:
        print(line, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
