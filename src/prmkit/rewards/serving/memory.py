"""Handing the memory of a large request back to the system once it is answered.

CPython frees a request's objects as soon as it is answered, but glibc's allocator keeps
freed heap memory (and raises its threshold for giving large blocks back after each one
it frees), so the process's resident size stays near its peak. `malloc_trim(0)` returns
every free page of every arena; the server calls it after a request whose body was large
(on a worker thread: ctypes releases the interpreter meanwhile). Elsewhere than glibc it
does nothing.
"""

from __future__ import annotations

import ctypes
import functools

TRIM_AFTER_BYTES = 1 << 20  # bodies at least this large are followed by a trim


@functools.cache
def _libc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):  # not glibc
        return None


def release_memory() -> bool:
    """Give freed heap memory back to the system; False where that is not possible."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
