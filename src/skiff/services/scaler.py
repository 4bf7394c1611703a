"""The reconcile loop: make each endpoint's set of workers match what ``domain.scaling`` wants."""

from __future__ import annotations

import asyncio
import logging

from skiff.clock import Clock
from skiff.domain.endpoints import Endpoint
from skiff.domain.scaling import Limits, Load, decide
from skiff.domain.workers import WorkerState
from skiff.services.fleet import Fleet
from skiff.services.wakeups import Wakeups
from skiff.services.workers import Workers
from skiff.store.base import Store

log = logging.getLogger(__name__)

SCALER_KEY = "scaler"
#: The least time between two reconcile passes.
MIN_GAP_SECONDS = 0.05


class Scaler:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        wakeups: Wakeups,
        workers: Workers,
        fleet: Fleet,
        interval: float,
    ) -> None:
        self._store = store
        self._clock = clock
        self._wakeups = wakeups
        self._workers = workers
        self._fleet = fleet
        self._interval = interval

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        last_pass = float("-inf")
        while not self._wakeups.closing:
            # Every submission wakes the scaler; under a stream of them, passes would run back
            # to back. One per MIN_GAP_SECONDS reacts as fast as anyone can see and costs little;
            # a wake after a quiet spell passes at once (a scale-up from zero waits for nothing).
            gap = MIN_GAP_SECONDS - (loop.time() - last_pass)
            if gap > 0:
                await asyncio.sleep(gap)
            last_pass = loop.time()
            with self._wakeups.listen(SCALER_KEY) as event:
                try:
                    await self.reconcile_all()
                except Exception:
                    log.exception("the reconcile pass failed; trying again")
                await self._wakeups.wait(event, self._interval)

    async def reconcile_all(self) -> None:
        await self._fleet.reap_orphans()
        for endpoint in await self._store.list_endpoints(None):
            await self.reconcile(endpoint)

    async def reconcile(self, endpoint: Endpoint) -> None:
        counts = await self._store.job_counts(endpoint.id)
        spec = endpoint.spec
        now = self._clock.now()
        workers = await self._workers.of_endpoint(endpoint.id)
        if any(w.state in (WorkerState.IDLE, WorkerState.RUNNING) for w in workers):
            await self._fleet.healthy(endpoint.id)
        oldest = counts.oldest_queued_at
        decision = decide(
            Limits(
                workers_min=spec.workersMin,
                workers_max=spec.workersMax,
                idle_timeout_s=spec.idleTimeout,
                version=endpoint.version,
                scaler_type=spec.scalerType,
                scaler_value=spec.scalerValue,
                flashboot=spec.flashboot,
            ),
            Load(
                queued=counts.in_queue_normal,
                in_progress=counts.in_progress,
                oldest_wait_s=max(0.0, now - oldest) if oldest is not None else 0.0,
            ),
            workers,
            now,
        )
        by_id = {w.id: w for w in workers}
        for worker_id in decision.stop:
            worker = by_id.get(worker_id)
            if worker is not None:
                self._fleet.stop_worker(worker)
        for worker_id in decision.promote:
            await self._fleet.promote(by_id[worker_id])
        for worker_id in decision.demote:
            await self._fleet.demote(by_id[worker_id])
        if await self._store.get_endpoint(endpoint.id) is None:
            return  # deleted while this pass ran
        await self._fleet.retry_pending(endpoint)
        if decision.start and self._fleet.may_start(endpoint.id):
            for _ in range(decision.start):
                if await self._fleet.start_worker(endpoint) is None:
                    break
        if decision.start_standby and self._fleet.may_start(endpoint.id):
            await self._fleet.start_worker(endpoint, standby=True)
