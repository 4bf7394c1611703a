"""Network volumes, per owner: create, read (with the space each takes), rename and grow,
delete; and the directory a worker of an endpoint mounts (``directory``).

The record lives in the store, the data in a directory (``volume_dirs.py``). A size is checked
against the disk when it is asked for (created or grown); writes past it are not stopped (a
plain directory has no quota: docs/volumes.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from skiff.clock import Clock
from skiff.domain.billing import UsageKind
from skiff.domain.quotas import Owned
from skiff.domain.users import User
from skiff.domain.volumes import (
    DEFAULT_DATA_CENTER,
    NetworkVolume,
    NetworkVolumeCreate,
    NetworkVolumeUpdate,
    VolumeReport,
    room_refusal,
    shrink_refusal,
)
from skiff.errors import Conflict, Invalid, NotFound
from skiff.ids import made_by_short_id, short_id
from skiff.services.metering import UsageEnded, not_metered
from skiff.services.quotas import Quotas
from skiff.store.base import Store
from skiff.volume_dirs import VolumeDirs

log = logging.getLogger(__name__)

#: A volume directory without a record is left this long after its last change (wall-clock
#: seconds): a create on another replica makes the directory a moment before the record.
ORPHAN_GRACE_SECONDS = 600.0


class Volumes:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        dirs: VolumeDirs,
        usage_ended: UsageEnded = not_metered,
        quotas: Quotas | None = None,
    ) -> None:
        """``usage_ended`` is told when a volume is deleted, which ends its metering then."""
        self._quotas = quotas or Quotas(store, 0)
        self._store = store
        self._clock = clock
        self._dirs = dirs
        self._usage_ended = usage_ended

    async def create(self, user: User, data: NetworkVolumeCreate) -> VolumeReport:
        """Its directory first, then its record: a volume that can be read has its directory."""
        await self._quotas.make_room(user, Owned.NETWORK_VOLUMES)
        free = await asyncio.to_thread(self._dirs.free_bytes)
        refusal = room_refusal(data.size, free)
        if refusal is not None:
            raise Invalid(refusal, field="size")
        volume = NetworkVolume(
            id=short_id(),
            name=data.name,
            size=data.size,
            dataCenterId=data.dataCenterId or DEFAULT_DATA_CENTER,
            createdAt=self._clock.now(),
        )
        await asyncio.to_thread(self._dirs.make, volume.id)
        try:
            await self._store.create_network_volume(user.id, volume)
        except BaseException:
            await asyncio.to_thread(self._dirs.remove, volume.id)
            raise
        return VolumeReport(volume, used_bytes=0)

    async def all(self, user: User) -> list[VolumeReport]:
        volumes = await self._store.list_network_volumes(user.id)
        return [await self._report(v, user) for v in volumes]

    async def records(self, user: User) -> list[NetworkVolume]:
        """The user's volumes without the space each takes (measuring walks every file)."""
        return await self._store.list_network_volumes(user.id)

    async def get(self, user: User, volume_id: str) -> VolumeReport:
        return await self._report(await self._volume(user, volume_id), user)

    async def update(self, user: User, volume_id: str, data: NetworkVolumeUpdate) -> VolumeReport:
        current = await self._volume(user, volume_id)
        size = current.size if data.size is None else data.size
        refusal = shrink_refusal(current.size, size)
        used = await self._dirs.measure(volume_id, user.id)
        if refusal is None and size > current.size:
            # What it holds already is on the disk: only the rest must be free.
            free = await asyncio.to_thread(self._dirs.free_bytes)
            refusal = room_refusal(size, free, used)
        if refusal is not None:
            raise Invalid(refusal, field="size")
        name = current.name if data.name is None else data.name
        updated = await self._store.update_network_volume(user.id, volume_id, name, size)
        if updated is None:
            raise NotFound(f"network volume {volume_id} not found")
        if updated.size > size:  # another update grew it meanwhile: this one would shrink it
            raise Invalid(shrink_refusal(updated.size, size) or "size", field="size")
        return VolumeReport(updated, used)

    async def delete(self, user: User, volume_id: str) -> None:
        """Its record, then its directory with everything in it. Refused (naming them) while
        an endpoint or a pod names it: its workers and the pod mount it, and would wait for
        ever on a volume that is gone."""
        users = await self._store.delete_network_volume(user.id, volume_id)
        if users is None:
            raise NotFound(f"network volume {volume_id} not found")
        if users:
            raise Conflict(users.refusal(volume_id))
        await self._usage_ended(UsageKind.NETWORK_VOLUME, volume_id)
        await asyncio.to_thread(self._dirs.remove, volume_id)

    async def remove_orphans(self) -> list[str]:
        """Directories that no volume's record names: a create or a delete that a crash cut
        in the middle (a directory is made before its record and removed after it), whose
        files nobody could reach or remove any more. Run as a replica begins leading. One
        changed in the last ``ORPHAN_GRACE_SECONDS`` is left: another replica sharing the
        volumes' root may be making its record now."""
        older_than = time.time() - ORPHAN_GRACE_SECONDS
        on_disk = await asyncio.to_thread(self._dirs.folders, older_than)
        if not on_disk:
            return []
        known = {volume.id for _, volume in await self._store.all_network_volumes()}
        # The pods' volumes have a folder of their own among the volumes (``pods``).
        orphans = sorted(v for v in on_disk - known if made_by_short_id(v))
        for volume_id in orphans:
            log.info("removing the directory of volume %s, which has no record", volume_id)
            await asyncio.to_thread(self._dirs.remove, volume_id)
        return orphans

    async def endpoints_using(self, user: User, volume_id: str) -> list[str]:
        """Ids of the user's endpoints attached to the volume, oldest first."""
        await self._volume(user, volume_id)
        return await self._store.endpoints_using_network_volume(user.id, volume_id)

    async def exists(self, user_id: str, volume_id: str) -> bool:
        return await self._store.get_network_volume(user_id, volume_id) is not None

    def path(self, volume_id: str) -> Path:
        """Where the volume's files are on this host (made or not)."""
        return self._dirs.path(volume_id)

    async def directory(self, user_id: str, volume_id: str) -> Path | None:
        """The absolute path a worker of ``user_id``'s endpoint mounts, or None when the user
        has no such volume. A directory gone from the disk (removed by hand, or a replica on
        another host without a shared ``SKIFF_VOLUMES_DIR``) is made again, empty, and said."""
        if not await self.exists(user_id, volume_id):
            return None
        if not await asyncio.to_thread(self._dirs.exists, volume_id):
            log.warning(
                "network volume %s: its directory %s was missing; made it again, empty",
                volume_id,
                self._dirs.path(volume_id),
            )
        path = await asyncio.to_thread(self._dirs.make, volume_id)
        return path.resolve()

    async def _volume(self, user: User, volume_id: str) -> NetworkVolume:
        volume = await self._store.get_network_volume(user.id, volume_id)
        if volume is None:
            raise NotFound(f"network volume {volume_id} not found")
        return volume

    async def _report(self, volume: NetworkVolume, owner: User) -> VolumeReport:
        return VolumeReport(volume, await self._dirs.measure(volume.id, owner.id))
