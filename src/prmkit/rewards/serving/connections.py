"""Connection limits of the reward server: read deadlines, a connection cap, the fd limit.

uvicorn bounds the size of request headers (h11's 16 KiB) and closes a keep-alive
connection idle for 5 s, but nothing bounds how long a client takes to send its request:
a client sending its headers or body a byte a second holds its connection (and a file
descriptor) for ever, and enough of them exhaust the descriptors, after which every other
client, /health too, is refused. Nor does uvicorn cap connections when it accepts them
(`limit_concurrency` counts connections only once a request's headers are in, and then
answers 503 to every request while the slow sockets it counts stay open). So the server
runs uvicorn's h11 protocol with these additions (`GuardedH11Protocol`):

- header deadline: a request's line and headers must be in within `header_timeout`
  seconds of the connection's opening, or of the request's first byte on a kept-alive
  connection; else 408 and the connection is closed.
- body deadline: the body must be in within `body_timeout` seconds of the headers, plus
  one second for every `min_body_rate` bytes received (Apache's mod_reqtimeout rule: a
  client keeping up that rate is never cut; one sending a byte a second is cut after
  `body_timeout`); else 408 and close. A client that stops reading what the server
  writes for `body_timeout` seconds is cut too (uvicorn counts an answer done once it is
  handed to the socket, and its keep-alive close waits for the client to read it).
- connection cap: at most `max_connections` open; a new connection beyond it takes the
  place of the oldest one that is idle, still has no complete headers, sends its body
  below `min_body_rate` or has stopped reading; when no such connection exists the
  newcomer gets 503 and is closed. The cap stays below the open-file limit, less what
  the process needs and the kernel's queue of connections not yet accepted (accepted in
  bulk before the cap is checked): `fit_to_fd_limit`, after `raise_fd_limit` has raised
  the soft limit to the hard one.

The guard follows h11's view of the client's side, so the server always runs uvicorn's
h11 protocol (not httptools where installed): parsing costs little beside a PRM's forward.
Everything runs on the event loop with one timer per connection, re-armed only when it
fires (the body deadline moves as bytes arrive: the timer checks it then).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from prmkit.errors import PrmkitError

log = logging.getLogger("prmkit.rewards.serving")

FD_RESERVE = 64  # descriptors kept for the process itself (model files, the loop, logs)
BACKLOG = 256  # connections the kernel queues before accept; accepted in bulk, so reserved too
TIMED_OUT = "prmkit.timed_out"  # scope key the routes read: a 408, not a client that left


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = 1024
    header_timeout: float = 10.0  # seconds for a request's line and headers
    body_timeout: float = 30.0  # seconds for its body, plus 1 s per min_body_rate bytes
    min_body_rate: float = 256 * 1024  # bytes per second a body must keep up
    keep_alive: float = 5.0  # seconds an idle connection is kept between requests

    def __post_init__(self):
        for name in ("header_timeout", "body_timeout", "min_body_rate", "keep_alive"):
            if not getattr(self, name) > 0:
                raise PrmkitError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_connections < 1:
            raise PrmkitError(f"max_connections must be positive, got {self.max_connections}")


def raise_fd_limit() -> int:
    """Raise the soft limit on open files to the hard limit where allowed; returns the
    soft limit in force (a large number where the platform has none)."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return 1 << 20
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, e)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def fit_to_fd_limit(limits: ConnectionLimits, fd_limit: int) -> ConnectionLimits:
    """`limits` with max_connections lowered to what `fd_limit` leaves room for."""
    room = fd_limit - FD_RESERVE - BACKLOG
    if room < 1:
        raise PrmkitError(f"the open-file limit ({fd_limit}) leaves no room for connections "
                          f"(the server keeps {FD_RESERVE + BACKLOG}); raise it (ulimit -n)")
    if limits.max_connections <= room:
        return limits
    log.warning("max_connections %d lowered to %d: the open-file limit is %d",
                limits.max_connections, room, fd_limit)
    return ConnectionLimits(room, limits.header_timeout, limits.body_timeout,
                            limits.min_body_rate, limits.keep_alive)


class Observer:
    """What the guard reports (the server's metrics implement it)."""

    def connection_closed(self, reason: str) -> None: ...


WAITING, BODY, APP, IDLE = "waiting", "body", "app", "idle"


def _raw_answer(status: bytes, text: bytes, extra: bytes = b"") -> bytes:
    """An answer written straight to the socket (h11 has no request to answer yet)."""
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: text/plain; charset=utf-8\r\n"
            + extra + b"content-length: " + str(len(text)).encode()
            + b"\r\nconnection: close\r\n\r\n" + text)


