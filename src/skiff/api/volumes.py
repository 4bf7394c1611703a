"""``/v1/networkvolumes``: network volumes (create, list, get, update by PATCH or POST
.../update, delete), directories on the server that workers and pods mount."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field
from starlette.responses import Response

from skiff.api.documented_errors import BAD, NOT_FOUND
from skiff.api.needs import needs
from skiff.api.updates import patch_or_post_update
from skiff.domain import times
from skiff.domain.permissions import READ, WRITE
from skiff.domain.users import User
from skiff.domain.volumes import NetworkVolumeCreate, NetworkVolumeUpdate, VolumeReport
from skiff.services.hub import Services


class NetworkVolumeOut(BaseModel):
    id: str
    name: str
    size: int = Field(description="GB (of 2^30 bytes): the quota it was given")
    dataCenterId: str
    usedBytes: int = Field(
        description="The disk space its files take now (allocated blocks, as `du` counts "
        "them), read when asked. It may pass `size`: writes are not stopped there"
    )
    createdAt: str = Field(description="When it was created (ISO-8601, UTC, milliseconds)")


def volume_out(report: VolumeReport) -> NetworkVolumeOut:
    volume = report.volume
    # The stored volume's fields, under the same names: only its creation time is shown apart.
    return NetworkVolumeOut(
        **volume.model_dump(exclude={"createdAt"}),
        usedBytes=report.used_bytes,
        createdAt=times.iso(volume.createdAt),
    )


def router(services: Services, user_dep: Any) -> APIRouter:
    volumes = APIRouter(prefix="/networkvolumes", tags=["network volumes"])
    UserDep = Annotated[User, Depends(user_dep)]

    @volumes.post("", response_model=NetworkVolumeOut, responses=BAD)
    @needs(WRITE)
    async def create_network_volume(body: NetworkVolumeCreate, user: UserDep) -> NetworkVolumeOut:
        """Create a volume: a directory on the server, mounted read-write at `/runpod-volume`
        in every worker of the endpoints that name it in `networkVolumeId`. Refused (400,
        `size`) when the disk has less free space than `size`."""
        return volume_out(await services.volumes.create(user, body))

    @volumes.get("", response_model=list[NetworkVolumeOut])
    @needs(READ)
    async def list_network_volumes(user: UserDep) -> list[NetworkVolumeOut]:
        return [volume_out(r) for r in await services.volumes.all(user)]

    @volumes.get("/{volume_id}", response_model=NetworkVolumeOut, responses=NOT_FOUND)
    @needs(READ)
    async def get_network_volume(volume_id: str, user: UserDep) -> NetworkVolumeOut:
        return volume_out(await services.volumes.get(user, volume_id))

    @patch_or_post_update(
        volumes, "/{volume_id}", response_model=NetworkVolumeOut, responses={**BAD, **NOT_FOUND}
    )
    @needs(WRITE)
    async def update_network_volume(
        volume_id: str, body: NetworkVolumeUpdate, user: UserDep
    ) -> NetworkVolumeOut:
        """Rename, grow, or both. A volume never shrinks (400, `size`), and what it grows by
        must fit in the disk's free space (400, `size`). Its workers see the new size at once:
        nothing restarts."""
        return volume_out(await services.volumes.update(user, volume_id, body))

    @volumes.delete(
        "/{volume_id}",
        status_code=204,
        responses={
            **NOT_FOUND,
            409: {"description": "In use by endpoints or pods, which the message names"},
        },
    )
    @needs(WRITE)
    async def delete_network_volume(volume_id: str, user: UserDep) -> Response:
        """Delete the volume and every file in it, permanently. Refused (409) while endpoints
        or pods (not ones being deleted) name it in `networkVolumeId`: the message lists
        them."""
        await services.volumes.delete(user, volume_id)
        return Response(status_code=204)

    return volumes
