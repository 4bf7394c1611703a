"""Container registry auths: list, create, delete. A password goes in and never comes back,
not even into the form shown again after an error."""

from __future__ import annotations

from typing import Any

from starlette.routing import BaseRoute, Route

from skiff.console import forms
from skiff.console.base import Console, Visitor
from skiff.console.resource_pages import ListPage
from skiff.domain.registry_auths import RegistryAuthCreate
from skiff.domain.users import User

FIELDS = ("name", "username", "password")
#: What a refused form shows again: not the password.
KEPT = ("name", "username")


def routes(console: Console) -> list[BaseRoute]:
    services = console.services

    async def shows(visitor: Visitor) -> dict[str, Any]:
        used_by: dict[str, list[str]] = {}
        for template in await services.templates.all(visitor.user):
            if template.containerRegistryAuthId:
                used_by.setdefault(template.containerRegistryAuthId, []).append(template.name)
        return {"auths": await services.registry_auths.all(visitor.user), "used_by": used_by}

    page = ListPage(
        console, "/registry-auths", "registry_auths.html", "Registry auths", shows, raw_notice=True
    )

    def read(form: dict[str, str]) -> tuple[RegistryAuthCreate | None, forms.Errors]:
        data = {field: form.get(field, "") for field in FIELDS}
        return forms.validate(RegistryAuthCreate, data, FIELDS, "name")

    async def make(user: User, model: RegistryAuthCreate) -> str:
        return (await services.registry_auths.create(user, model)).name

    auths = services.registry_auths
    return [
        Route("/registry-auths", page.show, methods=["GET"]),
        Route("/registry-auths", page.create(read, make, "name", KEPT), methods=["POST"]),
        Route(
            "/registry-auths/{auth_id}/delete",
            page.delete("auth_id", auths.get, auths.delete, lambda auth: auth.name),
            methods=["POST"],
        ),
    ]
