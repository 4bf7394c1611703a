"""The signed-in user's API keys (``/console/keys``): list, make (the key shown once, on the
answer to the form, never in a URL or again), revoke. The same rules as ``/v1/apikeys``
(``services/accounts.py``): one's own keys only, a restricted key naming one's own endpoints."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from skiff.console import forms
from skiff.console.base import Console, Visitor
from skiff.console.resource_pages import ListPage
from skiff.domain import permissions
from skiff.errors import Invalid
from skiff.services.accounts import KeyRequest

#: The form's select for one endpoint of a restricted key: ``endpoint:<id>``.
ENDPOINT_FIELD = "endpoint:"


def routes(console: Console) -> list[BaseRoute]:
    services = console.services

    async def shows(visitor: Visitor) -> dict[str, Any]:
        return {
            "keys": await services.accounts.keys_of(visitor.user),
            "endpoints": await services.endpoints.all(visitor.user),
        }

    page = ListPage(
        console,
        "/keys",
        "keys.html",
        "API keys",
        shows,
        defaults=lambda _: {"permissions": "all"},
        notices=("revoked",),
    )

    async def create(request: Request) -> Response:
        visitor = await console.signed_in(request)
        form = await console.form(request, visitor)
        grants = {
            name.removeprefix(ENDPOINT_FIELD): value
            for name, value in form.items()
            if name.startswith(ENDPOINT_FIELD) and value
        }
        kind = form.get("permissions", "")
        try:
            wanted = KeyRequest(
                form.get("name", ""),
                permissions.parse(kind, grants if kind == "restricted" else None),
            )
            issued = await services.accounts.create_key(visitor.caller, wanted)
        except Invalid as exc:
            kept = {k: v for k, v in form.items() if k != "csrf"}
            errors = forms.service_error(exc, "name")
            return await page.answer(request, visitor, forms.Refused(kept, errors))
        made = {"name": issued.record.label, "key": issued.key}
        return await page.answer(request, visitor, made=made)

    async def revoke(request: Request) -> Response:
        visitor = await console.signed_in(request)
        await console.form(request, visitor)
        key_id = request.path_params["key_id"]
        await services.accounts.revoke_key(visitor.user, key_id)
        return Console.redirect(request, f"/keys?revoked={key_id}")

    return [
        Route("/keys", page.show, methods=["GET"]),
        Route("/keys", create, methods=["POST"]),
        Route("/keys/{key_id}/revoke", revoke, methods=["POST"]),
    ]
