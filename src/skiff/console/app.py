"""The console's ASGI app: its routes, who is signed in, rendering, and errors as pages.

Every page handler gets the ``Console`` (services, sessions, the page renderer) and asks it
for the signed-in ``Visitor``; a visitor without a session is sent to the sign-in form.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Match, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from skiff.body_gate import BodyGate
from skiff.console import csrf, render
from skiff.console.session import COOKIE, SECRET_NAME, Session, Sessions
from skiff.domain.endpoints import Endpoint
from skiff.domain.keys import hash_key
from skiff.domain.users import User
from skiff.errors import Conflict, Invalid, NotFound
from skiff.services.hub import Services

HERE = Path(__file__).parent

#: The largest form a signed-in visitor may post: the request panel's 10 MB job body,
#: form-encoded (which can triple it), fits.
FORM_LIMIT = 32 * 1024 * 1024
#: The largest form without a session: the sign-in form (the only one it may post) is tiny.
SIGN_IN_FORM_LIMIT = 64 * 1024

#: Sent with every console answer: no framing (clickjacking), scripts and styles only from
#: the console itself (no CDN, no inline script), no referrer outside the site.
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


class SignInNeeded(Exception):
    """No valid session: pages redirect to the sign-in form, script calls answer 401."""


class CsrfRejected(Exception):
    """A form or script call without the visitor's CSRF token."""


@dataclass(frozen=True, slots=True)
class Visitor:
    user: User
    session: Session
    csrf: str


class Console:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.sessions = Sessions(lambda: services.auth.server_secret(SECRET_NAME))
        self.pages = render.environment(HERE / "templates")

    # -- who is asking -------------------------------------------------------------------
    async def visitor(self, request: Request) -> Visitor | None:
        session = await self.sessions.read(request.cookies.get(COOKIE), self.services.clock.now())
        if session is None:
            return None
        user = await self.user_of(session.key_digest)
        if user is None:
            return None
        return Visitor(user, session, csrf.token(await self.sessions.secret(), session.nonce))

    async def user_of(self, key_digest: str) -> User | None:
        """The user of a key by its digest, if the key is still valid (a revoked key ends the
        sessions made with it)."""
        return await self.services.auth.user_of_digest(key_digest)

    async def user_of_key(self, api_key: str) -> User | None:
        return await self.user_of(hash_key(api_key.strip()))

    async def signed_in(self, request: Request) -> Visitor:
        visitor = await self.visitor(request)
        if visitor is None:
            raise SignInNeeded
        return visitor

    async def endpoint(self, visitor: Visitor, request: Request) -> Endpoint:
        """The endpoint the path names, if it is the visitor's (else 404)."""
        return await self.services.endpoints.get(visitor.user, request.path_params["endpoint_id"])

    async def form(self, request: Request, visitor: Visitor) -> dict[str, str]:
        """The posted form's text fields, once its CSRF token is checked."""
        form = await request.form()
        fields = {k: v for k, v in form.multi_items() if isinstance(v, str)}
        submitted = fields.get(csrf.FIELD) or request.headers.get(csrf.HEADER)
        if not csrf.valid(await self.sessions.secret(), visitor.session.nonce, submitted):
            raise CsrfRejected
        return fields

    # -- answers -------------------------------------------------------------------------
    def page(
        self,
        request: Request,
        name: str,
        visitor: Visitor | None,
        status: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        """The page ``name`` (a file of ``templates/``) for this visitor."""
        base = request.scope.get("root_path", "")
        html = self.pages.get_template(name).render(
            base=base,
            section=_section(request.url.path.removeprefix(base)),
            request=request,
            visitor=visitor,
            now=self.services.clock.now(),
            **context,
        )
        return HTMLResponse(html, status, headers={"Cache-Control": "no-store"})

    @staticmethod
    def redirect(request: Request, path: str) -> RedirectResponse:
        """303 to a console path (``""`` is the endpoint list)."""
        return RedirectResponse(request.scope.get("root_path", "") + path, status_code=303)


def _section(path: str) -> str:
    """The part of the console a path is in, for the navigation's current link."""
    for prefix, section in (
        ("/templates", "templates"),
        ("/registry-auths", "registry"),
        ("/volumes", "volumes"),
        ("/pods", "pods"),
        ("/billing", "billing"),
        ("/models", "models"),
    ):
        if path.startswith(prefix):
            return section
    return "endpoints"


def json_answer(body: Any, status: int = 200) -> Response:
    return Response(
        orjson.dumps(body),
        status,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _wants_json(request: Request) -> bool:
    return request.url.path.endswith(".json") or "application/json" in request.headers.get(
        "accept", ""
    )


def _error_handlers(
    console: Console,
) -> dict[Any, Callable[[Request, Exception], Awaitable[Response]]]:
    async def sign_in_needed(request: Request, _exc: Exception) -> Response:
        if _wants_json(request) or request.method != "GET":
            return json_answer({"error": "sign in first"}, 401)
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return console.redirect(request, f"/?next={quote(target, safe='')}")

    async def csrf_rejected(request: Request, _exc: Exception) -> Response:
        message = "This form is out of date (or came from another site). Reload and try again."
        if _wants_json(request):
            return json_answer({"error": message}, 403)
        visitor = await console.visitor(request)
        return console.page(request, "error.html", visitor, 403, title="Refused", message=message)

    async def not_found(request: Request, exc: Exception) -> Response:
        message = exc.message if isinstance(exc, NotFound) else "There is no such page."
        if _wants_json(request):
            return json_answer({"error": message}, 404)
        visitor = await console.visitor(request)
        return console.page(request, "error.html", visitor, 404, title="Not found", message=message)

    async def refused(request: Request, exc: Exception) -> Response:
        """A service's refusal the page could not foresee (a job no longer retryable, a
        template still in use): said on a page of its own, with the way back."""
        assert isinstance(exc, Conflict | Invalid)
        if _wants_json(request):
            return json_answer({"error": exc.message}, exc.status_code)
        visitor = await console.visitor(request)
        return console.page(
            request,
            "error.html",
            visitor,
            exc.status_code,
            title="Not possible",
            message=exc.message,
        )

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return await not_found(request, exc)
        visitor = await console.visitor(request)
        return console.page(
            request, "error.html", visitor, exc.status_code, title="Error", message=exc.detail
        )

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
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
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


def build(services: Services) -> ASGIApp:
    # Imported here: each page module imports ``Console`` from this one.
    from skiff.console import (
        billing_pages,
        endpoint_pages,
        job_pages,
        log_pages,
        model_pages,
        pod_pages,
        registry_pages,
        signin,
        template_pages,
        volume_pages,
    )

    console = Console(services)
    routes: list[BaseRoute] = [
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
        *signin.routes(console),
        *endpoint_pages.routes(console),
        *job_pages.routes(console),
        *log_pages.routes(console),
        *template_pages.routes(console),
        *registry_pages.routes(console),
        *pod_pages.routes(console),
        *billing_pages.routes(console),
        *volume_pages.routes(console),
        *model_pages.routes(console),
    ]
    app = Starlette(routes=routes, exception_handlers=_error_handlers(console))
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
