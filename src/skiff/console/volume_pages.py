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
from skiff.console.resource_pages import ItemPages, ListPage
from skiff.domain.endpoints import Endpoint
from skiff.domain.pods import Pod
from skiff.domain.volumes import NetworkVolumeCreate, NetworkVolumeUpdate, VolumeReport


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


def volume_id(shown: VolumeReport) -> str:
    return shown.volume.id


def routes(console: Console) -> list[BaseRoute]:
    services = console.services

    async def attached_to(visitor: Visitor) -> dict[str, list[Endpoint]]:
        return attached(await services.endpoints.all(visitor.user))

    async def mounted_by(visitor: Visitor) -> dict[str, list[Pod]]:
        # The pods service's list: a pod being deleted is left out, as the delete leaves it.
        return mounted(await services.pods.all(visitor.user))

    async def shows(visitor: Visitor) -> dict[str, Any]:
        return {
            "reports": await services.volumes.all(visitor.user),
            "attached": await attached_to(visitor),
            "mounted": await mounted_by(visitor),
        }

    page = ListPage(console, "/volumes", "volumes.html", "Network volumes", shows)
    volumes = ItemPages(console, "/volumes", "volume_id", services.volumes, volume_name, volume_id)

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

    def read_changes(form: dict[str, str]) -> tuple[NetworkVolumeUpdate | None, forms.Errors]:
        data = forms.volume_data(form)
        return forms.validate(NetworkVolumeUpdate, data, forms.VOLUME_FIELDS, "name")

    update = volumes.update(
        volume_page, read_changes, services.volumes.update, "size", forms.VOLUME_FIELDS
    )

    async def delete_shows(visitor: Visitor, shown: VolumeReport) -> dict[str, Any]:
        return {
            "report": shown,
            "endpoints": (await attached_to(visitor)).get(shown.volume.id, []),
            "pods": (await mounted_by(visitor)).get(shown.volume.id, []),
        }

    deleting = volumes.deleting("volume_delete.html", "volume", delete_shows)

    return [
        Route("/volumes", page.show, methods=["GET"]),
        Route(
            "/volumes",
            page.create(read, volumes.make, "name", forms.VOLUME_FIELDS),
            methods=["POST"],
        ),
        Route("/volumes/{volume_id}", volumes.show(volume_page), methods=["GET"]),
        Route("/volumes/{volume_id}", update, methods=["POST"]),
        Route("/volumes/{volume_id}/delete", deleting.show, methods=["GET"]),
        Route("/volumes/{volume_id}/delete", deleting.delete, methods=["POST"]),
    ]
