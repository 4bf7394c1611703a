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
from skiff.console.resource_pages import ItemPages, ListPage
from skiff.domain.secrets import Secret, SecretCreate, SecretValue, references

FIELDS = ("name", "value")
#: What a refused form shows again: not the value.
KEPT = ("name",)


def secret_name(secret: Secret) -> str:
    return secret.name


def secret_id(secret: Secret) -> str:
    return secret.id


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
    secrets = ItemPages(console, "/secrets", "secret_id", services.secrets, secret_name, secret_id)

    def read(form: dict[str, str]) -> tuple[SecretCreate | None, forms.Errors]:
        data = {field: form.get(field, "") for field in FIELDS}
        return forms.validate(SecretCreate, data, FIELDS, "name")

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

    def read_value(form: dict[str, str]) -> tuple[SecretValue | None, forms.Errors]:
        return forms.validate(SecretValue, {"value": form.get("value", "")}, ("value",), "value")

    # The value is never shown again, not even as typed: no field is kept.
    update = secrets.update(secret_page, read_value, services.secrets.update, "value", ())

    async def delete_shows(visitor: Visitor, secret: Secret) -> dict[str, Any]:
        return {"secret": secret, "used_by": (await referred_by(visitor)).get(secret.name, [])}

    deleting = secrets.deleting("secret_delete.html", "secret", delete_shows)

    return [
        Route("/secrets", page.show, methods=["GET"]),
        Route("/secrets", page.create(read, secrets.make, "name", KEPT), methods=["POST"]),
        Route("/secrets/{secret_id}", secrets.show(secret_page), methods=["GET"]),
        Route("/secrets/{secret_id}", update, methods=["POST"]),
        Route("/secrets/{secret_id}/delete", deleting.show, methods=["GET"]),
        Route("/secrets/{secret_id}/delete", deleting.delete, methods=["POST"]),
    ]
