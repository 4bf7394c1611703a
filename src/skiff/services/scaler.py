"""The reconcile loop: make each endpoint's set of workers match what ``domain.scaling`` wants.

An endpoint whose owner is disabled wants none: its workers are stopped as a scale-down stops
them and none starts until the owner is enabled again. Who is disabled is read from the store
once a pass, for every endpoint, so that whichever replica leads acts on what any replica
recorded, after a restart too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Set

from attrs import define

from skiff.clock import Clock
from skiff.domain.endpoints import Endpoint, EndpointType
from skiff.domain.scaling import Limits, Load, decide, overdue_starts
from skiff.domain.workers import Worker, WorkerState
from skiff.services.balancer import Balancer
from skiff.services.fleet import Fleet
from skiff.services.wakeups import Wake, Wakeups
from skiff.services.workers import Workers
from skiff.store.base import Store

log = logging.getLogger(__name__)

#: The least time between two reconcile passes, once a burst of them is spent.
MIN_GAP_SECONDS = 0.05
#: How many passes may run back to back after a quiet spell.
BURST = 3


class Passes:
    """A token bucket for reconcile passes: ``BURST`` at once, then one per
    ``MIN_GAP_SECONDS`` (times are the event loop's clock)."""

    def __init__(self, now: float) -> None:
        self._tokens = float(BURST)
        self._at = now

    def _refill(self, now: float) -> None:
        self._tokens = min(float(BURST), self._tokens + (now - self._at) / MIN_GAP_SECONDS)
        self._at = now

    def wait_before_next(self, now: float) -> float:
        """Seconds to wait before the next pass may run (0: at once)."""
        self._refill(now)
        return max(0.0, (1 - self._tokens) * MIN_GAP_SECONDS)

    def take(self, now: float) -> None:
        self._refill(now)
        self._tokens = max(0.0, self._tokens - 1)


@define(eq=False, repr=False, slots=False)
class Scaler:
    _store: Store
    _clock: Clock
    _wakeups: Wakeups
    _workers: Workers
    _fleet: Fleet
    #: Load-balancing endpoints' requests, this replica's and the others'.
    _balancer: Balancer
    _interval: float
    #: A worker that has not called in this long after its start is a failed start.
    _start_timeout: float = 600.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        # Every submission wakes the scaler; under a stream of them, passes would run back to
        # back. A few passes may follow each other at once (a new endpoint's pass, then its
        # first job's: a scale-up from zero waits for nothing), then one per MIN_GAP_SECONDS,
        # which reacts as fast as anyone can see and costs little.
        passes = Passes(loop.time())
        while not self._wakeups.closing:
            wait = passes.wait_before_next(loop.time())
            if wait > 0:
                await asyncio.sleep(wait)
            passes.take(loop.time())
            with self._wakeups.listen(Wake.SCALER) as event:
                try:
                    await self.reconcile_all()
                except Exception:
                    log.exception("the reconcile pass failed; trying again")
                await self._wakeups.wait(event, self._interval)

    async def reconcile_all(self) -> None:
        await self._fleet.reap_orphans()
        disabled = await self._store.disabled_user_ids()
        for endpoint in await self._store.list_endpoints(None):
            try:
                await self.reconcile(endpoint, disabled)
            except Exception:
                # One endpoint's trouble (its tenant's workers are anyone's code) must not
                # hold back the endpoints after it: each is tried again on the next pass.
                log.exception("endpoint %s: its reconcile failed; trying again", endpoint.id)

    async def _load(self, endpoint: Endpoint, workers: list[Worker], now: float) -> Load:
        if endpoint.spec.type is EndpointType.LB:
            # Requests waiting for a worker count as queued, those passed to one as in
            # progress, every replica's; a busy worker counts as at least one request.
            demand = await self._balancer.total_demand(endpoint.id)
            busy = sum(1 for w in workers if w.state is WorkerState.RUNNING)
            return Load(queued=demand.waiting, in_progress=max(demand.in_flight, busy))
        counts = await self._store.job_counts(endpoint.id)
        oldest = counts.oldest_queued_at
        return Load(
            queued=counts.in_queue_normal,
            in_progress=counts.in_progress,
            oldest_wait_s=max(0.0, now - oldest) if oldest is not None else 0.0,
        )

    async def reconcile(self, endpoint: Endpoint, disabled: Set[str] | None = None) -> None:
        """``disabled``: the ids of the users disabled now, read once for the whole pass
        (read here when not given)."""
        if disabled is None:
            disabled = await self._store.disabled_user_ids()
        owner_disabled = endpoint.userId in disabled
        spec = endpoint.spec
        now = self._clock.now()
        workers = await self._workers.of_endpoint(endpoint.id)
        # A disabled owner's endpoint wants no worker, whatever its load.
        load = Load(0, 0) if owner_disabled else await self._load(endpoint, workers, now)
        await self._fleet.healthy(endpoint.id, workers)
        # Ended before the decision, which then sees them stopping (their room still taken
        # until their process is gone) and replaces them once the back-off allows. A disabled
        # owner's are refused when they call in: not a failed start, only stopped below.
        if not owner_disabled:
            for overdue in overdue_starts(workers, now, self._start_timeout):
                await self._fleet.end_failed_start(overdue)
        decision = decide(
            Limits(
                workers_min=spec.workersMin,
                workers_max=spec.workersMax,
                idle_timeout_s=spec.idleTimeout,
                version=endpoint.version,
                scaler_type=spec.scalerType,
                scaler_value=spec.scalerValue,
                flashboot=spec.flashboot,
                owner_disabled=owner_disabled,
            ),
            load,
            workers,
            now,
        )
        by_id = {w.id: w for w in workers}
        for worker_id in decision.stop:
            worker = by_id.get(worker_id)
            if worker is not None:
                self._fleet.stop_worker(worker, for_owner=owner_disabled)
        for worker_id in decision.promote:
            await self._fleet.promote(by_id[worker_id])
        for worker_id in decision.demote:
            await self._fleet.demote(by_id[worker_id])
        if spec.type is EndpointType.LB and (decision.stop or decision.promote or decision.demote):
            # Its requests pick from a list of ready workers read at most half a second ago:
            # a promoted one takes the next request, a stopped one none.
            self._balancer.changed(endpoint.id)
        if owner_disabled:
            return  # nothing starts, and a throttled worker is given no GPU
        if await self._store.get_endpoint(endpoint.id) is None:
            return  # deleted while this pass ran
        await self._fleet.retry_pending(endpoint)
        if decision.start and self._fleet.may_start(endpoint.id):
            for _ in range(decision.start):
                if await self._fleet.start_worker(endpoint) is None:
                    break
        if decision.start_standby and self._fleet.may_start(endpoint.id):
            await self._fleet.start_worker(endpoint, standby=True)
