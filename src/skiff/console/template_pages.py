"""Templates: the list (with the endpoints using each), create, delete (refused while used)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from skiff.console import forms
from skiff.console.base import Console, Visitor
from skiff.domain.templates import TemplateCategory, TemplateCreate
from skiff.errors import Conflict, Invalid


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
        for endpoint in await services.endpoints.all(visitor.user):
            used_by.setdefault(endpoint.spec.templateId, []).append(endpoint.spec.name)
        return console.page(
            request,
            "templates.html",
            visitor,
            status,
            title="Templates",
            templates=await services.templates.all(visitor.user),
            registry_auths=await services.registry_auths.all(visitor.user),
            categories=[c.value for c in TemplateCategory],
            used_by=used_by,
            values=values or {"category": TemplateCategory.CPU.value},
            errors=errors or {},
            command=forms.format_command,
            created=request.query_params.get("created"),
            deleted=request.query_params.get("deleted"),
        )

    async def templates_page(request: Request) -> Response:
        return await list_page(request, await console.signed_in(request))

    async def create(request: Request) -> Response:
        visitor = await console.signed_in(request)
        form = await console.form(request, visitor)
        data, errors = forms.template_data(form)
        model, invalid = forms.validate(TemplateCreate, data, forms.TEMPLATE_FIELDS, "name")
        errors = invalid | errors
        if model is not None and not errors:
            try:
                made = await services.templates.create(visitor.user, model)
            except (Invalid, Conflict) as exc:
                errors = forms.service_error(exc, "name")
            else:
                return Console.redirect(request, f"/templates?created={made.name}")
        return await list_page(request, visitor, form, errors, 400)

    async def delete(request: Request) -> Response:
        visitor = await console.signed_in(request)
        await console.form(request, visitor)
        template = await services.templates.get(visitor.user, request.path_params["template_id"])
        await services.templates.delete(visitor.user, template.id)
        return Console.redirect(request, f"/templates?deleted={template.name}")

    return [
        Route("/templates", templates_page, methods=["GET"]),
        Route("/templates", create, methods=["POST"]),
        Route("/templates/{template_id}/delete", delete, methods=["POST"]),
    ]
