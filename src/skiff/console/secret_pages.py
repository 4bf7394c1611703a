"""Secrets: the list (names, what refers to each, when each changed), create, a secret's page
(a new value), and delete after typing the name (refused while something refers to it). A
value goes in and never comes back, not even into the form shown again after an error."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from skiff.console import forms
from skiff.console.base import Console, Visitor
from skiff.console.resource_pages import DeletePage, ListPage
from skiff.domain.secrets import Secret, SecretCreate, SecretValue, references
from skiff.domain.users import User
from skiff.errors import Invalid

FIELDS = ("name", "value")
#: What a refused form shows again: not the value.
KEPT = ("name",)


def secret_name(secret: Secret) -> str:
    return secret.name


def routes(console: Console) -> list[BaseRoute]:
    services = console.services

    async def referred_by(visitor: Visitor) -> dict[str, list[str]]:
        """What refers to each secret (templates, endpoints, pods by name), by secret name."""
        by_name: dict[str, list[str]] = {}
        user = visitor.user
        named = [(t.name, t.env) for t in await services.templates.all(user)]
        named += [(e.spec.name or e.id, e.spec.env) for e in await services.endpoints.all(user)]
        named += [(p.spec.name or p.id, p.spec.env) for p in await services.pods.all(user)]
        for name, env in named:
            for secret in references(env):
                by_name.setdefault(secret, []).append(name)
        return by_name

    async def shows(visitor: Visitor) -> dict[str, Any]:
        return {
            "secrets": await services.secrets.all(visitor.user),
            "used_by": await referred_by(visitor),
        }

    page = ListPage(console, "/secrets", "secrets.html", "Secrets", shows)

    def read(form: dict[str, str]) -> tuple[SecretCreate | None, forms.Errors]:
        data = {field: form.get(field, "") for field in FIELDS}
        return forms.validate(SecretCreate, data, FIELDS, "name")

    async def make(user: User, model: SecretCreate) -> str:
        return (await services.secrets.create(user, model)).name

    async def find(request: Request, visitor: Visitor) -> Secret:
        """The secret the path names, if it is the visitor's (else 404)."""
        return await services.secrets.get(visitor.user, request.path_params["secret_id"])

    async def secret_page(
        request: Request,
        visitor: Visitor,
        secret: Secret,
        refused: forms.Refused | None = None,
    ) -> Response:
        return console.form_page(
            request,
            "secret.html",
            visitor,
            refused,
            title=secret.name,
            secret=secret,
            used_by=(await referred_by(visitor)).get(secret.name, []),
            saved=request.query_params.get("saved"),
        )

    async def detail(request: Request) -> Response:
        visitor = await console.signed_in(request)
        return await secret_page(request, visitor, await find(request, visitor))

    async def update(request: Request) -> Response:
        visitor = await console.signed_in(request)
        secret = await find(request, visitor)
        form = await console.form(request, visitor)
        model, errors = forms.validate(
            SecretValue, {"value": form.get("value", "")}, ("value",), "value"
        )
        if model is not None:
            try:
                await services.secrets.update(visitor.user, secret.id, model)
            except Invalid as exc:
                errors = forms.service_error(exc, "value")
            else:
                return Console.redirect(request, f"/secrets/{secret.id}?saved=1")
        # The value is never shown again, not even as typed.
        return await secret_page(request, visitor, secret, forms.Refused({}, errors))

    async def delete_shows(visitor: Visitor, secret: Secret) -> dict[str, Any]:
        return {"secret": secret, "used_by": (await referred_by(visitor)).get(secret.name, [])}

    async def remove(user: User, secret: Secret) -> None:
        await services.secrets.delete(user, secret.id)

    deleting = DeletePage(
        console, "secret_delete.html", "secret", find, secret_name, remove, delete_shows, "/secrets"
    )

    return [
        Route("/secrets", page.show, methods=["GET"]),
        Route("/secrets", page.create(read, make, "name", KEPT), methods=["POST"]),
        Route("/secrets/{secret_id}", detail, methods=["GET"]),
        Route("/secrets/{secret_id}", update, methods=["POST"]),
        Route("/secrets/{secret_id}/delete", deleting.show, methods=["GET"]),
        Route("/secrets/{secret_id}/delete", deleting.delete, methods=["POST"]),
    ]
