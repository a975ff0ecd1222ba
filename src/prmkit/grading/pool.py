"""Persistent grading worker processes with a hard wall-clock limit per comparison.

Each worker is a `python -m prmkit.grading._worker` subprocess (started with subprocess,
so it also works inside daemonic multiprocessing workers). It enforces the limit itself by
killing its forked child; the parent keeps a backstop at limit * 1.08 and replaces a
worker that misses it. No signals are used, so any thread may call `compare`.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson

from prmkit.errors import PrmkitError

STARTUP_TIMEOUT_S = 120.0
BACKSTOP_FACTOR = 1.08


class GradingWorkerError(PrmkitError):
    """A grading worker could not be started."""


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONHASHSEED", "0")
    return env


class GradingWorker:
    """One supervisor subprocess; not thread-safe on its own (the pool hands it to one caller)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "prmkit.grading._worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_worker_env(),
            close_fds=True,
            start_new_session=True,  # own process group: killed together with its child
        )
        self._buffer = b""
        self._next_id = 0
        self.ready = False
        self.owner_pid = os.getpid()

    def _readline(self, deadline: float) -> bytes | None:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        if self.ready:
            return
        line = self._readline(time.monotonic() + timeout)
        if line is None or not orjson.loads(line).get("ready"):
            self.close()
            raise GradingWorkerError(
                f"grading worker did not start within {timeout:.0f} s "
                f"(try: {sys.executable} -m prmkit.grading._worker)"
            )
        self.ready = True

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def compare(self, given: str, gold: str, timeout: float) -> tuple[bool | None, str]:
        """(correct, reason) from the worker; (None, 'timeout') past `timeout` seconds."""
        self.wait_ready()
        self._next_id += 1
        request_id = self._next_id
        message = orjson.dumps({"id": request_id, "given": given, "gold": gold, "timeout": timeout})
        started = time.monotonic()
        try:
            self.proc.stdin.write(message + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.close()
            return None, "worker-crashed"
        deadline = started + timeout * BACKSTOP_FACTOR
        while True:
            line = self._readline(deadline)
            if line is None:  # supervisor stuck or gone: replace it
                self.close()
                return None, "timeout" if time.monotonic() >= deadline else "worker-crashed"
            reply = orjson.loads(line)
            if reply.get("id") == request_id:
                return reply["correct"], reply["reason"]

    def close(self) -> None:
        try:  # the supervisor and its forked child
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class WorkerPool:
    """Idle workers handed out one per caller; grows on demand, keeps at most `max_idle`."""

    def __init__(self, max_idle: int | None = None) -> None:
        self.max_idle = max_idle or max(2, os.cpu_count() or 1)
        self._idle: list[GradingWorker] = []
        self._lock = threading.Lock()
        self.owner_pid = os.getpid()

    def start(self, n: int) -> None:
        """Start up to `n` idle workers in parallel and wait until they are ready."""
        with self._lock:
            missing = max(0, n - len(self._idle))
            fresh = [GradingWorker() for _ in range(missing)]
        for worker in fresh:
            worker.wait_ready()
        with self._lock:
            self._idle.extend(fresh)

    def acquire(self) -> GradingWorker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive:
                    return worker
                worker.close()
        worker = GradingWorker()
        worker.wait_ready()
        return worker

    def release(self, worker: GradingWorker) -> None:
        if not worker.alive:
            worker.close()
            return
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(worker)
                return
        worker.close()

    def compare(self, given: str, gold: str, timeout: float) -> tuple[bool | None, str]:
        worker = self.acquire()
        try:
            return worker.compare(given, gold, timeout)
        finally:
            self.release(worker)

    def close(self) -> None:
        if os.getpid() != self.owner_pid:  # inherited through fork: not ours to close
            self._idle = []
            return
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


_default_pool: WorkerPool | None = None
_default_lock = threading.Lock()


def default_pool() -> WorkerPool:
    """The process-wide pool used by `grade_answer`; a forked process gets its own."""
    global _default_pool
    with _default_lock:
        if _default_pool is None or _default_pool.owner_pid != os.getpid():
            _default_pool = WorkerPool()
        return _default_pool


@atexit.register
def _close_default_pool() -> None:
    if _default_pool is not None and _default_pool.owner_pid == os.getpid():
        _default_pool.close()
