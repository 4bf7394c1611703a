"""A terminal in a pod, in the browser: the page (xterm.js, ``static/terminal.js``) and the
WebSocket that carries its keystrokes in and its output back (``terminal_protocol.py`` says
what crosses it).

Only the pod's owner gets in, with a console session that may write pods, from a page of the
console itself (the socket checks the ``Origin``: browsers send the cookie to any site's
socket). The session is a login shell in the running pod (``services/pod_shells.py`` opens
it, writes its opening and closing into the pod's log, and ends it when idle); it ends when
the shell does, when the pod stops (its process is ended, its output ends), or when the
browser leaves (its process is ended).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets

from attrs import define
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from skiff.console import terminal_protocol as protocol
from skiff.console.base import Console, content_security_policy
from skiff.domain.permissions import Access
from skiff.domain.pod_sessions import EntryRequest, TerminalSize
from skiff.domain.pods import runtime_status
from skiff.errors import Conflict, NotFound
from skiff.services import pod_shells
from skiff.services.pod_shells import PodShells, Session

log = logging.getLogger(__name__)

#: What the pod's programs are told of the terminal: xterm.js is an xterm with 256 colours
#: and 24-bit colour.
TERMINAL_ENV = {"TERM": "xterm-256color", "COLORTERM": "truecolor"}
#: How long a browser that gave no size in the URL has to send one.
SIZE_WAIT_SECONDS = 10.0
#: After its process exits, how long the last of a session's output may take to arrive (a
#: process it left behind can hold the terminal open: the session ends all the same).
DRAIN_SECONDS = 1.0
#: After its output ends, how long its process may take to exit before it is ended.
EXIT_WAIT_SECONDS = 5.0


class ClientLeft(Exception):
    """The browser closed the socket (or it broke)."""


def routes(console: Console) -> list[BaseRoute]:
    services = console.services
    shells = services.pod_shells

    async def page(request: Request) -> Response:
        visitor = await console.signed_in(request)
        pod = await services.pods.get(visitor.user, request.path_params["pod_id"])
        status = runtime_status(pod)
        # xterm.js writes <style> elements as it draws: they carry this page's nonce.
        nonce = secrets.token_urlsafe(16)
        base = request.scope.get("root_path", "")
        response = console.page(
            request,
            "terminal.html",
            visitor,
            title=f"Terminal · {pod.spec.name}",
            pod=pod,
            pod_status=status,
            style_nonce=nonce,
            socket_path=f"{base}/pods/{pod.id}/terminal/socket",
        )
        response.headers["content-security-policy"] = content_security_policy(nonce)
        return response

    async def socket(websocket: WebSocket) -> None:
        public = [services.settings.base_url()]
        if not protocol.origin_allowed(
            websocket.headers.get("origin"),
            websocket.url.scheme,
            websocket.headers.get("host"),
            public,
        ):
            # Refused before the handshake completes: the browser sees a failed connection
            # (HTTP 403), and the other site's page learns nothing.
            await websocket.close(code=1008)
            return
        await websocket.accept()
        try:
            session = await admitted(websocket)
        except Refused as refused:
            await refuse(websocket, refused.code, refused.why)
            return
        except ClientLeft:
            return
        except Exception:
            # Said to the browser as a server error, not dropped as a broken connection.
            log.exception("the terminal of pod %s did not open", websocket.path_params["pod_id"])
            await refuse(
                websocket, 1011, "the terminal did not open: a server error (its log says why)"
            )
            return
        await Terminal(console, shells, websocket, session).run()

    async def admitted(websocket: WebSocket) -> Session:
        """The session the socket opens in its pod, once its visitor may (``Refused`` if not,
        ``ClientLeft`` when the browser left before saying its terminal's size)."""
        visitor = await console.visitor(websocket)
        if visitor is None:
            raise Refused(protocol.SIGN_IN, "sign in to the console first")
        why = visitor.caller.permissions.missing(Access.READ_WRITE, None)
        if why is not None:
            raise Refused(protocol.FORBIDDEN, why)
        pod_id = websocket.path_params["pod_id"]
        # Not found before anything else is read: another user's pod is as good as none.
        try:
            pod = await services.pods.get(visitor.user, pod_id)
        except NotFound as missing:
            raise Refused(protocol.NOT_FOUND, missing.message) from None
        try:
            size = protocol.size_in_query(
                websocket.query_params.get("cols"), websocket.query_params.get("rows")
            )
            if size is None:
                size = await first_size(websocket)
        except protocol.BadInput as bad:
            raise Refused(protocol.BAD_INPUT, str(bad)) from None
        client = websocket.client
        caller = pod_shells.Caller(
            visitor.user,
            via="console",
            origin=client.host if client is not None else "an unknown address",
            credential="console sign-in",
        )
        request = EntryRequest(command=None, terminal=size, env=TERMINAL_ENV)

        async def still_signed_in() -> bool:
            # The same cookie read again: an expired sign-in, a revoked key, a disabled user
            # or a key that lost write access end the session (``PodShells.sweep``).
            now = await console.visitor(websocket)
            return (
                now is not None
                and now.user.id == visitor.user.id
                and now.caller.permissions.missing(Access.READ_WRITE, None) is None
            )

        try:
            return await shells.open(caller, pod.id, request, still_signed_in)
        except NotFound as missing:
            raise Refused(protocol.NOT_FOUND, missing.message) from None
        except Conflict as conflict:
            raise Refused(protocol.NOT_RUNNING, conflict.message) from None

    return [
        Route("/pods/{pod_id}/terminal", page, methods=["GET"]),
        WebSocketRoute("/pods/{pod_id}/terminal/socket", socket),
    ]


def _failed(task: asyncio.Task[None], kind: type[BaseException]) -> bool:
    """Whether ``task`` ended raising a ``kind``."""
    return task.done() and not task.cancelled() and isinstance(task.exception(), kind)


class Refused(Exception):
    """The socket is not let in: its close code and why, in words."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code
        self.why = why


async def refuse(websocket: WebSocket, code: int, why: str) -> None:
    """Say why in a text frame (a close reason is short), then close with ``code``."""
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
        await websocket.send_text(protocol.error_frame(why))
        await websocket.close(code, protocol.close_reason(why))


async def first_size(websocket: WebSocket) -> TerminalSize:
    """The size the first frame gives, when the URL gave none."""
    try:
        async with asyncio.timeout(SIZE_WAIT_SECONDS):
            message = await websocket.receive()
    except TimeoutError:
        raise protocol.BadInput(
            f'no terminal size: give ?cols=&rows= or send {{"resize": [cols, rows]}} first '
            f"(within {SIZE_WAIT_SECONDS:.0f} s)"
        ) from None
    if message["type"] == "websocket.disconnect":
        raise ClientLeft
    text = message.get("text")
    if text is None:
        raise protocol.BadInput('the first frame says the size: {"resize": [cols, rows]}')
    return protocol.resize_of(text)


@define(eq=False, repr=False, slots=False)
class Terminal:
    """One open session and its socket: bytes pumped both ways until either side ends."""

    console: Console
    shells: PodShells
    websocket: WebSocket
    session: Session

    def __attrs_post_init__(self) -> None:
        self.entry = self.session.entry

    async def run(self) -> None:
        output = asyncio.create_task(self.pump_output(), name="terminal output")
        typed = asyncio.create_task(self.pump_input(), name="terminal input")
        exited = asyncio.create_task(self.entry.wait(), name="terminal process")
        code: int | None = None
        try:
            await asyncio.wait({output, typed, exited}, return_when=asyncio.FIRST_COMPLETED)
            if typed.done():
                await self.input_ended(typed)
                return
            if _failed(output, ClientLeft):
                return  # the browser left while its output went out
            # The process exited, or its output ended (its terminal closed, the pod stopped):
            # nothing typed goes in any more; the last of its output still goes out.
            typed.cancel()
            if not exited.done():
                await asyncio.wait({exited}, timeout=EXIT_WAIT_SECONDS)
            if not output.done():
                await asyncio.wait({output}, timeout=DRAIN_SECONDS)
            if _failed(output, ClientLeft):
                return
            if _failed(output, Exception):
                log.warning(
                    "pod %s: the terminal's output failed",
                    self.session.pod_id,
                    exc_info=output.exception(),
                )
            output.cancel()
            if exited.done():
                code = exited.result()
            how = await self.ended_how(code)
            with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
                await self.websocket.send_text(protocol.ended_frame(how, code))
                await self.websocket.close(protocol.ENDED, protocol.close_reason(how))
        finally:
            for task in (output, typed, exited):
                task.cancel()
            await asyncio.gather(output, typed, exited, return_exceptions=True)
            # Once, whichever way it ended: its process ends, its closing goes in the log.
            await self.shells.close(self.session, code)

    async def pump_output(self) -> None:
        """The terminal's output to the browser, until it ends."""
        while chunk := await self.entry.read_output():
            self.shells.touch(self.session)
            try:
                await self.websocket.send_bytes(chunk)
            except (WebSocketDisconnect, RuntimeError, OSError) as gone:
                raise ClientLeft from gone

    async def pump_input(self) -> None:
        """What the browser sends, to the terminal, until it leaves (returns) or sends what the
        protocol does not have (``BadInput``)."""
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            if data is not None:
                self.shells.touch(self.session)
                await self.entry.write(data)
                continue
            self.shells.resize(self.session, protocol.resize_of(message.get("text") or ""))

    async def input_ended(self, typed: asyncio.Task[None]) -> None:
        """The browser left, or broke the protocol: said, then the session ends."""
        problem = typed.exception()
        if problem is None:
            return  # it left: the session closes as "the client left"
        if isinstance(problem, protocol.BadInput):
            self.session.ended_because = f"the browser sent what the terminal refuses: {problem}"
            await refuse(self.websocket, protocol.BAD_INPUT, str(problem))
            return
        log.warning("pod %s: the terminal's input failed", self.session.pod_id, exc_info=problem)
        self.session.ended_because = f"its input failed: {problem}"
        await refuse(self.websocket, 1011, "the terminal's input failed on the server")

    async def ended_how(self, code: int | None) -> str:
        """How the session ended, for the browser (``PodShells.ending``)."""
        return await self.shells.ending(self.session, code)
