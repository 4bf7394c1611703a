"""The load-balancing proxy's HTTP/1.1 client: one asyncio protocol per connection to a worker,
httptools' parser for the answer, and a pool of idle connections per worker address.

Why not a general client: a proxy pays its client's cost on every request, and what it needs
is narrow (send a request whose head it already holds, hand the answer's head and body on as
they come, keep the connection for the next request). aiohttp's client did this for about
150 µs of CPU per request, most of it in its general machinery (its request and response
objects, payload registry, timers, cookie and redirect handling the proxy turns off); this is
what uvicorn does on the server side, turned around: the same parser (``httptools``), a
protocol that writes the request in one ``write`` and reads the answer straight into the
parser. ``services/lb_proxy.py`` decides where a request goes and what becomes of a failure.

What it keeps of HTTP/1.1: keep-alive (a connection goes back to the pool only when its answer
was read to its end and neither side said ``Connection: close``), informational ``1xx`` answers
skipped, answers to ``HEAD`` read as having no body, a request body of unknown length sent
chunked, flow control both ways (writing waits while the worker's socket is full; reading
pauses while the caller has not taken what came), and a bound on the answer's head
(``HEADER_LINE_BYTES`` a line, ``HEAD_BYTES`` in all).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import httptools

#: The longest header line (and status line) a worker's answer may have.
HEADER_LINE_BYTES = 65_536
#: The most an answer's head may hold in all.
HEAD_BYTES = 1024 * 1024
#: Reading from the worker pauses while this much of the answer waits for the caller.
HIGH_WATER = 256 * 1024
#: How long a connection may sit idle in the pool: under uvicorn's own keep-alive (5 s), so a
#: worker running uvicorn rarely closes one the pool is about to use.
IDLE_SECONDS = 4.0

T = TypeVar("T")


class UpstreamError(Exception):
    """The worker's side of a request failed: the connection broke or the answer was not HTTP."""


class NotConnected(UpstreamError):
    """Nothing was sent: the worker could not be reached (safe to try another)."""


@dataclass(frozen=True, slots=True)
class Head:
    status: int
    #: As the worker wrote them, names in lower case.
    headers: list[tuple[bytes, bytes]]


