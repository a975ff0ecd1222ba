"""The file-digest cache `$PRMKIT_CACHE/sha256.json`: {absolute path: [size, mtime_ns,
sha256]}, so a multi-GB weight file is hashed once. Writers take a file lock beside it
(`sha256.json.lock`) and rewrite it atomically, so concurrent updates and pruning lose
nothing and readers never see half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from filelock import FileLock

from prmkit.data.io import atomic_write, cache_dir

NAME = "sha256.json"


def digest_cache_path(root: str | os.PathLike | None = None) -> Path:
    """sha256.json under `root`, by default the prmkit cache folder."""
    if root is None:
        root = cache_dir()
    return Path(root) / NAME


def read_digests(path: Path) -> dict:
    """The cached digests; an absent or unreadable cache is empty."""
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def _lock(path: Path) -> FileLock:
    return FileLock(str(path.with_name(path.name + ".lock")))


def _write(path: Path, cache: dict) -> None:
    with atomic_write(path, "w") as f:
        json.dump(cache, f)


def update_digests(path: Path, entries: dict) -> None:
    """Add entries, merged under the lock with what other processes wrote meanwhile."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _lock(path):
        _write(path, {**read_digests(path), **entries})


def drop_missing_digests(path: Path, dry_run: bool = False) -> list[str]:
    """Remove (or with dry_run only list) the entries whose files no longer exist."""
    if not path.is_file():
        return []
    with _lock(path):
        cache = read_digests(path)
        gone = [p for p in cache if not os.path.exists(p)]
        if gone and not dry_run:
            _write(path, {p: v for p, v in cache.items() if p not in gone})
    return gone


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file, from the cache when its size and mtime are unchanged."""
    path = Path(path)
    stat = path.stat()
    key, stamp = str(path.resolve()), [stat.st_size, stat.st_mtime_ns]
    cache_file = digest_cache_path()
    entry = read_digests(cache_file).get(key)
    if isinstance(entry, list) and entry[:2] == stamp:
        return entry[2]
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    try:  # a read-only home only costs a re-read next time
        update_digests(cache_file, {key: [*stamp, digest]})
    except OSError:
        pass
    return digest
