"""Load-balancing endpoints' URLs: ``/lb/{endpoint_id}/any/path``, any method, passed to one
ready worker and its answer streamed back as it comes (``services/lb_proxy.py``).

The caller's key is checked as the job interface checks it (``Authorization``, the endpoint
must be the key's user's); it is not passed on to the worker. With ``SKIFF_LB_DOMAIN`` set,
``{endpoint_id}.{domain}/any/path`` reaches the same place (``host_routed``), as the hosted
platform's ``https://ENDPOINT_ID.api.runpod.ai/path``.

Each endpoint has at most ``SKIFF_LB_MAX_IN_FLIGHT`` requests in flight (``InFlight``); one more
is answered 503 with ``Retry-After``. A caller that leaves ends its request at once, whether it
was waiting for a worker, for the worker's answer head, or in the middle of the answer's body:
the connection to the worker is closed (its socket freed) and the lease given back, rather than
held for the endpoint's ``executionTimeoutMs``. ``_Caller`` watches for that; ASGI says it
with ``http.disconnect`` from ``receive``. The fast protocol (``api/lean_http.py``) calls
``_Proxy`` straight for a plain request (a body of known length up to its limit), sparing it
uvicorn's cycle, the framework's routing and its middleware, as it does for the hot ``/v2``
routes; any other request (a chunked or larger body, ``Expect``, ``SKIFF_FAST_HTTP=0``) reaches
the same ``_Proxy`` through the app below. Either way the request sees the same ASGI messages.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from skiff.api import credentials, errors
from skiff.api.needs import needs
from skiff.domain.balancing import endpoint_of_host
from skiff.domain.endpoints import Endpoint, EndpointType
from skiff.domain.permissions import write_endpoint
from skiff.errors import Invalid, SkiffError
from skiff.services.hub import Services
from skiff.services.lb_proxy import Forwarding, InFlight, has_body, wire_path

PREFIX = "/lb"
#: Every request to a load-balancing endpoint calls it (its workers do what it asks).
LB_NEED = write_endpoint()
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
#: The scope key under which the fast protocol (api/lean_http.py) takes a callback to call
#: when the caller leaves before the answer is complete: what the proxy would otherwise learn
#: by keeping a task on ``receive`` for ``http.disconnect``, one per request.
ON_DISCONNECT = "skiff.on_disconnect"
#: A request body up to this size is read whole before it goes to a worker; a larger one (or
#: one of unknown length) is streamed through as it arrives.
BUFFERED_BODY_BYTES = 64 * 1024


@dataclass(frozen=True)
class Lb:
    #: Mounted at ``PREFIX``: what uvicorn's own cycle reaches.
    app: Starlette
    #: Its one route, which the fast protocol calls straight (``HotRoutes.lb``).
    proxy: ASGIApp


def build(services: Services) -> Lb:
    proxy = needs(LB_NEED)(_Proxy(services, InFlight(services.settings.lb_max_in_flight)))
    app = Starlette(
        routes=[
            Route("/{endpoint_id}", proxy, methods=METHODS),
            Route("/{endpoint_id}/{path:path}", proxy, methods=METHODS),
        ]
    )
    # Errors raised before the answer starts (a bad key, a 502, a 503) are answered by these,
    # as for any route.
    errors.install(app, "error")
    return Lb(app, proxy)


class _Proxy:
    """The route itself, a plain ASGI app rather than a request handler and a response: one
    function sees the request from its key check to its answer's last byte, which is what
    lets the in-flight count and the watch for the caller leaving cover all of it."""

    def __init__(self, services: Services, in_flight: InFlight) -> None:
        self._services = services
        #: Read by tests (the slots given back); one per app, so one per server.
        self.in_flight = in_flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        began = time.monotonic()
        services = self._services
        endpoint_id: str = scope["path_params"]["endpoint_id"]
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        authorization = host = None
        for name, value in headers:  # names come lower-cased (ASGI); the first of each counts
            if name == "authorization" and authorization is None:
                authorization = value
            elif name == "host" and host is None:
                host = value
        caller = await services.auth.caller(credentials.api_key(authorization))
        # Whatever its method, a request calls the endpoint's workers: a write.
        caller.check(LB_NEED.access, endpoint_id)
        endpoint = await services.endpoints.for_jobs(caller.user, endpoint_id)
        if endpoint.spec.type is not EndpointType.LB:
            raise Invalid(
                f"endpoint {endpoint_id} is queue-based: send jobs to "
                f"/v2/{endpoint_id}/run or /runsync"
            )
        try:
            self.in_flight.enter(endpoint.id)
        except SkiffError as exc:
            services.metrics.lb_request(endpoint.id, exc.status_code, time.monotonic() - began)
            raise
        try:
            await self._pass_on(endpoint, scope, receive, send, headers, host, began)
        finally:
            self.in_flight.leave(endpoint.id)

    async def _pass_on(
        self,
        endpoint: Endpoint,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: list[tuple[str, str]],
        host: str | None,
        began: float,
    ) -> None:
        """The request to a worker and its answer back, ended at once if the caller leaves."""
        task = asyncio.current_task()
        assert task is not None  # an ASGI app always runs in a task
        caller = _Caller(receive, task, scope.get(ON_DISCONNECT))
        body: AsyncIterator[bytes] | bytes | None
        if has_body(headers):
            # Its reader starts the watch once the body is all in: ``receive`` has one reader.
            if _small(headers):
                # Read whole first, as a buffering proxy does: the worker gets head and body in
                # one write (for most requests the body came in the head's packet anyway), and
                # is not troubled by a caller that leaves halfway through it.
                body = await caller.whole_body()
                if body is None:
                    return  # gone before its body was all in: nobody to answer
            else:
                body = caller.body()
        else:
            body = None
            caller.watch()
        client = scope.get("client")
        forwarding = Forwarding(
            method=scope["method"],
            path=wire_path(
                scope.get("raw_path"), scope["path"], "/" + scope["path_params"].get("path", "")
            ),
            query=scope.get("query_string", b""),
            headers=headers,
            body=body,
            client=client[0] if client else None,
            scheme=scope.get("scheme", "http"),
            host=host,
            # The endpoint as the caller named it.
            prefix=scope.get("skiff.lb_prefix", f"{PREFIX}/{scope['path_params']['endpoint_id']}"),
            lb_key=self._services.auth.known_lb_key(endpoint.id)
            or await self._services.auth.lb_key(endpoint.id),
        )
        metrics = self._services.metrics
        try:
            try:
                upstream = await self._services.lb_proxy.forward(endpoint, forwarding)
            except SkiffError as exc:
                metrics.lb_request(endpoint.id, exc.status_code, time.monotonic() - began)
                raise
            try:
                metrics.lb_request(endpoint.id, upstream.status, time.monotonic() - began)
                await send(
                    {
                        "type": "http.response.start",
                        "status": upstream.status,
                        "headers": upstream.raw_headers,
                    }
                )
                async for chunk in upstream.chunks():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                # Read to its end, the connection goes back to the pool; cut short (the caller
                # left, the worker broke off), it is closed.
                await upstream.aclose()
        except asyncio.CancelledError:
            # The caller left (``_Caller`` cancelled this task): the work above is undone
            # (the connection to the worker is closed, the lease and the in-flight count
            # are given back on the way out), and there is nobody to answer. Any other
            # cancellation (the server stopping) goes on.
            if caller.gone and task.uncancel() == 0:
                return
            raise
        except ClientDisconnect:
            if caller.gone:
                return  # left halfway through a body streamed to the worker: nobody to answer
            raise
        except Exception:
            # Whatever turned this task's cancel into another error (none in this path does
            # today) left it counted: taken back, so later waits in the task are not affected.
            if caller.gone:
                task.uncancel()
            raise
        finally:
            caller.done()


def _small(headers: list[tuple[str, str]]) -> bool:
    """Whether the request says its body is at most ``BUFFERED_BODY_BYTES`` long."""
    for name, value in headers:
        if name == "content-length":
            return value.strip().isdigit() and int(value) <= BUFFERED_BODY_BYTES
    return False  # chunked: of unknown length, streamed through as it comes


class _Caller:
    """Whether the caller of one request is still there. ``receive`` says ``http.disconnect``
    when it leaves; the request's body comes through it as well, so this is its one reader: the
    body (``body``), then a watch (``watch``), a task reading on until the disconnect. A caller
    that leaves while the request is being handled cancels the handling task (``gone`` then
    says why it was cancelled), wherever it waits: for a worker, the answer's head, a piece of
    its body, or the caller's own connection to take more.

    The cancel is only ever asked for while the handler waits inside the part that expects it
    (``done`` ends that part, before anything else is awaited): both this watch and the body
    run only while the handler is suspended, so the cancel lands where it is caught."""

    __slots__ = ("_listener", "_on_disconnect", "_receive", "_task", "gone", "watching")

    def __init__(
        self,
        receive: Receive,
        task: asyncio.Task[Any],
        on_disconnect: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self._receive = receive
        self._task = task
        #: The fast protocol's way to be told the caller left (``lean_http.ON_DISCONNECT``):
        #: the watch is then a callback, not a task per request.
        self._on_disconnect = on_disconnect
        self._listener: asyncio.Task[None] | None = None
        #: Whether the handler is still inside the part that expects the cancel.
        self.watching = True
        #: Whether the caller left while it was: the handler's cancel is this one's.
        self.gone = False

    async def body(self) -> AsyncIterator[bytes]:
        """The request's body, for the worker, as it arrives; then the watch."""
        receive = self._receive
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # Gone halfway through its body. Raised, not just ended: an ended body would
                # reach the worker as a whole, shorter, request.
                self._left()
                raise ClientDisconnect()
            chunk: bytes = message.get("body", b"")
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                break
        self.watch()

    async def whole_body(self) -> bytes | None:
        """The request's body read whole, then the watch; None if the caller left before its
        end (the handler, which is the reader here, is told so rather than cancelled)."""
        chunks: list[bytes] = []
        receive = self._receive
        while True:
            message = await receive()
            if message["type"] != "http.request":
                self.watching = False
                return None
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        self.watch()
        return b"".join(chunks)

    def watch(self) -> None:
        """Watch for the caller leaving from now on (its body, if any, all read)."""
        if not self.watching or self._listener is not None:
            return
        if self._on_disconnect is not None:
            self._on_disconnect(self._left)
            self._on_disconnect = None
        else:
            self._listener = asyncio.get_running_loop().create_task(self._until_gone())

    async def _until_gone(self) -> None:
        receive = self._receive
        while (await receive())["type"] != "http.disconnect":
            pass  # what is left of an empty body
        # uvicorn also says ``http.disconnect`` once the answer is complete: by then the
        # handler has called ``done``, and this does nothing.
        self._left()

    def _left(self) -> None:
        if self.watching and not self.gone:
            self.gone = True
            if asyncio.current_task() is not self._task:
                # The handler itself reads the body as it sends it to the worker: what it
                # reads says the caller left (``ClientDisconnect``), no cancel needed.
                self._task.cancel()

    def done(self) -> None:
        """The handler is past the part that expects the cancel: no cancel from now on, and the
        watch ends (it would end by itself once the answer is complete, a moment later)."""
        self.watching = False
        listener = self._listener
        if listener is not None and not listener.done():
            listener.cancel()


def host_routed(scope: Scope, domain: str) -> Scope | None:
    """With ``SKIFF_LB_DOMAIN``: a request whose ``Host`` is ``{endpoint_id}.{domain}``, as
    the request for ``/lb/{endpoint_id}`` + its path; None for any other request."""
    endpoint_id = None
    for name, value in scope.get("headers", ()):
        if name == b"host":
            endpoint_id = endpoint_of_host(value.decode("latin-1"), domain)
            break
    if endpoint_id is None:
        return None
    prefix = f"{PREFIX}/{endpoint_id}"
    return {
        **scope,
        "path": prefix + scope["path"],
        "raw_path": prefix.encode() + scope.get("raw_path", scope["path"].encode()),
        # The worker sees the caller's own view: no prefix in the URL it was called by.
        "skiff.lb_prefix": "",
    }
