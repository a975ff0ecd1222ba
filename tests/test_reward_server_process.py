# ruff: noqa: F811  (pytest fixtures imported from test_reward_server)
"""`prmkit serve` in a subprocess on 127.0.0.1 with a tiny random PRM, where the process
itself is measured: slow clients past its open-file limit, and its resident memory
around a large request. Bounded in sockets and seconds; the server is stopped after."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from test_reward_server import AUTH, KEY, PROBLEMS, free_port, model_dir  # noqa: F401
from test_reward_server_limits import STEP_TEXT, Dribbler


class Serve:
    """`prmkit serve` in a subprocess on 127.0.0.1 (optionally under an open-file limit);
    `start()` again after `kill()` serves the same port."""

    def __init__(self, folder, *extra: str, fd_limit: int | None = None):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.args = [sys.executable, "-c", "import sys; from prmkit.cli import main; sys.exit(main())",
                     "serve", str(folder), "--port", str(port), "--dtype", "fp32",
                     "--device", "cpu", "--log-level", "warning", *extra]
        self.fd_limit = fd_limit
        self.proc: subprocess.Popen | None = None

    def start(self) -> Serve:
        def limit():
            import resource

            resource.setrlimit(resource.RLIMIT_NOFILE, (self.fd_limit, self.fd_limit))

        self.proc = subprocess.Popen(self.args, env={**os.environ, "PRMKIT_API_KEY": KEY,
                                                     "OMP_NUM_THREADS": "1"},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=None if self.fd_limit is None else limit)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", headers=AUTH, timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not start in 90 s")

    def rss_mb(self) -> float:
        pages = int(Path(f"/proc/{self.proc.pid}/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20

    def kill(self) -> None:
        """SIGKILL: no shutdown, what is queued or in the batch is lost."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> str:
        """SIGTERM (SIGKILL after 30 s); returns what the server wrote to stderr."""
        if self.proc is None:
            return ""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.stderr.read().decode()


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc and sets RLIMIT_NOFILE")


@linux_only
def test_slow_clients_past_the_fd_limit_do_not_stop_health(model_dir):
    # 1,100 slow sockets under a 1,024 file-descriptor limit: connection resets for every
    # other client, /health too, for the whole attack (here 600 under 512)
    server = Serve(model_dir, "--header-timeout", "4", fd_limit=512).start()
    host, port = server.url.removeprefix("http://").split(":")
    try:
        socks = []
        for _ in range(600):
            try:
                socks.append(socket.create_connection((host, int(port)), timeout=5))
            except OSError:  # the kernel's queue full for a moment: the attack goes on
                time.sleep(0.05)
        slow = Dribbler(socks, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", seconds=10)
        try:
            time.sleep(1.0)
            for _ in range(5):
                start = time.monotonic()
                r = httpx.get(server.url + "/health", headers=AUTH, timeout=2.0)
                assert r.status_code == 200 and time.monotonic() - start < 2.0
                time.sleep(0.3)
        finally:
            slow.close()
        assert len(socks) > 512 and len(slow.closed_after) == len(socks)
        metrics = httpx.get(server.url + "/metrics", headers=AUTH, timeout=5).text
        assert 'prmkit_reward_connections_closed_total{reason="evicted"}' in metrics
    finally:
        log = server.stop()
    assert "out of system resource" not in log and "Too many open files" not in log
    assert "max_connections 1024 lowered to 192" in log


def long_tail(k: int, chars: int) -> str:
    """A completion of five short steps, then one step of about `chars` characters: the
    PRM reads the five (the long step does not fit in its max_length), yet the whole text
    is parsed, bounded and the long step tokenised, as any large request's is."""
    return (f"Case {k}.\n\n" + STEP_TEXT * 5
            + ("so 12 - 5 = 7 and 3 * 4 = 12; " * (chars // 30 + 1))[:chars])


# bounds with room for torch's one-time buffers of new shapes (7 to 50 MB) and a busy
# machine; the unfixed server took +540 MB at the peak and kept +480 MB
PEAK_MB, KEPT_MB = 96, 64


@linux_only
def test_memory_returns_after_large_request(model_dir):
    # a 48 MB request raised the server's resident size by 4.4 GB and kept it (here, before
    # the fix: +540 MB at the peak and +480 MB kept for an 8 MB request)
    server = Serve(model_dir).start()
    post = lambda c: httpx.post(server.url + "/v1/step_rewards", headers=AUTH,  # noqa: E731
                                timeout=300, json={"prompts": PROBLEMS[:1] * len(c),
                                                   "completions": c})
    peak, stop = [0.0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], server.rss_mb())
            time.sleep(0.01)

    try:
        assert post([long_tail(k, 2000) for k in range(4)]).status_code == 200  # warm up
        time.sleep(1.0)
        before = server.rss_mb()
        completions = [long_tail(k, 80_000) for k in range(100)]
        assert 7 < sum(map(len, completions)) / 2**20 < 9  # an 8 MB body
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            answer = post(completions)
        finally:
            stop.set()
            sampler.join()
        assert answer.status_code == 200 and len(answer.json()["results"]) == 100
        deadline, after = time.monotonic() + 10, server.rss_mb()
        while after - before > KEPT_MB and time.monotonic() < deadline:
            time.sleep(0.2)  # freed memory goes back once the answer is sent
            after = server.rss_mb()
    finally:
        server.stop()
    assert peak[0] - before <= PEAK_MB, (before, peak[0])
    assert after - before <= KEPT_MB, (before, after)


@linux_only
def test_the_open_file_limit_is_raised_and_the_cap_fitted_below_it():
    import resource

    from prmkit.errors import PrmkitError
    from prmkit.rewards.serving.connections import (
        BACKLOG,
        FD_RESERVE,
        ConnectionLimits,
        fit_to_fd_limit,
        raise_fd_limit,
    )

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 1024:
        pytest.skip("needs a finite hard limit above 1024")
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
        assert raise_fd_limit() == hard == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    limits = ConnectionLimits(max_connections=5000)
    assert fit_to_fd_limit(limits, 1024).max_connections == 1024 - FD_RESERVE - BACKLOG
    assert fit_to_fd_limit(limits, 100_000) is limits
    with pytest.raises(PrmkitError, match="leaves no room for connections"):
        fit_to_fd_limit(limits, FD_RESERVE + BACKLOG)


def test_serve_refuses_limits_that_cannot_work(tmp_path, capsys, monkeypatch):
    from prmkit.cli import main

    monkeypatch.delenv("PRMKIT_API_KEY", raising=False)
    for args, says in [
        (["--max-request-tokens", "100", "--max-queue-tokens", "10"],
         "max_request_tokens (100) is more than the queue holds (max_queue_tokens 10)"),
        (["--header-timeout", "0"], "header_timeout must be positive, got 0.0"),
        (["--max-connections", "0"], "max_connections must be positive, got 0"),
    ]:
        assert main(["serve", str(tmp_path), *args]) == 2
        assert says in capsys.readouterr().err
