"""Network volumes: the list (with the space each takes and the endpoints and pods attached),
create, a volume's page (rename and grow; never shrink), and delete after typing the name
(refused, with the service's words, while endpoints or pods are attached)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from skiff.console import forms
from skiff.console.base import Console, Visitor
from skiff.console.resource_pages import DeletePage, ListPage
from skiff.domain.endpoints import Endpoint
from skiff.domain.pods import Pod
from skiff.domain.users import User
from skiff.domain.volumes import NetworkVolumeCreate, NetworkVolumeUpdate, VolumeReport
from skiff.errors import Conflict, Invalid


def attached(endpoints: list[Endpoint]) -> dict[str, list[Endpoint]]:
    """The endpoints naming each volume, by volume id (from one read of the endpoints, not a
    query per volume)."""
    by_volume: dict[str, list[Endpoint]] = {}
    for endpoint in endpoints:
        if endpoint.spec.networkVolumeId:
            by_volume.setdefault(endpoint.spec.networkVolumeId, []).append(endpoint)
    return by_volume


def mounted(pods: list[Pod]) -> dict[str, list[Pod]]:
    """The pods mounting each volume (``networkVolumeId``), by volume id, as ``attached``."""
    by_volume: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.spec.networkVolumeId:
            by_volume.setdefault(pod.spec.networkVolumeId, []).append(pod)
    return by_volume


def volume_name(shown: VolumeReport) -> str:
    return shown.volume.name


def routes(console: Console) -> list[BaseRoute]:
    services = console.services

    async def attached_to(visitor: Visitor) -> dict[str, list[Endpoint]]:
        return attached(await services.endpoints.all(visitor.user))

    async def mounted_by(visitor: Visitor) -> dict[str, list[Pod]]:
        # The pods service's list: a pod being deleted is left out, as the delete leaves it.
        return mounted(await services.pods.all(visitor.user))

    async def report(request: Request, visitor: Visitor) -> VolumeReport:
        """The volume the path names, if it is the visitor's (else 404)."""
        return await services.volumes.get(visitor.user, request.path_params["volume_id"])

    async def shows(visitor: Visitor) -> dict[str, Any]:
        return {
            "reports": await services.volumes.all(visitor.user),
            "attached": await attached_to(visitor),
            "mounted": await mounted_by(visitor),
        }

    page = ListPage(console, "/volumes", "volumes.html", "Network volumes", shows)

    async def volume_page(
        request: Request,
        visitor: Visitor,
        shown: VolumeReport,
        refused: forms.Refused | None = None,
    ) -> Response:
        volume = shown.volume
        return console.form_page(
            request,
            "volume.html",
            visitor,
            refused,
            {"name": volume.name, "size": str(volume.size)},
            title=volume.name,
            report=shown,
            endpoints=(await attached_to(visitor)).get(volume.id, []),
            pods=(await mounted_by(visitor)).get(volume.id, []),
            saved=request.query_params.get("saved"),
        )

    def read(form: dict[str, str]) -> tuple[NetworkVolumeCreate | None, forms.Errors]:
        data = forms.volume_data(form)
        return forms.validate(NetworkVolumeCreate, data, forms.VOLUME_FIELDS, "name")

    async def make(user: User, model: NetworkVolumeCreate) -> str:
        return (await services.volumes.create(user, model)).volume.name

    async def detail(request: Request) -> Response:
        visitor = await console.signed_in(request)
        return await volume_page(request, visitor, await report(request, visitor))

    async def update(request: Request) -> Response:
        visitor = await console.signed_in(request)
        current = await report(request, visitor)
        form = await console.form(request, visitor)
        shown = {field: form.get(field, "") for field in forms.VOLUME_FIELDS}
        model, errors = forms.validate(
            NetworkVolumeUpdate, forms.volume_data(form), forms.VOLUME_FIELDS, "name"
        )
        if model is not None:
            try:
                await services.volumes.update(visitor.user, current.volume.id, model)
            except (Invalid, Conflict) as exc:
                errors = forms.service_error(exc, "size")
            else:
                return Console.redirect(request, f"/volumes/{current.volume.id}?saved=1")
        return await volume_page(request, visitor, current, forms.Refused(shown, errors))

    async def delete_shows(visitor: Visitor, shown: VolumeReport) -> dict[str, Any]:
        return {
            "report": shown,
            "endpoints": (await attached_to(visitor)).get(shown.volume.id, []),
            "pods": (await mounted_by(visitor)).get(shown.volume.id, []),
        }

    async def remove(user: User, shown: VolumeReport) -> None:
        await services.volumes.delete(user, shown.volume.id)

    deleting = DeletePage(
        console,
        "volume_delete.html",
        "volume",
        report,
        volume_name,
        remove,
        delete_shows,
        "/volumes",
    )

    return [
        Route("/volumes", page.show, methods=["GET"]),
        Route("/volumes", page.create(read, make, "name", forms.VOLUME_FIELDS), methods=["POST"]),
        Route("/volumes/{volume_id}", detail, methods=["GET"]),
        Route("/volumes/{volume_id}", update, methods=["POST"]),
        Route("/volumes/{volume_id}/delete", deleting.show, methods=["GET"]),
        Route("/volumes/{volume_id}/delete", deleting.delete, methods=["POST"]),
    ]
