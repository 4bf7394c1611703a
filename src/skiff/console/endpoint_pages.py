"""Endpoints: the list with live counts, create, edit (saying when workers restart), delete
(after typing the name), and the detail page (health, workers, recent jobs, request panel)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from skiff.console import forms
from skiff.console.base import Console, Visitor
from skiff.console.resource_pages import DeletePage
from skiff.domain.endpoints import (
    ComputeType,
    Endpoint,
    EndpointCreate,
    EndpointSpec,
    EndpointUpdate,
    ScalerType,
    apply_endpoint_update,
)
from skiff.domain.health import health_view
from skiff.domain.jobs import JobStatus
from skiff.domain.templates import Template, TemplateCategory, TemplateCreate
from skiff.domain.users import User
from skiff.domain.workers import WorkerReport
from skiff.errors import Conflict, Invalid

#: The endpoint input a form saves: a new endpoint's or an edit's.
Settings = TypeVar("Settings", EndpointCreate, EndpointUpdate)
#: The template choice that means "make a new one from the fields below".
NEW_TEMPLATE = "__new__"
#: Jobs the detail page lists (the job history page has the rest).
RECENT_JOBS = 10
#: How people call the settings whose change restarts workers (``FIELDS_THAT_ROLL_WORKERS``,
#: a unit test keeps the two the same), in the order the form shows them.
ROLLING_LABELS = {
    "templateId": "template",
    "computeType": "compute type",
    "gpuTypeIds": "GPU types",
    "gpuCount": "GPU count",
    "cpuFlavorIds": "CPU flavors",
    "vcpuCount": "vCPU count",
    "instanceIds": "CPU instance ids",
    "env": "environment",
    "networkVolumeId": "network volume",
}
#: A brand-new endpoint form: the API's defaults.
DEFAULTS = EndpointSpec(name="", templateId="")


def endpoint_name(endpoint: Endpoint) -> str:
    return endpoint.spec.name


def form_values(spec: EndpointSpec) -> dict[str, str]:
    """An endpoint's settings as the form's text fields."""
    return {
        "name": spec.name,
        "templateId": spec.templateId,
        "computeType": spec.computeType.value,
        "gpuTypeIds": "\n".join(spec.gpuTypeIds),
        "gpuCount": str(spec.gpuCount),
        "workersMin": str(spec.workersMin),
        "workersMax": str(spec.workersMax),
        "idleTimeout": str(spec.idleTimeout),
        "scalerType": spec.scalerType.value,
        "scalerValue": str(spec.scalerValue),
        "executionTimeoutMs": str(spec.executionTimeoutMs),
        "env": forms.format_env(spec.env),
        "flashboot": "on" if spec.flashboot else "",
        "networkVolumeId": spec.networkVolumeId or "",
    }


def rolling_changes(before: EndpointSpec, after: EndpointSpec) -> list[str]:
    """What people call each changed setting that restarts the workers (empty: none)."""
    return [
        label
        for field, label in ROLLING_LABELS.items()
        if getattr(before, field) != getattr(after, field)
    ]


async def endpoint_rows(console: Console, visitor: Visitor) -> list[dict[str, Any]]:
    services = console.services
    rows = []
    for endpoint in await services.endpoints.all(visitor.user):
        rows.append(
            {
                "endpoint": endpoint,
                "health": health_view(await services.jobs.health(endpoint)),
                "failure": await services.fleet.failure(endpoint.id),
            }
        )
    return rows


async def endpoint_list(console: Console, request: Request, visitor: Visitor) -> Response:
    return console.page(
        request,
        "endpoints.html",
        visitor,
        title="Endpoints",
        rows=await endpoint_rows(console, visitor),
        deleted=request.query_params.get("deleted"),
    )


def worker_row(report: WorkerReport) -> dict[str, Any]:
    """A worker as the detail page's table reads it."""
    w = report.worker
    return {
        "id": w.id,
        "name": w.name,
        "state": w.state.value,
        "kind": w.kind.value,
        "version": w.version,
        "startedAt": w.started_at,
        "gpu": w.gpu,
        "gpuIds": w.gpu_ids,
        "jobs": report.jobs,
    }


async def live_state(console: Console, endpoint: Endpoint) -> dict[str, Any]:
    """What the detail page refreshes by itself: health, workers, the newest jobs."""
    services = console.services
    jobs, _ = await services.jobs.recent(endpoint, RECENT_JOBS, None)
    return {
        "endpoint": endpoint,
        "health": health_view(await services.jobs.health(endpoint)),
        "failure": await services.fleet.failure(endpoint.id),
        "workers": [worker_row(r) for r in await services.endpoints.workers_of(endpoint.id)],
        "jobs": jobs,
    }


def routes(console: Console) -> list[BaseRoute]:
    services = console.services

    async def list_live(request: Request) -> Response:
        visitor = await console.signed_in(request)
        return console.page(
            request, "_endpoint_rows.html", visitor, rows=await endpoint_rows(console, visitor)
        )

    async def form_page(
        request: Request,
        visitor: Visitor,
        values: dict[str, str],
        errors: forms.Errors,
        endpoint: Endpoint | None = None,
        restart: list[str] | None = None,
        status: int = 200,
    ) -> Response:
        templates: list[Template] = await services.templates.all(visitor.user)
        return console.page(
            request,
            "endpoint_form.html",
            visitor,
            status,
            title=f"Edit {endpoint.spec.name}" if endpoint else "New endpoint",
            endpoint=endpoint,
            values=values,
            # What the edit form's script compares with, to say when saving restarts workers.
            stored=form_values(endpoint.spec) if endpoint else None,
            errors=errors,
            templates=templates,
            registry_auths=await services.registry_auths.all(visitor.user),
            volumes=await services.volumes.records(visitor.user),
            gpu_types=sorted({gpu.name for gpu in services.gpus.gpus}),
            compute_types=[c.value for c in ComputeType],
            scaler_types=[s.value for s in ScalerType],
            categories=[c.value for c in TemplateCategory],
            rolling=ROLLING_LABELS,
            restart=restart,
            new_template=NEW_TEMPLATE,
        )

    def new_template_input(
        form: dict[str, str], data: dict[str, Any], errors: forms.Errors
    ) -> TemplateCreate | None:
        """The template the form asks to make, validated; ``data`` gets a stand-in id."""
        if form.get("templateId") != NEW_TEMPLATE:
            return None
        raw, parse_errors = forms.template_data(form, prefix="template_")
        template, invalid = forms.validate(TemplateCreate, raw, forms.TEMPLATE_FIELDS, "name")
        errors.update(forms.prefixed(invalid, "template_"))
        errors.update(parse_errors)
        # Replaced by the new template's id once the endpoint's own fields are valid too.
        data["templateId"] = NEW_TEMPLATE
        return template

    async def make_template(visitor: Visitor, template: TemplateCreate) -> Template:
        try:
            return await services.templates.create(visitor.user, template)
        except (Invalid, Conflict) as exc:
            errors = forms.prefixed(forms.service_error(exc, "name"), "template_")
            raise _FormInvalid(errors) from exc

    async def posted(
        request: Request, visitor: Visitor, settings: type[Settings]
    ) -> tuple[dict[str, str], TemplateCreate | None, Settings | None, forms.Errors]:
        """The endpoint form as sent, read alike on create and edit: its fields, the new
        template it may ask for, and the settings they make (None where ``errors`` says
        why not)."""
        form = await console.form(request, visitor)
        data, errors = forms.endpoint_data(form, creating=settings is EndpointCreate)
        template = new_template_input(form, data, errors)
        model, invalid = forms.validate(settings, data, forms.ENDPOINT_FIELDS, "workersMin")
        return form, template, model, invalid | errors

    async def save_with(
        visitor: Visitor,
        template: TemplateCreate | None,
        model: Settings,
        save: Callable[[Settings], Awaitable[Endpoint]],
    ) -> Endpoint | forms.Errors:
        """Make the form's new template (if it asks for one), then save the endpoint with it;
        a refusal of either removes the template again and comes back as field errors."""
        made: Template | None = None
        try:
            if template is not None:
                made = await make_template(visitor, template)
                model = model.model_copy(update={"templateId": made.id})
            return await save(model)
        except (Invalid, _FormInvalid) as exc:
            if made is not None:
                await services.templates.delete(visitor.user, made.id)
            if isinstance(exc, _FormInvalid):
                return exc.errors
            return forms.service_error(exc, "name")

    async def new_form(request: Request) -> Response:
        visitor = await console.signed_in(request)
        values = form_values(DEFAULTS)
        values["templateId"] = request.query_params.get("template", "")
        if not services.gpus.gpus:
            # The API's default (GPU) could never place a worker on a server without GPUs.
            values["computeType"] = ComputeType.CPU.value
        return await form_page(request, visitor, values, {})

    async def create(request: Request) -> Response:
        visitor = await console.signed_in(request)
        form, template, model, errors = await posted(request, visitor, EndpointCreate)
        if errors or model is None:
            return await form_page(request, visitor, form, errors, status=400)

        async def save(create: EndpointCreate) -> Endpoint:
            return await services.endpoints.create(visitor.user, create)

        saved = await save_with(visitor, template, model, save)
        if not isinstance(saved, Endpoint):
            return await form_page(request, visitor, form, saved, status=400)
        endpoint = saved
        return Console.redirect(request, f"/endpoints/{endpoint.id}?created=1")

    async def edit_form(request: Request) -> Response:
        visitor = await console.signed_in(request)
        endpoint = await console.endpoint(visitor, request)
        return await form_page(request, visitor, form_values(endpoint.spec), {}, endpoint)

    async def update(request: Request) -> Response:
        visitor = await console.signed_in(request)
        endpoint = await console.endpoint(visitor, request)
        form, template, model, errors = await posted(request, visitor, EndpointUpdate)
        if errors or model is None:
            return await form_page(request, visitor, form, errors, endpoint, status=400)
        try:
            after = apply_endpoint_update(endpoint.spec, model)
        except ValidationError as exc:
            found = forms.validation_errors(exc, forms.ENDPOINT_FIELDS, "workersMin")
            return await form_page(request, visitor, form, found, endpoint, status=400)
        changes = rolling_changes(endpoint.spec, after)
        if template is not None and "template" not in changes:
            changes.insert(0, "template")
        if changes and form.get("restart_ok") != "yes":
            # Said before anything is saved; the form comes back with a confirming button.
            return await form_page(request, visitor, form, {}, endpoint, restart=changes)

        async def save(update: EndpointUpdate) -> Endpoint:
            return await services.endpoints.update(visitor.user, endpoint.id, update)

        saved = await save_with(visitor, template, model, save)
        if not isinstance(saved, Endpoint):
            return await form_page(request, visitor, form, saved, endpoint, status=400)
        restarted = "&restarted=1" if changes else ""
        return Console.redirect(request, f"/endpoints/{endpoint.id}?saved=1{restarted}")

    async def named(request: Request, visitor: Visitor) -> Endpoint:
        return await console.endpoint(visitor, request)

    async def delete_shows(visitor: Visitor, endpoint: Endpoint) -> dict[str, Any]:
        return {"endpoint": endpoint}

    async def remove(user: User, endpoint: Endpoint) -> None:
        await services.endpoints.delete(user, endpoint.id)

    # Back to the endpoint list, with the name as it is (as this page always did).
    deleting = DeletePage(
        console,
        "endpoint_delete.html",
        "endpoint",
        named,
        endpoint_name,
        remove,
        delete_shows,
        "/",
        raw_notice=True,
    )

    async def detail(request: Request) -> Response:
        visitor = await console.signed_in(request)
        endpoint = await console.endpoint(visitor, request)
        return await detail_page(console, request, visitor, endpoint)

    async def detail_live(request: Request) -> Response:
        visitor = await console.signed_in(request)
        endpoint = await console.endpoint(visitor, request)
        state = await live_state(console, endpoint)
        return console.page(request, "_endpoint_live.html", visitor, **state)

    return [
        Route("/endpoints/live", list_live, methods=["GET"]),
        Route("/endpoints/new", new_form, methods=["GET"]),
        Route("/endpoints/new", create, methods=["POST"]),
        Route("/endpoints/{endpoint_id}", detail, methods=["GET"]),
        Route("/endpoints/{endpoint_id}/live", detail_live, methods=["GET"]),
        Route("/endpoints/{endpoint_id}/edit", edit_form, methods=["GET"]),
        Route("/endpoints/{endpoint_id}/edit", update, methods=["POST"]),
        Route("/endpoints/{endpoint_id}/delete", deleting.show, methods=["GET"]),
        Route("/endpoints/{endpoint_id}/delete", deleting.delete, methods=["POST"]),
    ]


