"""The register of workers: what each is doing, kept in the store and mirrored in memory so the
hot paths (job-take, job-done) do not read it back on every request."""

from __future__ import annotations

from skiff.clock import Clock
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.errors import Conflict
from skiff.store.base import Store


class Workers:
    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._workers: dict[str, Worker] = {}
        self._held: dict[str, set[str]] = {}
        # worker id -> {job id: when the worker was told to stop it}
        self._stops: dict[str, dict[str, float]] = {}

    async def load(self) -> list[Worker]:
        """Read the register at start; returns what was there (the caller reconciles it)."""
        workers = await self._store.list_workers(None)
        for worker in workers:
            self._workers[worker.id] = worker
            self._held[worker.id] = set(await self._store.jobs_of_worker(worker.id))
        return workers

    async def add(self, worker: Worker) -> Worker:
        self._workers[worker.id] = worker
        self._held[worker.id] = set()
        await self._store.save_worker(worker)
        return worker

    def get(self, worker_id: str) -> Worker | None:
        return self._workers.get(worker_id)

    def of_endpoint(self, endpoint_id: str) -> list[Worker]:
        return [w for w in self._workers.values() if w.endpoint_id == endpoint_id]

    def all(self) -> list[Worker]:
        return list(self._workers.values())

    def held(self, worker_id: str) -> set[str]:
        return self._held.setdefault(worker_id, set())

    async def seen(self, endpoint_id: str, worker_id: str, version: int) -> Worker:
        """A worker asked for work or pinged. One we did not start is an external worker."""
        now = self._clock.now()
        worker = self._workers.get(worker_id)
        if worker is None:
            worker = Worker(
                id=worker_id,
                endpoint_id=endpoint_id,
                kind=WorkerKind.EXTERNAL,
                state=WorkerState.IDLE,
                version=version,
                started_at=now,
                last_seen=now,
                idle_since=now,
            )
            return await self.add(worker)
        if worker.endpoint_id != endpoint_id:
            raise Conflict(f"worker id {worker_id} is in use by another endpoint")
        worker.last_seen = now
        if worker.state is WorkerState.INITIALIZING:
            await self.set_state(worker, WorkerState.IDLE)
        return worker

    async def set_state(self, worker: Worker, state: WorkerState) -> None:
        if worker.state is state:
            return
        if state is WorkerState.IDLE:
            worker.idle_since = self._clock.now()
        elif state is WorkerState.RUNNING:
            worker.idle_since = None
        worker.state = state
        await self._store.save_worker(worker)

    async def jobs_taken(self, worker: Worker, job_ids: list[str]) -> None:
        self.held(worker.id).update(job_ids)
        if worker.state in (WorkerState.IDLE, WorkerState.INITIALIZING):
            await self.set_state(worker, WorkerState.RUNNING)

    def note_stop(self, worker_id: str, job_id: str) -> None:
        if job_id in self.held(worker_id):
            self._stops.setdefault(worker_id, {}).setdefault(job_id, self._clock.now())

    def overdue_stops(self, grace: float) -> list[Worker]:
        """Workers told to stop a job more than ``grace`` seconds ago that still hold it."""
        now = self._clock.now()
        overdue = []
        for worker_id, stops in self._stops.items():
            held = self.held(worker_id)
            worker = self._workers.get(worker_id)
            if worker is not None and any(
                job_id in held and now - since > grace for job_id, since in stops.items()
            ):
                overdue.append(worker)
        return overdue

    async def jobs_released(self, worker: Worker, job_ids: list[str]) -> None:
        held = self.held(worker.id)
        held.difference_update(job_ids)
        stops = self._stops.get(worker.id)
        if stops is not None:
            for job_id in job_ids:
                stops.pop(job_id, None)
            if not stops:
                del self._stops[worker.id]
        if not held and worker.state is WorkerState.RUNNING:
            await self.set_state(worker, WorkerState.IDLE)

    async def mark_recycle(self, worker: Worker) -> None:
        if not worker.recycle:
            worker.recycle = True
            await self._store.save_worker(worker)

    async def save(self, worker: Worker) -> None:
        await self._store.save_worker(worker)

    async def remove(self, worker_id: str) -> None:
        self._workers.pop(worker_id, None)
        self._held.pop(worker_id, None)
        self._stops.pop(worker_id, None)
        await self._store.delete_worker(worker_id)
