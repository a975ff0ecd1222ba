"""What a run is made of (config, data files, backbone, processes), saved with every
checkpoint, and the check that a resumed run is still the same run.

Data files and backbone folders are fingerprinted by absolute path, size and a SHA-256
of their first and last MiB: cheap on multi-GB files, and any edit of a JSONL or
Parquet file changes its size or one of its ends in practice.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from prmkit.data.io import file_fingerprint
from prmkit.errors import PrmkitError

# Keys that change how a run is watched, not what it computes.
OPERATIONAL_KEYS = {"resume", "force", "overwrite", "progress", "num_threads", "log_every", "eval_every",
                    "eval_max_examples", "final_eval", "save_every", "keep_checkpoints",
                    "output_dir", "report_to", "logging_dir", "run_name"}


def _examples_digest(examples) -> str:
    digest = hashlib.sha256()
    for ex in examples:
        digest.update(repr((ex.problem, tuple(ex.steps), tuple(ex.labels), tuple(ex.ratings),
                            ex.outcome, ex.group)).encode())
    return digest.hexdigest()


def data_fingerprint(cfg) -> dict:
    """Data files of a run (train, eval, gold answers, holdout), or in-memory examples."""
    d = cfg.data
    out: dict = {}
    if d.examples is not None:
        out["examples"] = _examples_digest(d.examples)
    if d.eval_examples is not None:
        out["eval_examples"] = _examples_digest(d.eval_examples)
    holdout = d.policy.get("holdout_path")
    for kind, paths in (("train", [] if d.examples is not None else d.train), ("eval", d.eval),
                        ("gold_answers", d.gold_answers), ("holdout", [holdout] if holdout else [])):
        for i, path in enumerate(paths):
            out[f"{kind}[{i}]"] = file_fingerprint(path)
    return out


def model_fingerprint(backbone: str) -> dict:
    """The backbone name, and for a local folder its config and weight files."""
    out: dict = {"backbone": backbone}
    folder = Path(backbone)
    if folder.is_dir():
        for f in sorted(folder.iterdir()):
            if f.name == "config.json" or f.suffix in (".safetensors", ".bin", ".gguf"):
                out[f.name] = file_fingerprint(f)
    return out


def run_fingerprint(cfg, world_size: int, engine: str = "single") -> dict:
    """Everything a checkpoint's step depends on, as JSON; `engine` (single, ddp, zero2,
    zero3, fsdp) also decides the checkpoint's layout."""
    return {"config": json.loads(json.dumps(cfg.to_dict())),
            "data_files": data_fingerprint(cfg),
            "model_files": model_fingerprint(cfg.backbone),
            "processes": world_size,
            "engine": engine}


def _flatten(d, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {prefix: d}
    out = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def differences(saved: dict, current: dict) -> list[str]:
    """`key: saved -> current` for every dotted key that differs (operational config keys
    such as save_every or progress are left out)."""
    a, b = _flatten(saved), _flatten(current)
    out = []
    for key in sorted(a.keys() | b.keys()):
        if key.startswith("config.") and key.split(".")[1] in OPERATIONAL_KEYS:
            continue
        if a.get(key, "<absent>") != b.get(key, "<absent>"):
            out.append(f"{key}: {a.get(key, '<absent>')!r} -> {b.get(key, '<absent>')!r}")
    return out


def check_resume(checkpoint: Path, saved: dict, current: dict, force: bool) -> list[str]:
    """Differences between a checkpoint's run and this one; an error unless `force`."""
    if "config" not in saved:  # checkpoint from before fingerprints: compare the config
        run_config = checkpoint.parent.parent / "config.json"
        if not run_config.is_file():
            return []
        saved = {"config": json.loads(run_config.read_text())}
    saved = {k: v for k, v in saved.items() if k in current}
    current = {k: v for k, v in current.items() if k in saved}
    diffs = differences(saved, current)
    if diffs and not force:
        raise PrmkitError(
            f"cannot resume from {checkpoint}: this run differs from the one that saved it "
            f"({'; '.join(diffs)}). Restore those settings, or set force=true to continue "
            "anyway (the steps already taken followed the old settings)")
    return diffs