async def detail_page(
    console: Console,
    request: Request,
    visitor: Visitor,
    endpoint: Endpoint,
    request_body: str | None = None,
    request_error: str | None = None,
    status: int = 200,
) -> Response:
    """The endpoint's page; the request panel's form comes back with its error, if any."""
    template = await console.services.templates.get(visitor.user, endpoint.spec.templateId)
    just_saved = "created" in request.query_params or "saved" in request.query_params
    saved_warnings = console.services.placement.warnings(endpoint) if just_saved else []
    return console.page(
        request,
        "endpoint.html",
        visitor,
        status,
        title=endpoint.spec.name,
        template=template,
        request_body=request_body if request_body is not None else '{\n  "input": {}\n}',
        request_error=request_error,
        states=[s.value for s in JobStatus],
        notice=request.query_params,
        # Right after a create or a save: what the API's answer warns of (api/endpoints.py).
        warnings=saved_warnings,
        worker_cost=console.services.billing.worker_cost_per_hour(endpoint),
        lb_domain=console.services.settings.lb_domain,
        **await live_state(console, endpoint),
    )


class _FormInvalid(Exception):
    """A service refused part of a form: the message by form field."""

    def __init__(self, errors: forms.Errors) -> None:
        super().__init__(errors)
        self.errors = errors
