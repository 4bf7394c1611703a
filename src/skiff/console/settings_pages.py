"""The signed-in user's settings: the public SSH key their pods get as ``PUBLIC_KEY`` (the
same one GraphQL's ``updateUserSettings`` and ``PATCH /v1/user`` set)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from skiff.console import forms
from skiff.console.base import Console, Visitor
from skiff.errors import Invalid


def routes(console: Console) -> list[BaseRoute]:
    services = console.services

    async def settings_page(
        request: Request, visitor: Visitor, refused: forms.Refused | None = None
    ) -> Response:
        saved_key = await services.user_settings.pub_key(visitor.user) if refused is None else None
        return console.form_page(
            request,
            "settings.html",
            visitor,
            refused,
            {"pubKey": saved_key or ""},
            title="Settings",
            saved=request.query_params.get("saved"),
        )

    async def show(request: Request) -> Response:
        return await settings_page(request, await console.signed_in(request))

    async def save(request: Request) -> Response:
        visitor = await console.signed_in(request)
        form = await console.form(request, visitor)
        # A browser sends a textarea's lines with CRLF; keys are kept one a line.
        pub_key = form.get("pubKey", "").replace("\r\n", "\n").strip()
        try:
            await services.user_settings.set_pub_key(visitor.user, pub_key)
        except Invalid as exc:
            errors = forms.service_error(exc, "pubKey")
            return await settings_page(request, visitor, forms.Refused({"pubKey": pub_key}, errors))
        return Console.redirect(request, "/settings?saved=1")

    return [
        Route("/settings", show, methods=["GET"]),
        Route("/settings", save, methods=["POST"]),
    ]
