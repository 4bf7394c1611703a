"""The job and worker routes served straight from uvicorn's HTTP protocol, without ASGI plumbing.

``HotRoutes`` (api/hot.py) already spares these routes the framework's routing and middleware.
What is left around each of them inside uvicorn is its ASGI cycle: the scope, the proxy-headers
middleware, two ``send`` messages each checked header by header and each written to the socket
on its own, and Starlette's ``Response.__call__``. ``LeanHttpProtocol`` is uvicorn's own
``HttpToolsProtocol`` (same parser, same keep-alive, pipelining, flow control and shutdown) that,
once a request's headers are in, checks whether it names a hot route. If so, and it is a plain
request (a body of at most ``LEAN_BODY_LIMIT`` bytes with a ``Content-Length``, no
``Transfer-Encoding``, ``Expect`` or upgrade), a ``LeanCycle`` takes the place uvicorn's
``RequestResponseCycle`` would: it collects the body, calls the route's handler through
``HotRoutes.call`` with a Starlette ``Request`` on a minimal scope, and writes the whole answer
(status line, uvicorn's default headers, the response's headers, the body) in one write. Any
other request goes through uvicorn's cycle and the full app, as before, so every route keeps a
single handler and the same answers.

A ``LeanCycle`` offers the attributes uvicorn's protocol reads of its current cycle (``body``,
``more_body``, ``message_event``, ``response_complete``, ``disconnected``, ``keep_alive`` and
``run_asgi``), which is how it fits into uvicorn's pipelining queue and connection handling
unchanged. uvicorn is pinned (requirements.lock); ``tests/integration/api/test_lean_http.py`` runs a
real uvicorn with this protocol.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from typing import Any

import httptools
from starlette.requests import Request
from starlette.responses import Response
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

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

log = logging.getLogger(__name__)

#: Bodies up to this size are read whole before the handler runs; bigger ones (and bodies of
#: unknown length) take uvicorn's cycle, where a route's own limit answers 413 before reading.
LEAN_BODY_LIMIT = 1024 * 1024

#: The scope key under which a lean request offers a cheap "is the client still there?" check
#: (Starlette's ``is_disconnected`` opens an anyio cancel scope for every call).
CONNECTED = "skiff.connected"

_ASGI = {"version": "3.0", "spec_version": "2.3"}


class LeanCycle:
    """One hot-route request on a connection, in the place of uvicorn's cycle."""

    def __init__(
        self,
        protocol: LeanHttpProtocol,
        route: Route,
        params: dict[str, str],
        scope: dict[str, Any],
        keep_alive: bool,
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
        self._body_taken = False
        scope[CONNECTED] = self._connected

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
            if not self.response_complete and not self.disconnected:
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
        request = Request(self.scope, self.receive)
        response = await self.protocol.hot.call(self.route, request, self.params)
        await self._answer(response)

    async def _answer(self, response: Response) -> None:
        if type(response).__call__ is not Response.__call__:
            # A response that streams or sends in its own way could not be one write; no hot
            # route answers so (run_asgi turns this into a 500, as for any bug).
            raise TypeError(f"a hot route answered with a {type(response).__name__}")
        self._write(response.status_code, response.raw_headers, bytes(response.body))
        if response.background is not None:
            await response.background()

    def _write(
        self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, close: bool = False
    ) -> None:
        if self.disconnected or self.response_complete:
            return
        if close:
            self.keep_alive = False
        parts = [STATUS_LINE[status]]
        for name, value in self.protocol.server_state.default_headers:
            parts += [name, b": ", value, b"\r\n"]
        for name, value in headers:
            parts += [name, b": ", value, b"\r\n"]
        if not self.keep_alive:
            parts.append(b"connection: close\r\n")
        parts += [b"\r\n", body]
        transport = self.protocol.transport
        transport.write(b"".join(parts))
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            transport.close()
        self.protocol.on_response_complete()


class LeanHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with hot-route requests served by a ``LeanCycle``, and
    each connection's progress reported to the server's ``ConnectionWatch`` (its time limits
    and its cap: api/connections.py)."""

    #: Set by ``lean_protocol`` on the subclass it makes for one app (and so one server).
    hot: HotRoutes
    watch: ConnectionWatch
    #: Where this connection is (api/connections.py) and since when (the loop's clock).
    phase: int = FRESH
    since: float = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.since = self.loop.time()
        super().connection_made(transport)
        self.watch.opened(self, self.connections, self.since)

    def connection_lost(self, exc: Exception | None) -> None:
        self.watch.closed(self)
        super().connection_lost(exc)

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
        route, params, scope, keep_alive = found
        existing = self.cycle
        cycle = LeanCycle(self, route, params, scope, keep_alive)
        self.cycle = cycle  # type: ignore[assignment]
        if existing is None or existing.response_complete:
            self._start_asgi_task(cycle, self.app)  # type: ignore[arg-type]
        else:
            # Pipelined behind a request still being answered: uvicorn's queue, unchanged.
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, self.app))  # type: ignore[arg-type]

    def _lean_route(
        self,
    ) -> tuple[Route, dict[str, str], dict[str, Any], bool] | None:
        parser = self.parser
        if self.expect_100_continue or parser.should_upgrade():
            return None
        method = parser.get_method().decode("ascii")
        url = httptools.parse_url(self.url)
        raw_path: bytes = url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        found = self.hot.match(method, self.root_path + path)
        if found is None:
            return None
        for name, value in self.headers:
            if name == b"content-length":
                try:
                    if int(value) > LEAN_BODY_LIMIT:
                        return None
                except ValueError:
                    return None
            elif name == b"transfer-encoding":
                return None
        route, params = found
        http_version = parser.get_http_version()
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": http_version,
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "method": method,
            "root_path": self.root_path + self.hot.root,
            "path": self.root_path + path,
            "raw_path": self.root_path.encode("ascii") + raw_path,
            "query_string": url.query or b"",
            "headers": self.headers,
            "path_params": params,
            "endpoint": route.handler,
            "state": self.app_state.copy(),
        }
        keep_alive = http_version != "1.0" and parser.should_keep_alive()
        return route, params, scope, keep_alive


def lean_protocol(hot: HotRoutes, rules: ConnectionRules | None = None) -> type[LeanHttpProtocol]:
    """The protocol class to hand uvicorn (``Config(http=...)``) for an app with these routes,
    its connections kept under ``rules`` (defaults: ``ConnectionRules()``). Make one per
    server: the class holds that server's connection watch."""
    watch = ConnectionWatch(rules or ConnectionRules())
    return type("LeanHttpProtocol", (LeanHttpProtocol,), {"hot": hot, "watch": watch})
