"""Get the official PRM800K files and MATH splits, verified by size and sha256.

Sources, in order: `--from DIR` (or $PRMKIT_DATA) when given, else the openai/prm800k
GitHub repository (phase2_train.jsonl is stored in git LFS, so it comes from the
media URL). Every file is checked against the official size and sha256 before it is
moved into place; nothing unverified is left in the destination.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prmkit.data.io import atomic_write
from prmkit.errors import PrmkitError

RAW_BASE = "https://raw.githubusercontent.com/openai/prm800k/main/prm800k"
LFS_BASE = "https://media.githubusercontent.com/media/openai/prm800k/main/prm800k"
ENV_VAR = "PRMKIT_DATA"


@dataclass(frozen=True)
class OfficialFile:
    name: str  # path under the destination folder
    repo_path: str  # path under prm800k/ in the repository
    size: int
    sha256: str
    lfs: bool = False

    def url(self) -> str:
        return f"{LFS_BASE if self.lfs else RAW_BASE}/{self.repo_path}"


OFFICIAL_FILES: tuple[OfficialFile, ...] = (
    OfficialFile("phase1_train.jsonl", "data/phase1_train.jsonl", 7_900_236,
                 "e9da6a73f827ffb9a8c0dc644c541d34ed76b3d4d1e4896ff5f7b37ddf5ae34d"),
    OfficialFile("phase1_test.jsonl", "data/phase1_test.jsonl", 829_105,
                 "f4b3bc5b095e45c816453dc4d748b755c680d61d55f9895d929a335b487c727d"),
    OfficialFile("phase2_train.jsonl", "data/phase2_train.jsonl", 456_135_365,
                 "1110237feeb51d1bc200cb37b8f965cfdc1036eac7d506094049366fe7dc1089", lfs=True),
    OfficialFile("phase2_test.jsonl", "data/phase2_test.jsonl", 12_240_719,
                 "6b172efa884ac8341a946dd82e06947c135b7254109fb3f7aa907c715d98aaad"),
    OfficialFile("math_splits/train.jsonl", "math_splits/train.jsonl", 10_896_985,
                 "90d96daeac3fe343ebb1e22ce93dd99690f75983e957f88de42f87cffe1e8076"),
    OfficialFile("math_splits/test.jsonl", "math_splits/test.jsonl", 446_564,
                 "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132"),
)

CHUNK = 1 << 20


class ChecksumError(PrmkitError):
    pass


def sha256_of(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def verify(path: str | os.PathLike, spec: OfficialFile) -> None:
    """Raise ChecksumError unless `path` has the official size and sha256."""
    size = os.path.getsize(path)
    if size != spec.size:
        hint = ""
        if size < 1024 and Path(path).read_bytes().startswith(b"version https://git-lfs"):
            hint = " (it is a git LFS pointer, not the data: run `git lfs pull` or use the download)"
        raise ChecksumError(f"{path}: size {size:,} B, expected {spec.size:,} B for {spec.name}{hint}")
    digest = sha256_of(path)
    if digest != spec.sha256:
        raise ChecksumError(f"{path}: sha256 {digest} does not match the official {spec.sha256}")


def _find_local(src: Path, spec: OfficialFile) -> Path | None:
    """The file in a user folder: flat, or laid out as the repository (data/, prm800k/...)."""
    base = Path(spec.name).name
    candidates = [
        src / spec.name,
        src / spec.repo_path,
        src / "prm800k" / spec.repo_path,
        src / "prm800k" / spec.name,
    ]
    if "/" not in spec.name:
        candidates.append(src / base)
    return next((p for p in candidates if p.is_file()), None)


def _place_local(found: Path, target: Path) -> str:
    """Hard-link when possible (no copy), else copy through a temporary file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.part")
    if tmp.exists():
        tmp.unlink()
    try:
        os.link(found, tmp)
        how = "linked"
    except OSError:
        shutil.copyfile(found, tmp)
        how = "copied"
    os.replace(tmp, target)
    return how


def _download(spec: OfficialFile, target: Path, timeout: float, progress=None) -> None:
    """Stream the file to a temporary file, hashing as it goes; keep it only if it verifies."""
    h = hashlib.sha256()
    size = 0
    with urllib.request.urlopen(spec.url(), timeout=timeout) as resp, atomic_write(target) as f:
        bar = progress(total=spec.size, desc=spec.name) if progress else None
        while chunk := resp.read(CHUNK):
            f.write(chunk)
            h.update(chunk)
            size += len(chunk)
            if bar is not None:
                bar.update(len(chunk))
        if bar is not None:
            bar.close()
        if size != spec.size:
            raise ChecksumError(
                f"{spec.url()}: got {size:,} B, expected {spec.size:,} B for {spec.name}"
            )
        if h.hexdigest() != spec.sha256:
            raise ChecksumError(
                f"{spec.url()}: sha256 {h.hexdigest()} does not match the official {spec.sha256}"
            )


def fetch(
    dest: str | os.PathLike,
    source: str | os.PathLike | None = None,
    files: tuple[OfficialFile, ...] | None = None,
    timeout: float = 30.0,
    log: Callable[[str], None] = print,
    progress=None,
) -> list[Path]:
    """Put verified copies of the official files under `dest`; return their paths.

    source: a folder holding the files (flat or in the repository layout); defaults to
    $PRMKIT_DATA; when neither is set the files are downloaded. A file already in `dest`
    with the right checksum is kept as it is.
    """
    files = OFFICIAL_FILES if files is None else files
    dest = Path(dest)
    if source is None and os.environ.get(ENV_VAR):
        source = os.environ[ENV_VAR]
    src = Path(source) if source is not None else None
    if src is not None and not src.is_dir():
        raise PrmkitError(f"{src}: not a folder (given with --from or ${ENV_VAR})")
    done: list[Path] = []
    for spec in files:
        target = dest / spec.name
        if target.is_file():
            try:
                verify(target, spec)
                log(f"ok       {target} (already present, checksum verified)")
                done.append(target)
                continue
            except ChecksumError as e:
                log(f"replace  {target}: {e}")
        if src is not None:
            found = _find_local(src, spec)
            if found is None:
                raise PrmkitError(
                    f"{spec.name} not found in {src} (looked for {spec.name} and {spec.repo_path})"
                )
            verify(found, spec)
            how = _place_local(found, target)
            log(f"{how:<8} {found} -> {target} (checksum verified)")
        else:
            try:
                _download(spec, target, timeout, progress)
            except (urllib.error.URLError, OSError, TimeoutError) as e:
                raise PrmkitError(
                    f"could not download {spec.url()} ({e}). Without internet access, put the "
                    f"official files in a folder and pass --from DIR or set ${ENV_VAR}=DIR."
                ) from None
            log(f"download {spec.url()} -> {target} (checksum verified)")
        done.append(target)
    return done
