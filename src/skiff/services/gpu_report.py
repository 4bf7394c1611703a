"""Who holds each GPU of this host, serverless workers and pods alike, as a user may see it:
their own workers and pods by name, anyone else's only as "in use" (the console's pods page;
``skiff gpus`` is the operator's view of everything)."""

from __future__ import annotations

from dataclasses import dataclass

from skiff.domain.gpu_holders import gpu_holders
from skiff.domain.gpus import Gpu
from skiff.domain.users import User
from skiff.services.gpus import GpuPool
from skiff.store.base import Store

#: What a GPU held by someone else's worker or pod shows.
ANOTHER_USERS = "in use by another user"


@dataclass(frozen=True, slots=True)
class GpuRow:
    gpu: Gpu
    #: ``endpoint/worker (state)``, ``pod <id> (<name>)``, ``ANOTHER_USERS``; None: free.
    holder: str | None


class GpuReport:
    def __init__(self, store: Store, pool: GpuPool) -> None:
        self._store = store
        #: The inventory as it is now (a cluster's changes as machines come and go).
        self._pool = pool

    async def rows(self, user: User) -> list[GpuRow]:
        inventory = self._pool.gpus
        if not inventory:
            return []
        owners = {e.id: e.userId for e in await self._store.list_endpoints(None)}
        workers = await self._store.list_workers(None)
        pods = await self._store.list_pods(None)

        def mine(owner: str | None) -> bool:
            return user.is_admin or owner == user.id

        shown = gpu_holders(
            [w for w in workers if mine(owners.get(w.endpoint_id))],
            [p for p in pods if mine(p.userId)],
        )
        others = gpu_holders(
            [w for w in workers if not mine(owners.get(w.endpoint_id))],
            [p for p in pods if not mine(p.userId)],
        )
        return [
            GpuRow(gpu, shown.get(gpu.index) or (ANOTHER_USERS if gpu.index in others else None))
            for gpu in inventory
        ]