_408 = _raw_answer(b"408 Request Timeout", b"the request did not arrive in time")
_503 = _raw_answer(b"503 Service Unavailable", b"too many connections", b"retry-after: 1\r\n")


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with read deadlines and a connection cap (module docstring).
    `guarded_protocol` makes a subclass bound to one `ConnectionLimits`."""

    limits = ConnectionLimits()
    observer: Any = Observer()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.timeout_keep_alive = self.limits.keep_alive
        self._phase, self._since, self._received = WAITING, time.monotonic(), 0
        self._paused_at: float | None = None  # since when writing is paused
        self._timer = None

    # ---- phases -------------------------------------------------------------------------
    def _enter(self, phase: str) -> None:
        if phase == self._phase:
            return
        self._phase, self._since, self._received = phase, time.monotonic(), 0
        self._arm()

    def _deadline(self) -> float | None:
        lim, out = self.limits, None
        if self._phase == WAITING:
            out = self._since + lim.header_timeout
        elif self._phase == BODY:
            out = self._since + lim.body_timeout + self._received / lim.min_body_rate
        if self._paused_at is not None:  # the client is not reading what was written
            out = min(math.inf if out is None else out, self._paused_at + lim.body_timeout)
        return out

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self._deadline()
        if deadline is not None and self.transport is not None:
            self._timer = self.loop.call_later(max(0.0, deadline - time.monotonic()),
                                               self._check)

    def _check(self) -> None:
        self._timer = None
        deadline = self._deadline()
        if deadline is None or self.transport is None or self.transport.is_closing():
            return
        now = time.monotonic()
        if now < deadline:  # the body deadline moved as bytes came in
            self._arm()
            return
        if self._paused_at is not None and now >= self._paused_at + self.limits.body_timeout:
            self._cut("write_timeout")
        else:
            self._cut("header_timeout" if self._phase == WAITING else "body_timeout")

    def _cut(self, reason: str) -> None:
        """Close the connection: with a 408 unless an answer has started (a client that
        stopped reading its answer is aborted)."""
        cycle = self.cycle
        if self._phase == BODY and cycle is not None and not cycle.response_complete:
            self.scope[TIMED_OUT] = True  # the route counts a 408, not a client gone
        if reason == "write_timeout":
            self.transport.abort()
        else:
            if self._phase == WAITING or cycle is None or not cycle.response_started:
                self.transport.write(_408)
            self.transport.close()
        self.observer.connection_closed(reason)

    def _track(self) -> None:
        """The phase from h11's view of the client's side, after events were handled."""
        if self.transport is None or self.transport.is_closing():
            return
        theirs = self.conn.their_state
        if theirs is h11.IDLE:
            if self._phase in (APP, BODY) or (self._phase == IDLE and self.conn.trailing_data[0]):
                self._enter(WAITING)
        elif theirs is h11.SEND_BODY:
            self._enter(BODY)
        elif self._phase != APP:
            self._enter(APP)

    # ---- uvicorn's protocol hooks ---------------------------------------------------------
    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._since = time.monotonic()
        self._arm()
        if len(self.connections) > self.limits.max_connections:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase == IDLE:
            self._enter(WAITING)  # a kept-alive connection's next request begins
        elif self._phase == BODY:
            self._received += len(data)
        super().data_received(data)
        self._track()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE and not self.conn.trailing_data[0]:
            self._enter(IDLE)  # uvicorn's keep-alive timer runs
        else:
            self._track()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._paused_at = time.monotonic()  # an answer written, not read (even once sent)
        self._arm()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._paused_at = None
        self._arm()

    # ---- the cap --------------------------------------------------------------------------
    def _slow(self, now: float) -> bool:
        """Whether this connection is one a newcomer may replace."""
        if self._phase in (IDLE, WAITING) or \
                (self._paused_at is not None and now - self._paused_at > 1):
            return True
        elapsed = now - self._since
        return self._phase == BODY and elapsed > 1 and \
            self._received < elapsed * self.limits.min_body_rate

    def _make_room(self) -> None:
        now = time.monotonic()
        live = [p for p in self.connections
                if p is not self and p.transport is not None and not p.transport.is_closing()]
        if len(live) < self.limits.max_connections:
            return  # the others over the cap are closing already
        slow = [p for p in live if isinstance(p, GuardedH11Protocol) and p._slow(now)]
        if slow:
            victim = min(slow, key=lambda p: (p._phase == BODY, p._since))
            victim.transport.abort()
            victim.observer.connection_closed("evicted")
            return
        self.transport.write(_503)
        self.transport.close()
        self.observer.connection_closed("refused")


def guarded_protocol(limits: ConnectionLimits, observer=None) -> type[GuardedH11Protocol]:
    """A `GuardedH11Protocol` subclass bound to `limits` (uvicorn's `http=` takes a class)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,),
                {"limits": limits, "observer": observer or Observer()})


def uvicorn_config(app, host: str, port: int, limits: ConnectionLimits | None = None,
                   fd_limit: int | None = None, **kwargs):
    """A `uvicorn.Config` for `app` with the guarded protocol; the connection cap fitted to
    `fd_limit` (default: the soft limit, raised to the hard one first). The app's metrics
    (create_app) count the connections the guard closes."""
    import uvicorn

    limits = fit_to_fd_limit(limits or ConnectionLimits(),
                             raise_fd_limit() if fd_limit is None else fd_limit)
    observer = getattr(getattr(app, "state", None), "metrics", None)
    return uvicorn.Config(app, host=host, port=port, http=guarded_protocol(limits, observer),
                          ws="none", backlog=BACKLOG, timeout_keep_alive=limits.keep_alive,
                          **kwargs)
