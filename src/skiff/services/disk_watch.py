"""What this replica's process workers write to its disk, held to their template's
``containerDiskInGb``.

A container's writable layer is bounded by its storage driver where the driver can; a process
worker's container disk is its home under the data directory, the disk the database is on,
which nothing bounds while the worker runs. So, as the kubelet does for a pod's ephemeral
storage, this replica measures it every ``SKIFF_DISK_CHECK_SECONDS`` and evicts what is over.

The unit is the endpoint, not the worker: in the sandbox an endpoint's workers share one
directory of homes (``Fleet.homes``, with the Flash worker's dependency cache beside them), so
a worker can write outside its own. Their budget is ``containerDiskInGb`` for each of the
endpoint's workers this replica runs. Over it, every one of them is ended, with the failure
recorded (and the back-off of a failed start), and their homes go as each exits; what is left
in the directory once none runs (a cache, or what a worker wrote beside its home) is removed
when it alone is over one container disk's worth, so the next workers start within budget.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from skiff.domain.workers import WorkerKind, WorkerState
from skiff.services.fleet import Fleet
from skiff.services.wakeups import Wakeups
from skiff.services.workers import Workers
from skiff.store.base import Store
from skiff.tenant_trees import allocated_bytes, remove_tree

log = logging.getLogger(__name__)

GIB = 1024**3


class DiskWatch:
    def __init__(
        self, store: Store, workers: Workers, fleet: Fleet, wakeups: Wakeups, interval: float
    ) -> None:
        self._store = store
        self._workers = workers
        self._fleet = fleet
        self._wakeups = wakeups
        self._interval = interval

    async def run(self) -> None:
        await self._wakeups.repeat(self.pass_once, self._interval, "the disk check", log)

    async def pass_once(self) -> None:
        root = self._fleet.homes_root()
        names = await asyncio.to_thread(_names_in, root)
        for endpoint_id in names:
            await self._check(endpoint_id)

    async def _check(self, endpoint_id: str) -> None:
        limit_gb = await self._limit_gb(endpoint_id)
        if limit_gb is None:
            return
        homes = self._fleet.homes(endpoint_id)
        used = await asyncio.to_thread(allocated_bytes, homes)
        holding = self._fleet.holding_homes(endpoint_id)
        # Every process worker recorded counts, another replica's too: one on this host
        # shares the directory (and one elsewhere only makes the budget kinder).
        running = set(holding) | {
            w.id
            for w in await self._workers.of_endpoint(endpoint_id)
            if w.kind is WorkerKind.LOCAL and w.state is not WorkerState.UNHEALTHY
        }
        if used <= limit_gb * GIB * max(1, len(running)):
            return
        if not holding:
            await self._clear_leftovers(endpoint_id, homes, used, limit_gb)
            return
        why = (
            f"the endpoint's {len(running)} worker(s) on this host wrote {used / GIB:.2f} GB "
            f"into their homes, over containerDiskInGb ({limit_gb} GB) for each"
        )
        for worker_id in holding:
            worker = await self._workers.get(worker_id)
            if worker is not None:
                await self._fleet.end_with_failure(worker, why)

    async def _limit_gb(self, endpoint_id: str) -> int | None:
        """The endpoint's ``containerDiskInGb``; None for none (0), or an endpoint or template
        no longer there (the fleet removes a deleted endpoint's homes)."""
        endpoint = await self._store.get_endpoint(endpoint_id)
        if endpoint is None:
            return None
        template = await self._store.get_template(endpoint.userId, endpoint.spec.templateId)
        if template is None or not template.containerDiskInGb:
            return None
        return template.containerDiskInGb

    async def _clear_leftovers(
        self, endpoint_id: str, homes: Path, used: int, limit_gb: int
    ) -> None:
        """Remove what no worker of the endpoint holds. Listed before the workers are read: a
        worker recorded after that read makes its home after the listing, so it is not in it."""
        names = await asyncio.to_thread(_names_in, homes)
        recorded = {w.id for w in await self._workers.of_endpoint(endpoint_id)}
        gone = [homes / name for name in names if name not in recorded]
        log.warning(
            "endpoint %s: %.2f GB left in its workers' homes with none running, over "
            "containerDiskInGb (%d GB); removing %d entries",
            endpoint_id,
            used / GIB,
            limit_gb,
            len(gone),
        )
        for path in gone:
            await asyncio.to_thread(remove_tree, path)


def _names_in(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []
