"""What every console page shares: the ``Console`` (services, sessions, the page renderer), the
signed-in ``Visitor``, and the answers (pages, redirects, JSON). The page modules
(``*_pages.py``, ``signin.py``) import this; ``app.py`` puts them together, so nothing imports
upward."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from skiff.console import csrf, render
from skiff.console.forms import Refused
from skiff.console.session import COOKIE, SECRET_NAME, Session, Sessions, cookie_scope
from skiff.domain.endpoints import Endpoint
from skiff.domain.keys import hash_key
from skiff.domain.permissions import Caller, Kind
from skiff.domain.users import User
from skiff.services.hub import Services

HERE = Path(__file__).parent


class SignInNeeded(Exception):
    """No valid session: pages redirect to the sign-in form, script calls answer 401."""


class CsrfRejected(Exception):
    """A form or script call without the visitor's CSRF token."""


@dataclass(frozen=True, slots=True)
class Visitor:
    user: User
    session: Session
    csrf: str
    #: The signed-in user with the key they signed in with: a session has all its user's
    #: rights, so only a key with permissions ``all`` signs in (``signin.py``).
    caller: Caller


class Console:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.sessions = Sessions(lambda: services.auth.server_secret(SECRET_NAME))
        self.pages = render.environment(HERE / "templates")

    # -- who is asking -------------------------------------------------------------------
    async def visitor(self, request: HTTPConnection) -> Visitor | None:
        """The signed-in visitor of a request or a WebSocket (its session cookie), or None."""
        cookie = cookie_scope(request).read(request.cookies, COOKIE)
        session = await self.sessions.read(cookie, self.services.clock.now())
        if session is None:
            return None
        caller = await self.caller_of(session.key_digest)
        if caller is None or caller.permissions.kind is not Kind.ALL:
            return None
        token = csrf.token(await self.sessions.secret(), session.nonce)
        return Visitor(caller.user, session, token, caller)

    async def caller_of(self, key_digest: str) -> Caller | None:
        """The caller of a key by its digest, if the key is still valid and its user not
        disabled (a revoked key, or a disabled user, ends the sessions made with it)."""
        return await self.services.auth.caller_of_digest(key_digest)

    async def caller_of_key(self, api_key: str) -> Caller | None:
        return await self.caller_of(hash_key(api_key.strip()))

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

    def form_page(
        self,
        request: Request,
        name: str,
        visitor: Visitor,
        refused: Refused | None,
        blank: dict[str, str] | None = None,
        **context: Any,
    ) -> HTMLResponse:
        """A page with a form: ``blank`` (status 200), or sent back ``refused`` with what was
        typed, its errors and its status."""
        if refused is None:
            return self.page(request, name, visitor, values=blank or {}, errors={}, **context)
        values, errors = refused.values, refused.errors
        return self.page(
            request, name, visitor, refused.status, values=values, errors=errors, **context
        )

    @staticmethod
    def redirect(request: Request, path: str) -> RedirectResponse:
        """303 to a console path (``""`` is the endpoint list)."""
        return RedirectResponse(request.scope.get("root_path", "") + path, status_code=303)


def _section(path: str) -> str:
    """The part of the console a path is in, for the navigation's current link."""
    for prefix, section in (
        ("/templates", "templates"),
        ("/registry-auths", "registry"),
        ("/secrets", "secrets"),
        ("/settings", "settings"),
        ("/volumes", "volumes"),
        ("/pods", "pods"),
        ("/billing", "billing"),
        ("/models", "models"),
        ("/keys", "keys"),
        ("/users", "users"),
    ):
        if path.startswith(prefix):
            return section
    return "endpoints"


def content_security_policy(style_nonce: str | None = None) -> str:
    """The console's Content-Security-Policy: scripts, styles, fetches and WebSockets from the
    console alone ('self' covers ws: and wss: to the same host and port), no framing.

    ``style_nonce``: also the ``<style>`` elements carrying that nonce, and style attributes,
    which the terminal's xterm.js writes as it draws (its colours and cell sizes); scripts stay
    'self' only, so injected markup still runs nothing."""
    styles = "style-src 'self'"
    if style_nonce is not None:
        styles += f"; style-src-elem 'self' 'nonce-{style_nonce}'; style-src-attr 'unsafe-inline'"
    return (
        f"default-src 'self'; script-src 'self'; {styles}; img-src 'self' data:; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    )


def json_answer(body: Any, status: int = 200) -> Response:
    return Response(
        orjson.dumps(body),
        status,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def wants_json(request: Request) -> bool:
    return request.url.path.endswith(".json") or "application/json" in request.headers.get(
        "accept", ""
    )
