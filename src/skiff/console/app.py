"""The console's ASGI app: its routes (each page module's), errors as pages, the security
headers and the body limits. What the pages share is in ``base.py``.

Every page handler gets the ``Console`` (services, sessions, the page renderer) and asks it
for the signed-in ``Visitor``; a visitor without a session is sent to the sign-in form.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from skiff.body_gate import BodyGate
from skiff.console import (
    billing_pages,
    endpoint_pages,
    job_pages,
    key_pages,
    log_pages,
    model_pages,
    pod_pages,
    registry_pages,
    secret_pages,
    settings_pages,
    signin,
    template_pages,
    terminal_pages,
    user_pages,
    volume_pages,
)
from skiff.console.base import (
    HERE,
    Console,
    CsrfRejected,
    SignInNeeded,
    content_security_policy,
    json_answer,
    wants_json,
)
from skiff.errors import Conflict, Invalid, NotFound
from skiff.services.hub import Services

#: The largest form a signed-in visitor may post: the request panel's 10 MB job body,
#: form-encoded (which can triple it), fits.
FORM_LIMIT = 32 * 1024 * 1024
#: The largest form without a session: the sign-in form (the only one it may post) is tiny.
SIGN_IN_FORM_LIMIT = 64 * 1024

#: Sent with every console answer: no framing (clickjacking), scripts and styles only from
#: the console itself (no CDN, no inline script), no referrer outside the site. A page that
#: sends its own policy (the terminal's, ``content_security_policy``) keeps it.
SECURITY_HEADERS = [
    (b"content-security-policy", content_security_policy().encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


def _error_handlers(
    console: Console,
) -> dict[Any, Callable[[Request, Exception], Awaitable[Response]]]:
    async def sign_in_needed(request: Request, _exc: Exception) -> Response:
        if wants_json(request) or request.method != "GET":
            return json_answer({"error": "sign in first"}, 401)
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return console.redirect(request, f"/?next={quote(target, safe='')}")

    async def error_page(request: Request, status: int, title: str, message: str) -> Response:
        visitor = await console.visitor(request)
        return console.page(request, "error.html", visitor, status, title=title, message=message)

    async def told(request: Request, status: int, title: str, message: str) -> Response:
        """A refusal in the caller's terms: its words as JSON to a script, else a page."""
        if wants_json(request):
            return json_answer({"error": message}, status)
        return await error_page(request, status, title, message)

    async def csrf_rejected(request: Request, _exc: Exception) -> Response:
        message = "This form is out of date (or came from another site). Reload and try again."
        return await told(request, 403, "Refused", message)

    async def not_found(request: Request, exc: Exception) -> Response:
        message = exc.message if isinstance(exc, NotFound) else "There is no such page."
        return await told(request, 404, "Not found", message)

    async def refused(request: Request, exc: Exception) -> Response:
        """A service's refusal the page could not foresee (a job no longer retryable, a
        template still in use): said on a page of its own, with the way back."""
        assert isinstance(exc, Conflict | Invalid)
        return await told(request, exc.status_code, "Not possible", exc.message)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return await not_found(request, exc)
        return await error_page(request, exc.status_code, "Error", exc.detail)

    return {
        SignInNeeded: sign_in_needed,
        CsrfRejected: csrf_rejected,
        NotFound: not_found,
        Conflict: refused,
        Invalid: refused,
        HTTPException: http_error,
    }


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                own = {name.lower() for name, _ in headers}
                message["headers"] = headers + [h for h in SECURITY_HEADERS if h[0] not in own]
            await send(message)

        await self.app(scope, receive, with_headers if scope["type"] == "http" else send)


class ConsoleMount(Mount):
    """A mount that also answers its bare path (``/console``) itself: that URL is the one
    people type, and it shows the sign-in form rather than a redirect."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        root, path = scope.get("root_path", ""), scope.get("path", "")
        if scope["type"] == "http" and path.removeprefix(root) == self.path:
            match, child = super().matches({**scope, "path": scope["path"] + "/"})
            return match, {**child, "path": scope["path"] + "/"}
        return super().matches(scope)


def routes(console: Console) -> list[BaseRoute]:
    """Every route of the console (walked by its tests: each but sign-in asks for a session)."""
    return [
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
        *signin.routes(console),
        *endpoint_pages.routes(console),
        *job_pages.routes(console),
        *log_pages.routes(console),
        *template_pages.routes(console),
        *registry_pages.routes(console),
        *secret_pages.routes(console),
        *settings_pages.routes(console),
        *pod_pages.routes(console),
        *terminal_pages.routes(console),
        *billing_pages.routes(console),
        *volume_pages.routes(console),
        *model_pages.routes(console),
        *key_pages.routes(console),
        *user_pages.routes(console),
    ]


def build(services: Services) -> ASGIApp:
    console = Console(services)
    app = Starlette(routes=routes(console), exception_handlers=_error_handlers(console))
    app.state.console = console

    async def admit(request: Request) -> int:
        # Who posts is known from the session cookie before a byte of the form is read.
        return FORM_LIMIT if await console.visitor(request) is not None else SIGN_IN_FORM_LIMIT

    async def refuse(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        return console.page(request, "error.html", None, status, title="Error", message=str(exc))

    return SecurityHeaders(BodyGate(app, admit, refuse))


def mount(services: Services) -> ConsoleMount:
    """The console, to be routed at ``/console`` by the composition root."""
    return ConsoleMount("/console", app=build(services))
