"""The paths a command reads and writes, checked before any work.

`check_output`: where a command will write (a file, or a folder for a run or a report)
can be written: the path is not under a file, its nearest existing folder accepts a new
file (a real write is tried, so a read-only file system or a folder such as /sys is found
as well as permissions), a file output is not a folder and a folder output not a file;
and an existing output is the one rule every command follows: refused unless the run may
replace it (`--overwrite`) or, for a command that can continue it, continue it
(`--resume`). Run before a model is loaded or an input read, so a mistake costs nothing.

`check_input_file`: a file to read exists and is a file (a directory is reported as
one); a missing relative path names the folder it was read from.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from prmkit.errors import DataError, PrmkitError

RESUME = "--resume (resume=True)"
OVERWRITE = "--overwrite (overwrite=True)"


def existing_output_error(path: str | os.PathLike, resume: str | None = RESUME,
                          overwrite: str = OVERWRITE) -> PrmkitError:
    """The refusal to touch an output that exists when the run may neither continue nor
    replace it, naming the flags that allow it (resume None: the command cannot continue
    an output)."""
    if resume is None:
        return PrmkitError(f"{path} exists: pass {overwrite} to replace it")
    return PrmkitError(f"{path} exists: pass {resume} to continue it or {overwrite} to "
                       "replace it")


def _nearest_existing(path: Path) -> Path:
    """`path` or its nearest ancestor that exists (a relative path ends at '.')."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(".")


def check_writable_folder(folder: str | os.PathLike, for_path: str | os.PathLike) -> None:
    """`folder` exists or can be created, and a file can be written in it; errors name
    `for_path`, the output the folder is for."""
    folder = Path(folder)
    found = _nearest_existing(folder)
    if not found.is_dir():
        raise PrmkitError(f"{for_path}: cannot write there: {found} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".prmkit-write-check-", dir=found)
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise PrmkitError(f"{for_path}: cannot write in {found} ({why})") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def check_output_location(path: str | os.PathLike, folder: bool = False) -> Path:
    """Where a command writes can be written (a file output, or with folder=True a
    folder): not under a file, a file not a folder and a folder not a file, and its
    nearest existing folder takes a new file. Whether an output already there may be
    replaced is `check_output`'s part."""
    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        raise PrmkitError(f"{path} is a file; the output here is a folder")
    if not folder and path.is_dir():
        raise PrmkitError(f"{path} is a folder; the output here is a file (name a file in it)")
    check_writable_folder(path if folder else path.parent, path)
    return path


def check_output(path: str | os.PathLike, *, overwrite: bool = False, resume: bool = False,
                 resume_flag: str | None = None, overwrite_flag: str = "--overwrite",
                 folder: bool = False,
                 holds_output: Callable[[Path], bool] | None = None) -> Path:
    """Check where a command writes before it does any work (module docstring).

    path: the output file, or with folder=True the output folder.
    resume_flag: how the command is told to continue an existing output (None: it
    cannot, only `overwrite_flag` replaces one).
    holds_output: whether an existing path is an output to protect (default: a file
    exists, a folder is not empty).
    Returns the path; raises PrmkitError (exit code 2) naming it.
    """
    path = check_output_location(path, folder)
    if holds_output is None:
        def holds_output(p: Path) -> bool:
            return (p.is_dir() and any(p.iterdir())) if folder else p.exists()
    resume = resume and resume_flag is not None
    if path.exists() and holds_output(path):
        if not (overwrite or resume):
            raise existing_output_error(path, resume_flag, overwrite_flag)
        if resume and not os.access(path, os.W_OK):
            raise PrmkitError(f"{path}: cannot continue it, the file is not writable")
    return path


def where_relative(path: str | os.PathLike, base: str | os.PathLike | None = None) -> str:
    """For an error about `path`: the absolute path it was read as, when it was given
    relative ("relative to the working directory /x" or to `base`)."""
    if Path(path).is_absolute():
        return ""
    root = Path(base) if base is not None else Path.cwd()
    kind = "the working directory" if base is None else "the folder"
    return f" (read relative to {kind} {root.resolve()})"


def input_file_problem(path: str | os.PathLike, what: str = "file") -> str | None:
    """Why `path` cannot be read as a file ("no such file (read relative to ...)", "is a
    directory, not a file"), or None when it can."""
    p = Path(path)
    if p.is_dir():
        return "is a directory, not a file"
    if not p.exists():
        return f"no such {what}{where_relative(path)}"
    return None


def check_input_file(path: str | os.PathLike, what: str = "input file") -> Path:
    """`path` exists and is a file (DataError naming it otherwise: a directory is said
    to be one, a missing relative path names the folder it was read from)."""
    problem = input_file_problem(path, what)
    if problem is not None:
        raise DataError(str(path), None, None, problem)
    return Path(path)
