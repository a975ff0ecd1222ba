"""What the prmkit cache folder holds, and pruning it (`prmkit cache list|prune`).

The folder ($PRMKIT_CACHE, default ~/.cache/prmkit) holds:
- `rows/`: the data-preparation entries of training (data_cache.py), one msgpack file
  each; reading one refreshes its mtime, which is therefore its last use;
- `sha256.json`: file digests for scoring provenance (prmkit.data.digest_cache);
- converted backbones, one folder each (`smollm2-135m/`).

Pruning removes rows entries by age and least recent use, drops digests of files that no
longer exist, and removes backbones only when asked. A run reading an entry that a prune
removes is safe: an entry is read whole in one go, and a missing one is rebuilt.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import time
from pathlib import Path

from prmkit.data.digest_cache import NAME as DIGESTS
from prmkit.data.digest_cache import drop_missing_digests, read_digests
from prmkit.errors import PrmkitError
from prmkit.training.data_cache import ROWS

TMP_GRACE_S = 24 * 3600  # a temporary file younger than this may still be being written
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_size(text: str) -> int:
    """Bytes from "5GB", "500M", "1.5GiB" or "1024" (kB/MB/GB are powers of 1000,
    KiB/MiB/GiB of 1024)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]i?)?b?\s*", str(text), re.IGNORECASE)
    if not m:
        raise PrmkitError(f"size {text!r} is not understood; write e.g. 5GB, 500MB, 2GiB "
                          "or a number of bytes")
    return int(float(m[1]) * _UNITS[(m[2] or "").lower()])


def human_size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


@dataclasses.dataclass
class CacheFile:
    path: str
    bytes: int
    last_use: float  # mtime, seconds since the epoch


@dataclasses.dataclass
class RowsSummary:
    entries: int
    bytes: int
    oldest_use: float | None
    newest_use: float | None
    partial_files: int  # temporary files of writes in progress (or of killed runs)
    partial_bytes: int


@dataclasses.dataclass
class CacheSummary:
    root: str
    rows: RowsSummary
    backbones: dict[str, int]  # name: bytes
    digest_entries: int
    digest_bytes: int


@dataclasses.dataclass
class PruneReport:
    root: str
    dry_run: bool
    removed: list[CacheFile]
    dropped_digests: list[str]  # paths whose files no longer exist

    @property
    def freed_bytes(self) -> int:
        return sum(f.bytes for f in self.removed)


def default_root() -> Path:
    from prmkit.data.io import cache_dir

    return cache_dir()


def _checked_root(root: str | os.PathLike | None) -> Path:
    root = Path(root) if root is not None else default_root()
    if not root.is_dir():
        raise PrmkitError(f"{root}: no such cache folder (give --cache-dir, or set "
                          "$PRMKIT_CACHE)")
    return root


def _files(folder: Path, partial: bool) -> list[CacheFile]:
    """Rows entries (or, with partial, atomic_write's `.NAME.*.tmp` files) in `folder`."""
    found = []
    for p in folder.glob(".*.tmp" if partial else "*.msgpack"):
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile
            st = p.stat()
            found.append(CacheFile(str(p), st.st_size, st.st_mtime))
    return found


def _tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _backbones(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name != ROWS)


def cache_summary(root: str | os.PathLike | None = None) -> CacheSummary:
    root = _checked_root(root)
    entries, partial = _files(root / ROWS, False), _files(root / ROWS, True)
    uses = [f.last_use for f in entries]
    digests = root / DIGESTS
    return CacheSummary(
        root=str(root),
        rows=RowsSummary(len(entries), sum(f.bytes for f in entries), min(uses, default=None),
                         max(uses, default=None), len(partial),
                         sum(f.bytes for f in partial)),
        backbones={p.name: _tree_bytes(p) for p in _backbones(root)},
        digest_entries=len(read_digests(digests)),
        digest_bytes=digests.stat().st_size if digests.is_file() else 0)


def prune_cache(root: str | os.PathLike | None = None, older_than: float | None = None,
                max_bytes: int | None = None, dry_run: bool = False,
                backbones: bool = False, now: float | None = None) -> PruneReport:
    """Remove rows entries unused for `older_than` days, then the least recently used until
    the rows cache holds at most `max_bytes`; temporary files older than a day; digests of
    missing files; and with `backbones` every converted backbone. dry_run removes nothing
    and reports the same."""
    if older_than is not None and not older_than >= 0:  # negative or nan
        raise PrmkitError(f"older than {older_than} days: give a number of days >= 0")
    if max_bytes is not None and max_bytes < 0:
        raise PrmkitError(f"max size {max_bytes} bytes: give a size >= 0")
    root = _checked_root(root)
    now = time.time() if now is None else now
    kept = sorted(_files(root / ROWS, False), key=lambda f: f.last_use)
    removed = []
    if older_than is not None:
        removed = [f for f in kept if f.last_use < now - older_than * 86400]
        kept = kept[len(removed):]
    if max_bytes is not None:
        size = sum(f.bytes for f in kept)
        while kept and size > max_bytes:
            size -= kept[0].bytes
            removed.append(kept.pop(0))
    removed += [f for f in _files(root / ROWS, True) if f.last_use < now - TMP_GRACE_S]
    if not dry_run:
        for f in removed:
            with contextlib.suppress(FileNotFoundError):  # another prune was first
                os.unlink(f.path)
    if backbones:
        removed += _remove_backbones(root, dry_run)
    dropped = drop_missing_digests(root / DIGESTS, dry_run)
    return PruneReport(str(root), dry_run, removed, dropped)


def _remove_backbones(root: Path, dry_run: bool) -> list[CacheFile]:
    """Every converted backbone folder, each under the lock its conversion takes."""
    from filelock import FileLock

    removed = []
    for folder in _backbones(root):
        removed.append(CacheFile(str(folder), _tree_bytes(folder), folder.stat().st_mtime))
        if not dry_run:
            with FileLock(str(root / f"{folder.name}.lock")):
                shutil.rmtree(folder, ignore_errors=True)
    return removed
