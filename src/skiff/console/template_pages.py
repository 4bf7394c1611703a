"""Templates: the list (with the endpoints using each), create, delete (refused while used)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.routing import BaseRoute, Route

from skiff.console import forms
from skiff.console.base import Console, Visitor
from skiff.console.resource_pages import ListPage
from skiff.domain.templates import TemplateCategory, TemplateCreate
from skiff.domain.users import User


def routes(console: Console) -> list[BaseRoute]:
    services = console.services

    async def shows(visitor: Visitor) -> dict[str, Any]:
        used_by: dict[str, list[str]] = {}
        for endpoint in await services.endpoints.all(visitor.user):
            used_by.setdefault(endpoint.spec.templateId, []).append(endpoint.spec.name)
        return {
            "templates": await services.templates.all(visitor.user),
            "registry_auths": await services.registry_auths.all(visitor.user),
            "categories": [c.value for c in TemplateCategory],
            "used_by": used_by,
            "command": forms.format_command,
        }

    def defaults(listed: Mapping[str, Any]) -> dict[str, str]:
        return {"category": TemplateCategory.CPU.value}

    page = ListPage(
        console, "/templates", "templates.html", "Templates", shows, defaults, raw_notice=True
    )

    def read(form: dict[str, str]) -> tuple[TemplateCreate | None, forms.Errors]:
        data, errors = forms.template_data(form)
        model, invalid = forms.validate(TemplateCreate, data, forms.TEMPLATE_FIELDS, "name")
        return model, invalid | errors

    async def make(user: User, model: TemplateCreate) -> str:
        return (await services.templates.create(user, model)).name

    templates = services.templates
    return [
        Route("/templates", page.show, methods=["GET"]),
        Route("/templates", page.create(read, make, "name"), methods=["POST"]),
        Route(
            "/templates/{template_id}/delete",
            page.delete("template_id", templates.get, templates.delete, lambda t: t.name),
            methods=["POST"],
        ),
    ]
