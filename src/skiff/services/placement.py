"""Why an endpoint's workers are held back, read from what any replica can see: the endpoint,
its owner, its worker records, its recorded start failure, the GPU inventory and the worker
limit."""

from __future__ import annotations

from attrs import define

from skiff.domain.endpoints import Endpoint
from skiff.domain.placement import Blocker, endpoint_warnings, why_blocked
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.services.fleet import Fleet
from skiff.services.gpus import GpuPool
from skiff.store.base import Store


@define(eq=False, repr=False, slots=False)
class Placement:
    _store: Store
    _gpus: GpuPool
    _fleet: Fleet

    def warnings(self, endpoint: Endpoint) -> list[str]:
        """What the answer to saving ``endpoint`` warns of (``domain.placement``)."""
        return endpoint_warnings(endpoint.spec, self._gpus.gpus)

    async def why(self, endpoint: Endpoint, workers: list[Worker] | None = None) -> Blocker | None:
        """What keeps the endpoint's workers from running, None when nothing does.
        ``workers``: its records, when the caller has read them already."""
        if workers is None:
            workers = await self._store.list_workers(endpoint.id)
        throttled = sum(1 for w in workers if w.state is WorkerState.THROTTLED)
        failure = await self._fleet.failure(endpoint.id)
        # The server's processes, counted only when some worker waits (a read of every record).
        running = 0
        if throttled:
            running = sum(
                1
                for w in await self._store.list_workers(None)
                if w.kind is WorkerKind.LOCAL and not w.is_pending
            )
        owner = await self._store.get_user(endpoint.userId)
        return why_blocked(
            endpoint.spec,
            self._gpus.gpus,
            failure=failure.error if failure is not None else None,
            throttled=throttled,
            running=running,
            limit=self._fleet.worker_limit,
            unsandboxed=await self._fleet.unsandboxed(endpoint),
            owner_disabled=owner is not None and owner.disabled,
        )
