"""Which connections a server keeps: time limits on a request's head and body, and a cap.

A client that opens a connection and says nothing, or sends its headers a byte at a time, or
declares a body it never sends, holds a file descriptor for as long as the server lets it; a
thousand of them used to make every new request fail (issue 13). ``ConnectionWatch`` is what
``api/lean_http.py``'s protocol reports each connection's progress to:

* a connection must send a whole request head within ``header_timeout`` of opening (or of
  starting its next request); a body must keep arriving, ``body_timeout`` at most between two
  pieces. Either is closed past its time. Waits that are the server's own (reading paused
  for flow control or pipelining, a ``100-continue`` not yet sent) do not count, and neither
  does a connection idling between requests: uvicorn's keep-alive timeout (an hour, on
  purpose: see ``cli.py``) rules those.
* at most ``max_connections`` are open. One over that closes the connection that is the least
  use to anyone: the oldest still waiting for its request head, else the one idle the
  longest. Only when every connection is busy with a request is the new one refused with a
  quick 503. So ``/healthz`` and real requests keep getting through an idle or slow flood.

The state per connection is a phase and the loop time it began; one timer per server (not one
per request) sweeps them, so the hot path only stores a float now and then.
"""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

#: A connection's phases. ``FRESH``: opened, not a byte yet; ``HEAD``: a request head is
#: arriving; ``BODY``: its body is; ``BUSY``: the request is in, its answer not yet out;
#: ``IDLE``: between requests (keep-alive); ``CLOSING``: closed by this module, not yet gone.
FRESH, HEAD, BODY, BUSY, IDLE, CLOSING = range(6)

#: File descriptors kept back from the connection cap for everything else a server opens:
#: the database, worker log files and pipes, webhook and peer connections.
RESERVED_FILES = 256


def _plain(status: bytes, text: bytes, *headers: bytes) -> bytes:
    """A whole answer that closes the connection, written as the connection is dropped."""
    head = [b"HTTP/1.1 " + status, b"content-type: text/plain; charset=utf-8", *headers]
    head += [b"content-length: " + str(len(text)).encode(), b"connection: close"]
    return b"\r\n".join(head) + b"\r\n\r\n" + text


_REFUSED = _plain(
    b"503 Service Unavailable", b"too many open connections; try again shortly", b"retry-after: 1"
)
_TIMED_OUT = _plain(b"408 Request Timeout", b"the request did not arrive in time")


def raise_open_file_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit, where allowed, and
    answer the soft limit in force (the common default soft limit of 1,024 is what a flood of
    idle connections exhausted)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return soft if soft != resource.RLIM_INFINITY else 1 << 20
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        return soft
    return hard


def connection_cap(open_files: int) -> int:
    """The most connections to keep with ``open_files`` descriptors: what is left after
    ``RESERVED_FILES`` (or a quarter, on a low limit), and never fewer than 16."""
    return max(16, open_files - min(RESERVED_FILES, open_files // 4))


def _current_cap() -> int:
    return connection_cap(resource.getrlimit(resource.RLIMIT_NOFILE)[0])


@dataclass(frozen=True)
class ConnectionRules:
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = field(default_factory=_current_cap)


class Watched(Protocol):
    """What the watch reads and writes of a connection (``LeanHttpProtocol``)."""

    phase: int
    since: float
    transport: asyncio.Transport

    def waiting_on_server(self) -> bool: ...
    def may_answer(self) -> bool: ...


class ConnectionWatch:
    """The rules applied to one server's connections (``server_state.connections``)."""

    def __init__(self, rules: ConnectionRules) -> None:
        self.rules = rules
        self._timer: asyncio.TimerHandle | None = None
        self._connections: set[Watched] | None = None
        # Closed here, not yet gone (connection_lost comes on a later loop turn): not counted.
        self._closing = 0
        self._tick = min(1.0, max(0.05, min(rules.header_timeout, rules.body_timeout) / 4))

    def opened(self, conn: Watched, connections: Iterable[object], now: float) -> bool:
        """A connection was accepted; False when it was refused (and is being closed)."""
        conns: set[Watched] = connections  # type: ignore[assignment]
        self._connections = conns
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._tick, self._sweep)
        if len(conns) - self._closing <= self.rules.max_connections:
            return True
        victim = self._least_use(conns, conn)
        if victim is not None:
            self._close(victim, None)
            return True
        self._close(conn, _REFUSED)
        return False

    def closed(self, conn: Watched) -> None:
        """A connection is gone (``connection_lost``)."""
        if conn.phase == CLOSING:
            self._closing -= 1
        conn.phase = CLOSING

    def _close(self, conn: Watched, answer: bytes | None) -> None:
        conn.phase = CLOSING
        self._closing += 1
        if answer is not None:
            conn.transport.write(answer)
        conn.transport.close()

    @staticmethod
    def _least_use(conns: set[Watched], new: Watched) -> Watched | None:
        """The connection waiting longest for its request head, else the one idle longest."""
        waiting: Watched | None = None
        idle: Watched | None = None
        for conn in conns:
            phase = getattr(conn, "phase", BUSY)  # a protocol of another kind: leave it be
            if conn is new:
                continue
            if phase in (FRESH, HEAD):
                if waiting is None or conn.since < waiting.since:
                    waiting = conn
            elif phase == IDLE and (idle is None or conn.since < idle.since):
                idle = conn
        return waiting or idle

    def _sweep(self) -> None:
        conns = self._connections
        if not conns:
            self._timer = None  # restarted by the next connection
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        head_by = now - self.rules.header_timeout
        body_by = now - self.rules.body_timeout
        late: list[tuple[Watched, bytes | None]] = []
        for conn in conns:
            phase = getattr(conn, "phase", BUSY)
            if phase in (FRESH, HEAD):
                if conn.since < head_by:
                    if conn.waiting_on_server():
                        conn.since = now
                    else:
                        timed_out = phase == HEAD and conn.may_answer()
                        late.append((conn, _TIMED_OUT if timed_out else None))
            elif phase == BODY and conn.since < body_by:
                if conn.waiting_on_server():
                    conn.since = now
                else:
                    late.append((conn, _TIMED_OUT if conn.may_answer() else None))
        for conn, answer in late:  # not while iterating: closing may change the set
            self._close(conn, answer)
        self._timer = loop.call_later(self._tick, self._sweep)
