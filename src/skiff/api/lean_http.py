"""The hot ``/v2`` routes served straight from uvicorn's HTTP protocol, without ASGI plumbing
(where this sits in a request's way: api/v2.py).

``HotRoutes`` (api/hot.py) already spares these routes the framework's routing and middleware.
What is left around each of them inside uvicorn is its ASGI cycle: the scope, the proxy-headers
middleware's look at every request, two ``send`` messages each checked header by header and
each written to the socket on its own, and Starlette's ``Response.__call__``.
``LeanHttpProtocol`` is uvicorn's own ``HttpToolsProtocol`` (same parser, same keep-alive,
pipelining, flow control and shutdown) that, once a request's headers are in, checks whether it
names a hot route. If so, and it is a plain request (a body of at most ``LEAN_BODY_LIMIT`` bytes
with a ``Content-Length``, no ``Transfer-Encoding``, ``Expect`` or upgrade), a ``LeanCycle``
takes the place uvicorn's ``RequestResponseCycle`` would: it collects the body, calls the
route's handler through ``HotRoutes.call`` with a Starlette ``Request`` on a minimal scope, and
writes the whole answer (status line, uvicorn's default headers, the response's headers, the
body) in one write. Any other request goes through uvicorn's cycle and the full app, as before,
so every route keeps a single handler and the same answers.

What the ASGI cycle does around a request, a lean one gets too: uvicorn's proxy-headers
middleware (the one ``proxy_headers`` installed, with its ``forwarded_allow_ips``) corrects the
scope's client and scheme when a peer it trusts sent ``X-Forwarded-For`` or
``X-Forwarded-Proto`` (the peer is asked about once per connection, the middleware run only for
a request that has those headers); a response that streams is sent as uvicorn's cycle sends it
(chunked unless it has a length); ``Connection: close`` in a response closes the connection.

A ``LeanCycle`` offers the attributes uvicorn's protocol reads of its current cycle (``body``,
``more_body``, ``message_event``, ``response_complete``, ``disconnected``, ``keep_alive`` and
``run_asgi``), which is how it fits into uvicorn's pipelining queue and connection handling
unchanged. That is uvicorn's internals: ``TESTED_UVICORN`` names the versions this was tested
with (the one pinned in requirements.lock), and ``skiff serve`` refuses any other unless told
to do without this protocol (``SKIFF_FAST_HTTP=0``). ``tests/integration/api/test_lean_http.py``
runs a real uvicorn with this protocol, and without it, for the same answers.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import urllib.parse
from collections.abc import Callable
from typing import Any

import httptools
import uvicorn
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from skiff.api.body import WHOLE_BODY
from skiff.api.connections import (
    BODY,
    BUSY,
    FRESH,
    HEAD,
    IDLE,
    ConnectionRules,
    ConnectionWatch,
)
from skiff.api.hot import HotRoutes, Route
from skiff.api.lb import BUFFERED_BODY_BYTES as LB_BUFFERED_BODY_BYTES
from skiff.api.lb import ON_DISCONNECT
from skiff.api.lb import PREFIX as LB_PREFIX
from skiff.domain.balancing import endpoint_of_host

log = logging.getLogger(__name__)

#: Bodies up to this size are read whole before the handler runs; bigger ones (and bodies of
#: unknown length) take uvicorn's cycle, where a route's own limit answers 413 before reading.
LEAN_BODY_LIMIT = 1024 * 1024

#: The scope key under which a lean request offers a cheap "is the client still there?" check
#: (Starlette's ``is_disconnected`` opens an anyio cancel scope for every call).
CONNECTED = "skiff.connected"

_ASGI = {"version": "3.0", "spec_version": "2.3"}

#: The uvicorn versions this protocol was tested with: the one requirements.lock pins.
TESTED_UVICORN = ("0.54.0",)


def untested_uvicorn() -> str | None:
    """Why this protocol cannot be trusted with the uvicorn installed, or None when it can."""
    if uvicorn.__version__ in TESTED_UVICORN:
        return None
    return (
        f"uvicorn {uvicorn.__version__} is installed, but skiff's fast HTTP protocol "
        "(api/lean_http.py) builds on uvicorn's internals and is tested with uvicorn "
        f"{', '.join(TESTED_UVICORN)} only. Install that version (requirements.lock pins it), "
        "or set SKIFF_FAST_HTTP=0 to serve with uvicorn's own httptools protocol (the same "
        "answers, a little slower, and without the connection time limits and cap)."
    )


async def _corrected(_scope: Any, _receive: Any, _send: Any) -> None:
    """What uvicorn's proxy-headers middleware calls next when a lean request borrows it: the
    scope it corrected is all that was wanted."""


class LeanCycle:
    """One hot-route request on a connection, in the place of uvicorn's cycle; with no
    ``route``, a load-balancing endpoint's request, for its proxy (``HotRoutes.lb``)."""

    def __init__(
        self,
        protocol: LeanHttpProtocol,
        route: Route | None,
        params: dict[str, str],
        scope: dict[str, Any],
        keep_alive: bool,
        forwarded: bool,
    ) -> None:
        self.protocol = protocol
        self.route = route
        self.params = params
        self.scope = scope
        # What uvicorn's protocol reads and writes of its current cycle.
        self.body = bytearray()
        self.more_body = True
        self.message_event = asyncio.Event()
        self.response_complete = False
        self.disconnected = False
        self.keep_alive = keep_alive
        self.response_started = False
        #: Whether the scope's client and scheme are to be read from the proxy headers.
        self.forwarded = forwarded
        self._chunked = False
        self._body_taken = False
        scope[CONNECTED] = self._connected
        scope[ON_DISCONNECT] = self._on_disconnect
        self._left: Callable[[], None] | None = None

    def _on_disconnect(self, callback: Callable[[], None]) -> None:
        self._left = callback
        if self.disconnected:
            callback()

    def lost(self) -> None:
        """The client went away (uvicorn's protocol has marked the cycle disconnected)."""
        left, self._left = self._left, None
        if left is not None and not self.response_complete:
            left()

    async def _connected(self) -> bool:
        return not self.disconnected

    async def receive(self) -> dict[str, Any]:
        """ASGI ``receive``: the body once (it is complete before the handler runs), then a
        disconnect, when it happens or once the answer is out, as uvicorn's cycle does."""
        if not self._body_taken and not self.disconnected:
            self._body_taken = True
            return {"type": "http.request", "body": bytes(self.body), "more_body": False}
        while not self.disconnected and not self.response_complete:
            await self.message_event.wait()
            self.message_event.clear()
        return {"type": "http.disconnect"}

    async def run_asgi(self, _app: object) -> None:
        """Called by uvicorn's protocol for this cycle (at once, or after the requests
        pipelined before it); the app is not used."""
        try:
            await self._run()
        except Exception as exc:  # a bug in the error path itself: answer as uvicorn would
            log.error("Exception in a lean request", exc_info=exc)
            if self.response_started and not self.response_complete:
                self.protocol.transport.close()  # an answer cut short: nothing else can follow
            elif not self.response_complete and not self.disconnected:
                self._write(
                    500,
                    [(b"content-type", b"text/plain; charset=utf-8")],
                    b"Internal Server Error",
                    close=True,
                )

    async def _run(self) -> None:
        while self.more_body and not self.disconnected:
            self.protocol.flow.resume_reading()
            await self.message_event.wait()
            self.message_event.clear()
        if self.disconnected:
            return
        proxy = self.protocol.proxy_headers
        if self.forwarded and proxy is not None:
            await proxy(self.scope, self.receive, self.send)  # type: ignore[arg-type]
        if self.route is None:
            await self._pass_through()
            return
        self.scope[WHOLE_BODY] = bytes(self.body)
        request = Request(self.scope, self.receive)
        response = await self.protocol.hot.call(self.route, request, self.params)
        await self._answer(response)

    async def _pass_through(self) -> None:
        """A load-balancing endpoint's request: its proxy answers through ``send`` as it would
        through uvicorn's cycle; what it raises before its answer starts (a bad key, no worker
        ready) is answered as its app answers it (``errors.install`` in ``api/lb.py``)."""
        hot = self.protocol.hot
        assert hot.lb is not None  # only such a protocol makes cycles without a route
        try:
            await hot.lb(self.scope, self.receive, self.send)
        except Exception as exc:
            if self.response_started:
                raise  # cut short: run_asgi closes the connection
            await self._answer(await hot.on_error(Request(self.scope, self.receive), exc))
            return
        if not self.response_complete and not self.disconnected:
            log.error("A load-balancing answer ended without completing")
            self.protocol.transport.close()

    async def _answer(self, response: Response) -> None:
        if type(response).__call__ is not Response.__call__:
            # One that streams, or sends in its own way: message by message, as uvicorn would.
            await response(self.scope, self.receive, self.send)
            if not self.response_complete and not self.disconnected:
                log.error("A lean response ended without completing its answer")
                self.protocol.transport.close()
            return
        self._write(response.status_code, response.raw_headers, bytes(response.body))
        if response.background is not None:
            await response.background()

    def _head(self, status: int, headers: list[tuple[bytes, bytes]]) -> list[bytes]:
        parts = [STATUS_LINE[status]]
        for name, value in self.protocol.server_state.default_headers:
            parts += [name, b": ", value, b"\r\n"]
        closes = False
        for name, value in headers:
            parts += [name, b": ", value, b"\r\n"]
            if name == b"connection" and b"close" in value.lower():
                self.keep_alive = False
                closes = True
        if not self.keep_alive and not closes:
            parts.append(b"connection: close\r\n")
        return parts

    def _write(
        self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, close: bool = False
    ) -> None:
        if self.disconnected or self.response_complete:
            return
        if close:
            self.keep_alive = False
        parts = self._head(status, headers)
        parts += [b"\r\n", body]
        self.protocol.transport.write(b"".join(parts))
        self._complete()

    def _complete(self) -> None:
        self.response_started = self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            self.protocol.transport.close()
        self.protocol.on_response_complete()

    async def send(self, message: Message) -> None:
        """ASGI ``send``, for a response that streams: what uvicorn's cycle does with each
        message (its header checks aside: Starlette writes the headers)."""
        flow = self.protocol.flow
        if flow.write_paused and not self.disconnected:
            await flow.drain()
        if self.disconnected:
            return
        transport = self.protocol.transport
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(f"expected http.response.start, got {message['type']}")
            self.response_started = True
            status: int = message["status"]
            headers: list[tuple[bytes, bytes]] = list(message.get("headers", []))
            parts = self._head(status, headers)
            sized = any(n.lower() in (b"content-length", b"transfer-encoding") for n, _ in headers)
            if not sized and status not in (204, 304):
                self._chunked = True
                parts.append(b"transfer-encoding: chunked\r\n")
            parts.append(b"\r\n")
            transport.write(b"".join(parts))
        elif not self.response_complete:
            if message["type"] != "http.response.body":
                raise RuntimeError(f"expected http.response.body, got {message['type']}")
            body: bytes = message.get("body", b"")
            more: bool = message.get("more_body", False)
            if self._chunked:
                transport.write(
                    (b"%x\r\n" % len(body) + body + b"\r\n" if body else b"")
                    + (b"" if more else b"0\r\n\r\n")
                )
            elif body:
                transport.write(body)
            if not more:
                self._complete()
        else:
            raise RuntimeError(f"{message['type']} sent after the response was complete")


class LeanHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with hot-route requests served by a ``LeanCycle``, and
    each connection's progress reported to the server's ``ConnectionWatch`` (its time limits
    and its cap: api/connections.py)."""

    #: Set by ``lean_protocol`` on the subclass it makes for one app (and so one server).
    hot: HotRoutes
    watch: ConnectionWatch
    #: uvicorn's proxy-headers middleware, borrowed, when this connection's peer is one it
    #: trusts; None when it is not, or when uvicorn is told not to read those headers.
    proxy_headers: ProxyHeadersMiddleware | None = None
    #: Where this connection is (api/connections.py) and since when (the loop's clock).
    phase: int = FRESH
    since: float = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.since = self.loop.time()
        super().connection_made(transport)
        self.watch.opened(self, self.connections, self.since)
        # uvicorn's config puts its proxy-headers middleware outermost when ``proxy_headers``
        # is on. The peer is the same for the whole connection: whether it is trusted is
        # asked once here, and again by the middleware only for a request that has the headers.
        outer = self.app
        if isinstance(outer, ProxyHeadersMiddleware):
            peer = self.client[0] if self.client else None
            if peer in outer.trusted_hosts:
                # Its twin (the same trusted hosts, their cache included) that calls nothing.
                self.proxy_headers = copy.copy(outer)
                self.proxy_headers.app = _corrected

    def connection_lost(self, exc: Exception | None) -> None:
        self.watch.closed(self)
        super().connection_lost(exc)
        cycle = self.cycle
        if isinstance(cycle, LeanCycle):
            cycle.lost()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.phase = HEAD
        self.since = self.loop.time()

    def on_body(self, body: bytes) -> None:
        self.since = self.loop.time()
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        cycle = self.cycle
        # Answered before its body was all in (a 401 or 413 that does not close): idle now.
        self.phase = IDLE if cycle is not None and cycle.response_complete else BUSY

    def on_response_complete(self) -> None:
        if self.phase == BUSY and not self.pipeline:
            self.phase = IDLE
            self.since = self.loop.time()
        super().on_response_complete()

    def waiting_on_server(self) -> bool:
        """Whether the client is waiting for this server rather than the other way round:
        reading paused (flow control, pipelining), a ``100-continue`` not yet sent, or the
        answer to the request before this head still being worked on."""
        cycle = self.cycle
        if self.phase == HEAD and cycle is not None and not cycle.response_complete:
            return True
        return self.flow.read_paused or bool(getattr(cycle, "expect_100_continue", False))

    def may_answer(self) -> bool:
        """Whether a 408 can be written now without cutting into another answer."""
        cycle = self.cycle
        if self.phase == HEAD:  # the cycle, if any, is the previous request's
            return cycle is None or cycle.response_complete
        return (
            cycle is not None
            and not cycle.response_complete
            and not getattr(cycle, "response_started", False)
        )

    def on_headers_complete(self) -> None:
        self.phase = BODY  # until on_message_complete, at once when there is no body
        self.since = self.loop.time()
        found = self._lean_route()
        if found is None:
            super().on_headers_complete()
            return
        route, params, scope, keep_alive, forwarded = found
        existing = self.cycle
        cycle = LeanCycle(self, route, params, scope, keep_alive, forwarded)
        self.cycle = cycle  # type: ignore[assignment]
        if existing is None or existing.response_complete:
            self._start_asgi_task(cycle, self.app)  # type: ignore[arg-type]
        else:
            # Pipelined behind a request still being answered: uvicorn's queue, unchanged.
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, self.app))  # type: ignore[arg-type]

    def _lean_route(
        self,
    ) -> tuple[Route | None, dict[str, str], dict[str, Any], bool, bool] | None:
        parser = self.parser
        if self.expect_100_continue or parser.should_upgrade():
            return None
        method = parser.get_method().decode("ascii")
        url = httptools.parse_url(self.url)
        raw_path: bytes = url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        hot = self.hot
        found = hot.match(method, self.root_path + path)
        lb_host: str | None = None
        forwarded = False
        length = 0
        for name, value in self.headers:
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    return None
                if length > LEAN_BODY_LIMIT:
                    return None
            elif name == b"transfer-encoding":
                return None
            elif name == b"x-forwarded-for" or name == b"x-forwarded-proto":
                forwarded = self.proxy_headers is not None
            elif name == b"host" and hot.lb_domain is not None and lb_host is None:
                # A load-balancing endpoint's own host: its paths are its workers'.
                lb_host = endpoint_of_host(value.decode("latin-1"), hot.lb_domain)
        root_path = self.root_path + hot.root
        route: Route | None
        handler: object
        if lb_host is not None or found is None:
            params_of_lb = hot.match_lb(method, path, lb_host)
            if params_of_lb is None or length > LB_BUFFERED_BODY_BYTES:
                # A larger body is streamed to the worker as it comes: uvicorn's cycle.
                return None
            route, params, handler = None, params_of_lb, hot.lb
            root_path = self.root_path + (LB_PREFIX if lb_host is None else "")
        else:
            route, params = found
            handler = route.handler
        http_version = parser.get_http_version()
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": http_version,
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "method": method,
            "root_path": root_path,
            "path": self.root_path + path,
            "raw_path": self.root_path.encode("ascii") + raw_path,
            "query_string": url.query or b"",
            "headers": self.headers,
            "path_params": params,
            "endpoint": handler,
            "state": self.app_state.copy(),
        }
        if lb_host is not None:
            scope["skiff.lb_prefix"] = ""  # the worker sees the caller's own view (api/lb.py)
        keep_alive = http_version != "1.0" and parser.should_keep_alive()
        return route, params, scope, keep_alive, forwarded


def lean_protocol(hot: HotRoutes, rules: ConnectionRules | None = None) -> type[LeanHttpProtocol]:
    """The protocol class to hand uvicorn (``Config(http=...)``) for an app with these routes,
    its connections kept under ``rules`` (defaults: ``ConnectionRules()``). Make one per
    server: the class holds that server's connection watch."""
    watch = ConnectionWatch(rules or ConnectionRules())
    return type("LeanHttpProtocol", (LeanHttpProtocol,), {"hot": hot, "watch": watch})
