"""Periodic enforcement of every time rule, on the injected clock:

- ``executionTimeout``: a running job past its deadline becomes TIMED_OUT and its worker is
  told to stop it;
- ``ttl`` and retention: a job past its ttl (whatever its state) or a finished job past its
  retention window is deleted; a running one's worker is told to stop it first;
- stop grace: a local worker that still holds a stopped job ``stop_grace`` seconds after it was
  told is ended (the scaler replaces it);
- leases: jobs whose worker stopped renewing them go back to the queue;
- silence: external workers that stopped calling in are forgotten;
- counts: the job-count and job-byte deltas are folded into the endpoint and user totals;
- webhook deliveries that ended (their payloads let go of then) are removed after a day.
"""

from __future__ import annotations

import logging

from attrs import define

from skiff.clock import Clock
from skiff.domain.jobs import JobStatus
from skiff.domain.workers import WorkerKind
from skiff.services.dispatch import Dispatch
from skiff.services.fleet import Fleet
from skiff.services.job_events import JobEvents
from skiff.services.wakeups import Wake, Wakeups
from skiff.services.workers import Workers
from skiff.store.base import Store

log = logging.getLogger(__name__)

#: Jobs deleted per pass at most, so one pass never holds the writer for long.
EXPIRE_BATCH = 2000
#: How long an ended webhook delivery's record (its status, attempts and last error) is kept.
ENDED_DELIVERY_KEPT_SECONDS = 86_400.0
#: Ended deliveries removed per pass at most.
PRUNE_BATCH = 1000


@define(eq=False, repr=False, slots=False)
class Reaper:
    _store: Store
    _clock: Clock
    _wakeups: Wakeups
    _events: JobEvents
    _workers: Workers
    _dispatch: Dispatch
    _fleet: Fleet
    _interval: float
    _worker_silence: float
    _stop_grace: float

    async def run(self) -> None:
        await self._wakeups.repeat(self.pass_once, self._interval, "the reaper pass", log)

    async def pass_once(self) -> None:
        now = self._clock.now()
        for job in await self._store.time_out_jobs(now):
            # The store signalled its worker to stop it in the same transaction.
            self._events.finished(job, stop_worker=True)
        while True:
            expired = await self._store.expire_jobs(now, EXPIRE_BATCH)
            for job in expired:
                # Gone rather than final: its waiters wake to find it no longer there. One
                # removed while it ran was billed to its caller in the removal (the store).
                self._wakeups.notify(Wake.job(job.id))
                if job.status is JobStatus.IN_PROGRESS and job.worker_id is not None:
                    self._dispatch.request_stop(job.worker_id)
            if len(expired) < EXPIRE_BATCH:
                break
        for worker in await self._workers.overdue_stops(self._stop_grace):
            if worker.kind is WorkerKind.LOCAL:
                log.warning(
                    "worker %s did not let go of a stopped job within %.0f s; ending it",
                    worker.id,
                    self._stop_grace,
                )
                self._fleet.stop_worker(worker)
        await self._dispatch.release_expired_leases()
        await self._dispatch.forget_silent_workers(self._worker_silence)
        # Keep the job-count and job-byte deltas few, so reading them stays cheap.
        await self._store.fold_job_counts()
        await self._store.prune_webhook_deliveries(now - ENDED_DELIVERY_KEPT_SECONDS, PRUNE_BATCH)
