"""Container registry auths: list, create, delete. A password goes in and never comes back,
not even into the form shown again after an error."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from skiff.console import forms
from skiff.console.base import Console, Visitor
from skiff.domain.registry_auths import RegistryAuthCreate
from skiff.errors import Conflict

FIELDS = ("name", "username", "password")


def routes(console: Console) -> list[BaseRoute]:
    services = console.services

    async def list_page(
        request: Request,
        visitor: Visitor,
        values: dict[str, str] | None = None,
        errors: forms.Errors | None = None,
        status: int = 200,
    ) -> Response:
        used_by: dict[str, list[str]] = {}
        for template in await services.templates.all(visitor.user):
            if template.containerRegistryAuthId:
                used_by.setdefault(template.containerRegistryAuthId, []).append(template.name)
        return console.page(
            request,
            "registry_auths.html",
            visitor,
            status,
            title="Registry auths",
            auths=await services.registry_auths.all(visitor.user),
            used_by=used_by,
            values=values or {},
            errors=errors or {},
            created=request.query_params.get("created"),
            deleted=request.query_params.get("deleted"),
        )

    async def auths_page(request: Request) -> Response:
        return await list_page(request, await console.signed_in(request))

    async def create(request: Request) -> Response:
        visitor = await console.signed_in(request)
        form = await console.form(request, visitor)
        data = {field: form.get(field, "") for field in FIELDS}
        model, errors = forms.validate(RegistryAuthCreate, data, FIELDS, "name")
        if model is not None:
            try:
                made = await services.registry_auths.create(visitor.user, model)
            except Conflict as exc:
                errors = {"name": exc.message}
            else:
                return Console.redirect(request, f"/registry-auths?created={made.name}")
        shown = {"name": data["name"], "username": data["username"]}
        return await list_page(request, visitor, shown, errors, 400)

    async def delete(request: Request) -> Response:
        visitor = await console.signed_in(request)
        await console.form(request, visitor)
        auth = await services.registry_auths.get(visitor.user, request.path_params["auth_id"])
        await services.registry_auths.delete(visitor.user, auth.id)
        return Console.redirect(request, f"/registry-auths?deleted={auth.name}")

    return [
        Route("/registry-auths", auths_page, methods=["GET"]),
        Route("/registry-auths", create, methods=["POST"]),
        Route("/registry-auths/{auth_id}/delete", delete, methods=["POST"]),
    ]