class Connection(asyncio.Protocol):
    """One connection to a worker, for one request at a time."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._lost = False
        self._error: Exception | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        #: The answer being read.
        self._head_future: asyncio.Future[Head] | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_size = 0
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        #: What ``body`` waits on for the next piece (or the end, or a failure).
        self._more: asyncio.Future[None] | None = None
        self._complete = False
        self._no_body = False
        self._keep_alive = False
        #: When it went back to the pool (the loop's clock).
        self.idle_since = 0.0

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._head_future is None or self._complete:
            # Nothing was asked (an idle connection), or the answer had ended: not HTTP.
            self._fail(UpstreamError("the worker sent what nobody asked for"))
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamError("the worker switched protocols"))
        except httptools.HttpParserError as exc:
            # A callback's own refusal (a head too large) comes wrapped in the parser's error.
            cause = exc.__cause__ or exc.__context__
            self._fail(cause if isinstance(cause, UpstreamError) else UpstreamError(str(exc)))
        except UpstreamError as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        return False  # close: the answer ends here, or is cut short

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if not self._complete:
            self._fail(UpstreamError(f"the connection closed: {exc}" if exc else "closed early"))
        self._writable.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- httptools callbacks ---------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) + len(value) > HEADER_LINE_BYTES:
            raise UpstreamError("a header line of the answer is too long")
        self._head_size += len(name) + len(value)
        if self._head_size > HEAD_BYTES:
            raise UpstreamError("the answer's head is too large")
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            self._headers = []  # informational: the real answer follows
            return
        self._keep_alive = self._parser.should_keep_alive()
        future = self._head_future
        if future is not None and not future.done():
            future.set_result(Head(status, self._headers))
        if self._no_body:
            # An answer to HEAD: what its length says is not sent. The parser would wait for
            # it, so the answer ends here and the connection is not used again.
            self._keep_alive = False
            self._end()

    def on_body(self, body: bytes) -> None:
        if self._complete:
            return
        self._chunks.append(body)
        self._buffered += len(body)
        self._wake()
        if self._buffered > HIGH_WATER and self.transport is not None:
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if self._parser.get_status_code() >= 200:
            self._end()

    def _end(self) -> None:
        self._complete = True
        self._wake()

    def _wake(self) -> None:
        more = self._more
        if more is not None and not more.done():
            more.set_result(None)

    def _fail(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        future = self._head_future
        if future is not None and not future.done():
            future.set_exception(error)
        self._wake()
        if self.transport is not None:
            self.transport.close()

    # -- the request -----------------------------------------------------------------------
    @property
    def reusable(self) -> bool:
        """Whether it can take another request: its last answer was read to its end."""
        return (
            self._complete
            and self._keep_alive
            and self._error is None
            and not self._lost
            and self.transport is not None
            and not self.transport.is_closing()
        )

    def _reset(self, method: str) -> None:
        self._headers, self._head_size = [], 0
        self._chunks.clear()
        self._buffered = 0
        self._more = None
        self._complete = False
        self._no_body = method == "HEAD"
        self._keep_alive = False
        self._head_future = asyncio.get_running_loop().create_future()

    async def send(
        self, method: str, head: bytes, body: bytes | AsyncIterable[bytes] | None, chunked: bool
    ) -> None:
        """Write the request: ``head`` ends with its blank line; ``chunked``: the body is of
        unknown length and goes in chunks."""
        if self._lost or self.transport is None or self.transport.is_closing():
            raise UpstreamError("the connection closed while idle")
        self._reset(method)
        transport = self.transport
        if body is None or isinstance(body, bytes):
            transport.write(head + body if body else head)
            return
        transport.write(head)
        async for piece in body:
            if not piece:
                continue
            if self._error is not None:
                raise self._error
            transport.write(b"%x\r\n%b\r\n" % (len(piece), piece) if chunked else piece)
            if not self._writable.is_set():
                await self._writable.wait()
        if chunked:
            transport.write(b"0\r\n\r\n")

    async def head(self, timeout: float) -> Head:
        """The answer's status and headers, within ``timeout`` seconds."""
        assert self._head_future is not None
        return await _within(self._head_future, timeout)

    async def body(self, timeout: float) -> AsyncIterator[bytes]:
        """The answer's body as it comes, each piece within ``timeout`` of the one before."""
        while True:
            while self._chunks:
                piece = self._chunks.popleft()
                self._buffered -= len(piece)
                if self._buffered <= HIGH_WATER // 2 and self.transport is not None:
                    self.transport.resume_reading()
                yield piece
            if self._complete:
                return
            if self._error is not None:
                raise self._error
            self._more = asyncio.get_running_loop().create_future()
            await _within(self._more, timeout)

    @property
    def done(self) -> bool:
        """Its answer was read to its end."""
        return self._complete and not self._chunks

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


async def _within(waiter: asyncio.Future[T], timeout: float) -> T:
    """``waiter``'s result, or ``TimeoutError`` after ``timeout`` seconds: one timer, lighter
    than ``asyncio.timeout``'s context on every request of the proxy (docs/performance.md)."""
    if waiter.done():
        return waiter.result()
    timer = asyncio.get_running_loop().call_later(timeout, _expire, waiter)
    try:
        return await waiter
    finally:
        timer.cancel()


class Pool:
    """Idle connections per worker address, the most recently used first."""

    def __init__(self, connect_timeout: float) -> None:
        self._connect_timeout = connect_timeout
        self._idle: dict[str, list[Connection]] = {}

    def idle(self, address: str) -> Connection | None:
        """A pooled connection to ``address`` that can take a request, or None."""
        pooled = self._idle.get(address)
        now = asyncio.get_running_loop().time()
        while pooled:
            conn = pooled.pop()
            if conn.reusable and now - conn.idle_since < IDLE_SECONDS:
                return conn
            conn.close()
        return None

    async def connect(self, address: str) -> Connection:
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _transport, conn = await loop.create_connection(
                    lambda: Connection(address), host.strip("[]"), int(port)
                )
        except (OSError, TimeoutError) as exc:
            raise NotConnected(f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc)) from None
        return conn

    def give_back(self, conn: Connection) -> None:
        """After its answer: kept for the next request if it can take one, else closed."""
        if conn.reusable and conn.done:
            conn.idle_since = asyncio.get_running_loop().time()
            self._idle.setdefault(conn.address, []).append(conn)
        else:
            conn.close()

    def close(self) -> None:
        for pooled in self._idle.values():
            for conn in pooled:
                conn.close()
        self._idle.clear()
