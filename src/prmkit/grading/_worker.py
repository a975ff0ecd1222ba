"""Grading worker: a supervisor process that runs comparisons in a forked child.

Protocol: one JSON object per line. The parent sends {"id", "given", "gold", "timeout"};
the supervisor answers {"id", "correct", "reason"}. The supervisor imports sympy and
math-verify once, forks a child that does the work, and kills and re-forks the child when
a comparison passes its time limit (answering reason "timeout"). Forking a warm child takes
milliseconds, so a timeout costs no fresh import. No signals or threads are used for the
limit, so this works under any thread and inside daemonic worker processes.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

import orjson

CHILD_MEMORY_BYTES = int(os.environ.get("PRMKIT_GRADER_MEMORY_BYTES", str(3 * 1024**3)))


def _child_loop(requests: int, responses: int) -> None:
    import resource

    from prmkit.grading.symbolic import symbolic_compare

    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = CHILD_MEMORY_BYTES if hard == resource.RLIM_INFINITY else min(hard, CHILD_MEMORY_BYTES)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):
        pass
    reader = os.fdopen(requests, "rb")
    writer = os.fdopen(responses, "wb")
    for line in reader:
        request = orjson.loads(line)
        exit_after = False
        try:
            correct, reason = symbolic_compare(request["given"], request["gold"])
        except MemoryError:
            correct, reason, exit_after = None, "memory-limit", True
        except RecursionError:
            correct, reason = None, "recursion-limit"
        except Exception as e:  # noqa: BLE001 - any parser failure is a verdict, not a crash
            correct, reason = False, f"error:{type(e).__name__}"
        writer.write(orjson.dumps({"id": request["id"], "correct": correct, "reason": reason}))
        writer.write(b"\n")
        writer.flush()
        if exit_after:
            break


class _Child:
    def __init__(self) -> None:
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            code = 0
            try:
                os.close(req_w)
                os.close(resp_r)
                devnull = os.open(os.devnull, os.O_RDWR)
                os.dup2(devnull, 0)
                os.dup2(devnull, 1)
                _child_loop(req_r, resp_w)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        os.close(req_r)
        os.close(resp_w)
        self.pid = pid
        self.requests = req_w
        self.responses = resp_r
        self.buffer = b""

    def ask(self, line: bytes, timeout: float) -> bytes | None:
        """Send one request line; its answer line, or None on timeout or a dead child."""
        try:
            os.write(self.requests, line)
        except OSError:
            return None
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self.responses], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(self.responses, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        answer, self.buffer = self.buffer.split(b"\n", 1)
        return answer

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        for fd in (self.requests, self.responses):
            try:
                os.close(fd)
            except OSError:
                pass


def _write_all(fd: int, data: bytes) -> None:
    while data:
        written = os.write(fd, data)
        data = data[written:]


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import prmkit.grading.symbolic  # noqa: F401 - warm the imports once, before forking

    child = _Child()
    out = sys.stdout.fileno()
    _write_all(out, orjson.dumps({"ready": True, "pid": os.getpid()}) + b"\n")
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        request = orjson.loads(line)
        started = time.monotonic()
        answer = child.ask(line if line.endswith(b"\n") else line + b"\n", request["timeout"])
        if answer is None:
            timed_out = time.monotonic() - started >= request["timeout"] * 0.99
            reply = {
                "id": request["id"],
                "correct": None,
                "reason": "timeout" if timed_out else "worker-crashed",
            }
            _write_all(out, orjson.dumps(reply) + b"\n")
            child.kill()
            child = _Child()
            continue
        reply = orjson.loads(answer)
        _write_all(out, answer + b"\n")
        if reply.get("reason") == "memory-limit":
            child.kill()
            child = _Child()
    child.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
