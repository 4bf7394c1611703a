"""What this replica's workers and pods write to its disk, held to their template's
``containerDiskInGb`` and to the size of the volumes they mount.

A process worker's container disk is its home under the data directory, the disk the database
is on, which nothing bounds while the worker runs; a container's is its writable layer, which
its storage driver bounds only where it can (not overlay2 on ext4, the usual case). So, as the
kubelet does for a pod's ephemeral storage, this replica measures both every
``SKIFF_DISK_CHECK_SECONDS`` and evicts what is over: what a home holds and how many files, what
a layer holds (its daemon's ``SizeRw``; a layer its driver bounds is left to the driver). A
disk has so many inodes, which a tenant's empty files could take all of, so each GB of a home's
budget holds ``FILES_PER_GB`` files, as ext4 makes them (a daemon does not count a layer's).

A container's layer is its own: each is held to one disk, and one over it is ended with the
others of its endpoint that are, as one failed start. For process workers the unit is the
endpoint, not the worker: in the sandbox an endpoint's workers share one
directory of homes (``Fleet.homes``, with the Flash worker's dependency cache beside them), so
a worker can write outside its own. Their budget is ``containerDiskInGb`` for each of the
endpoint's process workers, one disk's worth when none runs. Over it, the endpoint's workers on
this replica are ended as one failed start (recorded, with its back-off), their homes going as
each exits, and what no worker's home holds (a cache, what a worker wrote beside its home) is
removed, so that the next workers start within their budget.

A pod run as a process is a machine of its own: its home alone is its container disk, held to
its own ``containerDiskInGb``. Over it, its instance is ended as one that exited, its disk
wiped at once, and it starts again after the back-off.

Volumes are disks of a size too, and a directory has no quota: a pod's own volume is held to
its ``volumeInGb``, and a network volume mounted here to its ``size``. Over it, what mounts it
on this replica is ended (the endpoint's workers as one failed start, each pod as one that
exited), and its files are kept: its user grows it or removes some. Containers mount the same
directories (``SKIFF_PROVIDER=docker``), so their volumes are held the same way.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from attrs import define

from skiff.domain.endpoints import Endpoint
from skiff.domain.workers import WorkerKind
from skiff.providers.base import layer_bytes_of
from skiff.services.fleet import Fleet
from skiff.services.pod_runner import PodRunner
from skiff.services.volumes import Volumes
from skiff.services.wakeups import Wakeups
from skiff.services.workers import Workers
from skiff.store.base import Store
from skiff.tenant_trees import allocated_bytes, file_count, remove_tree

log = logging.getLogger(__name__)

GIB = 1024**3
#: Files a container disk of one GB may hold: what ext4 makes by default (an inode for each
#: 16 KiB), so that an endpoint within its bytes takes no more of the host's inodes than a
#: disk of its size would have, however small its files.
FILES_PER_GB = 65_536


def _over(
    used: int, files: int, limit_gb: int, disks: int = 1, name: str = "containerDiskInGb"
) -> str | None:
    """Why ``used`` bytes in ``files`` files is over ``disks`` disks of ``limit_gb`` each (the
    field ``name`` sets it); None when it is within them."""
    if used > limit_gb * GIB * disks:
        return f"{used / GIB:.2f} GB, over {name} ({limit_gb} GB)"
    if files > limit_gb * FILES_PER_GB * disks:
        return (
            f"{files:,} files, over the {limit_gb * FILES_PER_GB:,} that {name} "
            f"({limit_gb} GB) holds ({FILES_PER_GB:,} a GB, as ext4 makes them)"
        )
    return None


async def _measure(root: Path) -> tuple[int, int]:
    """The bytes and the files below ``root``, counted in threads (they may take long)."""
    return (
        await asyncio.to_thread(allocated_bytes, root),
        await asyncio.to_thread(file_count, root),
    )


@dataclass
class _Holders:
    """What runs on this replica with one network volume mounted."""

    endpoints: list[str] = field(default_factory=list)
    #: Each pod with the instance it runs, which an eviction names.
    pods: list[tuple[str, int]] = field(default_factory=list)


@define(eq=False, repr=False, slots=False)
class DiskWatch:
    _store: Store
    _workers: Workers
    _fleet: Fleet
    #: Runs this replica's pods as processes: each one's home is held to its own
    #: ``containerDiskInGb``, its own volume to its ``volumeInGb``.
    _pods: PodRunner
    #: Keeps the network volumes, each held to its ``size`` while mounted here.
    _volumes: Volumes
    _wakeups: Wakeups
    _interval: float

    async def run(self) -> None:
        await self._wakeups.repeat(self.pass_once, self._interval, "the disk check", log)

    async def pass_once(self) -> None:
        # Each check reports the network volume its endpoint or pod mounts here, so that the
        # volumes are measured after, each once, without reading the records again.
        holders: dict[tuple[str, str], _Holders] = {}
        # Process workers leave homes here; containers none, but they mount volumes too.
        homes = await asyncio.to_thread(_names_in, self._fleet.homes_root())
        # Containers' own layers, measured by their daemon in one call each (none: processes).
        layers = await layer_bytes_of(self._fleet.provider)
        for endpoint_id in sorted(set(homes) | self._fleet.endpoints_held()):
            try:
                await self._check(endpoint_id, holders, layers)
            except Exception:
                # One endpoint's trouble (its store read, a count) holds up no other's check.
                log.exception("the disk check of endpoint %s failed", endpoint_id)
        pod_layers = await layer_bytes_of(self._pods.provider)
        for pod_id in self._pods.running_ids():
            try:
                await self._check_pod(pod_id, holders, pod_layers)
            except Exception:
                log.exception("the disk check of pod %s failed", pod_id)
        for (user_id, volume_id), held in holders.items():
            try:
                await self._check_volume(user_id, volume_id, held)
            except Exception:
                log.exception("the disk check of network volume %s failed", volume_id)

    async def _check_volume(self, user_id: str, volume_id: str, held: _Holders) -> None:
        """A network volume is a disk of its ``size``: what mounts it on this replica is ended
        when it holds more, as one failed start each, and its files are kept."""
        volume = await self._store.get_network_volume(user_id, volume_id)
        if volume is None:
            return
        over = _over(*await _measure(self._volumes.path(volume_id)), volume.size, name="its size")
        if over is None:
            return
        why = (
            f"network volume {volume_id} held {over}: what mounts it was ended; grow the volume "
            "or remove files from it"
        )
        for endpoint_id in held.endpoints:
            await self._evict(self._fleet.holding_homes(endpoint_id), why)
        for pod_id, instance in held.pods:
            await self._pods.evict(pod_id, instance, why)

    async def _check_pod(
        self, pod_id: str, holders: dict[tuple[str, str], _Holders], layers: dict[str, int]
    ) -> None:
        """A pod is a machine of its own: its home alone is its container disk (a container's:
        its layer, in ``layers``), and its own volume a disk of ``volumeInGb``. A pod still
        running after that holds its network volume, added to ``holders``."""
        instance = self._pods.instance(pod_id)
        pod = await self._store.find_pod(pod_id)
        if instance is None or pod is None:
            return
        if limit_gb := pod.spec.containerDiskInGb:
            if pod_id in layers:
                over = _over(layers[pod_id], 0, limit_gb)
            else:
                over = _over(*await _measure(self._pods.home(pod_id)), limit_gb)
            if over is not None:
                why = f"its container disk held {over}: it was ended and its disk wiped"
                await self._pods.evict(pod_id, instance, why)
                return
        if pod.spec.networkVolumeId:
            held = holders.setdefault((pod.userId, pod.spec.networkVolumeId), _Holders())
            held.pods.append((pod_id, instance))
        elif pod.spec.volumeInGb:
            # A network volume is mounted in place of the pod's own (``PodRunner._launch``).
            over = _over(
                *await _measure(self._pods.volume_dir(pod_id)),
                pod.spec.volumeInGb,
                name="volumeInGb",
            )
            if over is not None:
                why = f"its volume held {over}: it was ended; remove files or grow the volume"
                await self._pods.evict(pod_id, instance, why)

    async def _check(
        self, endpoint_id: str, holders: dict[tuple[str, str], _Holders], layers: dict[str, int]
    ) -> None:
        """The endpoint's homes against its budget, and each of its containers' layers
        (``layers``) against its own; an endpoint whose workers still run here after that
        holds its network volume, added to ``holders``."""
        endpoint = await self._store.get_endpoint(endpoint_id)
        if endpoint is None:
            return  # the fleet removes a deleted endpoint's homes
        template = await self._store.get_template(endpoint.userId, endpoint.spec.templateId)
        if (limit_gb := template.containerDiskInGb if template is not None else 0) and (
            await self._check_homes(endpoint, limit_gb)
            or await self._check_layers(endpoint_id, limit_gb, layers)
        ):
            return
        volume_id = endpoint.spec.networkVolumeId
        if volume_id and self._fleet.holding_homes(endpoint_id):
            holders.setdefault((endpoint.userId, volume_id), _Holders()).endpoints.append(
                endpoint_id
            )

    async def _check_layers(self, endpoint_id: str, limit_gb: int, layers: dict[str, int]) -> bool:
        """Whether any of the endpoint's containers here wrote more than ``limit_gb`` to its
        own layer, and those were ended for it (as one failed start, the largest named). Each
        container's layer is its own, so each is held to one disk, and only bytes count: its
        daemon does not count its files."""
        over = sorted(
            (used, wid)
            for wid in self._fleet.holding_homes(endpoint_id)
            if (used := layers.get(wid)) is not None and _over(used, 0, limit_gb) is not None
        )
        if not over:
            return False
        largest = _over(over[-1][0], 0, limit_gb)
        await self._evict([wid for _, wid in reversed(over)], f"its container disk held {largest}")
        return True

    async def _check_homes(self, endpoint: Endpoint, limit_gb: int) -> bool:
        """Whether the endpoint's homes were over its ``containerDiskInGb`` of ``limit_gb``,
        and its workers here ended for it."""
        endpoint_id = endpoint.id
        homes = self._fleet.homes(endpoint_id)
        used, files = await _measure(homes)
        holding = self._fleet.holding_homes(endpoint_id)
        # Every process worker counts, another replica's too: one on this host shares the
        # directory (and one elsewhere only makes the budget kinder). A record without a
        # process (throttled, unhealthy) writes nothing and brings no disk.
        running = set(holding) | {
            w.id
            for w in await self._workers.of_endpoint(endpoint_id)
            if w.kind is WorkerKind.LOCAL and w.pid is not None
        }
        over = _over(used, files, limit_gb, max(1, len(running)))
        if over is None:
            return False
        if holding:
            why = (
                f"the endpoint's {len(running)} worker(s) on this host wrote into their homes "
                f"{over} for each"
            )
            await self._evict(holding, why)
        # What no worker's home holds goes too (a cache, what a worker wrote beside its
        # home): left, it would count against the next workers, which never wrote it.
        await self._clear_leftovers(endpoint_id, homes, set(holding))
        return True

    async def _evict(self, worker_ids: list[str], why: str) -> None:
        """End the workers, as one failed start: one eviction, one step of the back-off."""
        workers = [w for wid in worker_ids if (w := await self._workers.get(wid)) is not None]
        if not workers:
            return
        first, *rest = workers
        await self._fleet.end_with_failure(first, why)
        for worker in rest:
            self._fleet.stop_worker(worker)

    async def _clear_leftovers(self, endpoint_id: str, homes: Path, ending: set[str]) -> None:
        """Remove what no recorded worker of the endpoint holds as its home. Listed before the
        workers are read: a worker recorded after that read makes its home after the listing,
        so its home is not in it. Left for the next pass if a worker other than those being
        ended is started meanwhile, as it may use what is shared (a cache)."""
        names = await asyncio.to_thread(_names_in, homes)
        recorded = {w.id for w in await self._workers.of_endpoint(endpoint_id)}
        gone = [homes / name for name in names if name not in recorded]
        if not gone or set(self._fleet.holding_homes(endpoint_id)) - ending:
            return
        log.warning(
            "endpoint %s: over containerDiskInGb; removing %d entries of its workers' homes "
            "that no worker holds",
            endpoint_id,
            len(gone),
        )
        for path in gone:
            await asyncio.to_thread(remove_tree, path)


def _names_in(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []
