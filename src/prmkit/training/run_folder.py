"""What a training run leaves in its output_dir: how a run folder is told, and emptied
of an earlier run when a new one replaces it (overwrite=true)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

METRICS_FILE = "metrics.jsonl"
MODEL_DIR = "model"
TRACKERS_DIR = "trackers"  # tracker files (report_to) unless logging_dir is set
# config.json, the logs, checkpoints/ and model/; a forced resume's config.resumed-N.json
RUN_ENTRIES = ("config.json", METRICS_FILE, "data_stats.json", "checkpoints", MODEL_DIR,
               TRACKERS_DIR)


def holds_run(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds (part of) a training run."""
    folder = Path(folder)
    return any((folder / name).exists() for name in RUN_ENTRIES) or \
        any(folder.glob("config.resumed-*.json"))


def clear_run(folder: str | os.PathLike) -> None:
    """Remove an earlier run's entries from `folder`; other files in it are left alone."""
    folder = Path(folder)
    for entry in [*(folder / name for name in RUN_ENTRIES), *folder.glob("config.resumed-*.json")]:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        elif entry.exists() or entry.is_symlink():
            entry.unlink()
