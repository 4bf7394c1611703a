"""Signing in with an API key, and out.

``GET /console`` shows the sign-in form to a visitor without a session (the endpoint list to
one with). ``POST /console/login`` takes the form's ``api_key``: a valid key gets the session
cookie (HttpOnly, SameSite=Lax, Secure over HTTPS, scoped to the console's path) and is sent on
to where it was going. ``POST /console/logout`` clears it.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from skiff.console import csrf, endpoint_pages
from skiff.console.base import Console
from skiff.console.session import (
    COOKIE,
    LOGIN_COOKIE,
    SESSION_SECONDS,
    cookie_scope,
    new_nonce,
)
from skiff.domain.keys import hash_key
from skiff.domain.permissions import Kind


def safe_next(base: str, target: str | None) -> str:
    """Where to go after sign-in: only a path of the console itself (no open redirect)."""
    if target and target.startswith(base + "/") and not target.startswith("//"):
        return target
    return base + "/"


def routes(console: Console) -> list[BaseRoute]:
    async def sign_in_page(
        request: Request, error: str | None = None, status: int = 200
    ) -> Response:
        """The form, with a fresh nonce for its CSRF token in a short-lived cookie."""
        nonce = new_nonce()
        response = console.page(
            request,
            "signin.html",
            None,
            status,
            title="Sign in",
            login_csrf=csrf.token(await console.sessions.secret(), nonce),
            next=request.query_params.get("next", ""),
            error=error,
        )
        scope = cookie_scope(request)
        response.set_cookie(
            scope.name(LOGIN_COOKIE),
            nonce,
            max_age=3600,
            path=scope.path,
            httponly=True,
            samesite="strict",
            secure=scope.secure,
        )
        return response

    async def index(request: Request) -> Response:
        visitor = await console.visitor(request)
        if visitor is None:
            return await sign_in_page(request)
        return await endpoint_pages.endpoint_list(console, request, visitor)

    async def login(request: Request) -> Response:
        form = await request.form()
        submitted = form.get(csrf.FIELD)
        scope = cookie_scope(request)
        nonce = scope.read(request.cookies, LOGIN_COOKIE)
        if not csrf.valid(
            await console.sessions.secret(),
            nonce,
            submitted if isinstance(submitted, str) else None,
        ):
            return await sign_in_page(
                request, "The sign-in form had expired. Please try again.", 403
            )
        api_key = form.get("api_key")
        if not isinstance(api_key, str) or not api_key.strip():
            return await sign_in_page(request, "Enter your API key.", 400)
        caller = await console.caller_of_key(api_key)
        if caller is None:
            return await sign_in_page(request, "That API key is not valid (or was revoked).", 401)
        if caller.permissions.kind is not Kind.ALL:
            # A session has all its user's rights: a narrower key must not open one.
            return await sign_in_page(
                request,
                f"This API key's permissions are {caller.permissions.kind}: the console "
                "needs a key with permissions all (a session has all your rights).",
                401,
            )
        base = request.scope.get("root_path", "")
        target = form.get("next")
        going = safe_next(base, target if isinstance(target, str) else None)
        response = RedirectResponse(going, status_code=303)
        value, _session = await console.sessions.issue(
            hash_key(api_key.strip()), console.services.clock.now()
        )
        response.set_cookie(
            scope.name(COOKIE),
            value,
            max_age=SESSION_SECONDS,
            path=scope.path,
            httponly=True,
            samesite="lax",
            secure=scope.secure,
        )
        response.delete_cookie(
            scope.name(LOGIN_COOKIE), path=scope.path, secure=scope.secure, httponly=True
        )
        return response

    async def logout(request: Request) -> Response:
        visitor = await console.signed_in(request)
        await console.form(request, visitor)
        response = Console.redirect(request, "/")
        scope = cookie_scope(request)
        response.delete_cookie(
            scope.name(COOKIE), path=scope.path, secure=scope.secure, httponly=True, samesite="lax"
        )
        return response

    return [
        Route("/", index, methods=["GET"], name="index"),
        Route("/login", login, methods=["POST"], name="login"),
        Route("/logout", logout, methods=["POST"], name="logout"),
    ]
