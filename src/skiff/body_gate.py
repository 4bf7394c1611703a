"""Who may send a body, and how big: decided from the headers, before a byte of it is read.

FastAPI reads and parses a request's whole body before any dependency (the key check
included) runs, so a ``/v1`` call without a key could make the server hold hundreds of MB
before its 401 (issue 13). ``BodyGate`` is an ASGI middleware that, for a request that
carries a body, asks ``admit`` first: it checks the caller from the headers and answers the
body limit for them, or raises (a 401). A ``Content-Length`` over the limit is a 413 at once;
a body of unknown length (chunked) is counted as it is read and cut off with a 413 the moment
it passes the limit. Every such refusal says ``connection: close``, so what the client is
still sending is never read. ``/v2`` needs no gate: its handlers enter ``access.admitted``
(the key) before ``api/body.py``'s ``read_body`` (the limit), which does the same by hand.
An edge module: ``api/`` (``/v1``) and ``console/`` (its forms) both use it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from attrs import define
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from skiff.errors import PayloadTooLarge


def too_large(limit: int) -> PayloadTooLarge:
    size = f"{limit // (1024 * 1024)} MB" if limit >= 1024 * 1024 else f"{limit // 1024} KB"
    return PayloadTooLarge(f"the request body is larger than {size}")


#: ``admit(request)``: the largest body this caller may send, or an exception to answer.
Admit = Callable[[Request], Awaitable[int]]
#: ``refuse(request, exc)``: the answer to an exception (``errors.responder`` or a page).
Refuse = Callable[[Request, Exception], Awaitable[Response]]


def _declared(scope: Scope) -> int | None:
    """The ``Content-Length`` (-1 for a body of unknown length, None for no body)."""
    length: int | None = None
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return -1  # the HTTP parser refuses this first; count what comes if not
        elif name == b"transfer-encoding":
            return -1
    return length if length else None


@define(eq=False, repr=False, slots=False)
class BodyGate:
    """Refuse a body before reading it when its sender may not send it, or not this much."""

    app: ASGIApp
    admit: Admit
    refuse: Refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = _declared(scope) if scope["type"] == "http" else None
        if declared is None:  # no body: nothing to hold, the route checks the caller
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        try:
            limit = await self.admit(request)
            if declared > limit:
                raise too_large(limit)
        except Exception as exc:
            await self._answer(request, exc, scope, receive, send)
            return
        received = 0
        cut = False  # the body passed the limit: 413 sent (if it could be), app silenced

        async def counted() -> Message:
            nonlocal received, cut
            if cut:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    cut = True
                    if not started:
                        await self._answer(request, too_large(limit), scope, receive, send)
                    return {"type": "http.disconnect"}
            return message

        started = False

        async def guarded(message: Message) -> None:
            nonlocal started
            if cut:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not cut:
                raise
            # The app stumbled on the body it was denied: its answer, the 413, is out.

    async def _answer(
        self, request: Request, exc: Exception, scope: Scope, receive: Receive, send: Send
    ) -> None:
        response = await self.refuse(request, exc)
        # The rest of the body is not wanted: closing the connection stops reading it.
        response.headers["connection"] = "close"
        await response(scope, receive, send)
