"""The job interface's behaviour: submit, wait, read, stream, cancel, retry, purge, health."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from attrs import define
from cachetools import TTLCache

from skiff.clock import Clock
from skiff.domain.endpoints import Endpoint, EndpointType
from skiff.domain.health import Health
from skiff.domain.jobs import FINAL_STATES, Job, JobRequest, JobStatus, retention_ms
from skiff.domain.placement import Blocker, for_caller
from skiff.domain.streams import StreamChunk
from skiff.domain.workers import Worker, WorkerState
from skiff.errors import Forbidden, Invalid, NotFound
from skiff.ids import job_id
from skiff.services.disk_reserve import DiskReserve, job_bytes
from skiff.services.job_events import JobEvents
from skiff.services.job_room import JobRoom
from skiff.services.wakeups import Wake, Wakeups
from skiff.store.base import Store

#: How long ``blocker`` reuses a reading of what keeps an endpoint's workers from running.
BLOCKER_READ_SECONDS = 1.0
#: Readings kept at most (one per endpoint asked about); past this many the oldest go first,
#: deleted endpoints' readings among them.
MAX_BLOCKERS_KEPT = 4096


@dataclass(frozen=True, slots=True)
class StreamRead:
    job: Job
    chunks: list[StreamChunk]


#: Why an endpoint's workers are held back, given its worker records (``Placement.why``).
WhyBlocked = Callable[[Endpoint, list[Worker]], Awaitable[Blocker | None]]
#: Refuses a webhook URL (first) that a user (second, the submitter) names and a delivery must
#: not reach (raises ``Invalid``).
WebhookGuard = Callable[[str, str], Awaitable[None]]


@define(eq=False, repr=False, slots=False)
class Jobs:
    _store: Store
    _clock: Clock
    _wakeups: Wakeups
    _events: JobEvents
    #: Answers ``health`` and the answers about queued jobs.
    _placement: WhyBlocked
    _webhook_guard: WebhookGuard
    #: Refuses new jobs while the database's disk is nearly full (None: never).
    _reserve: DiskReserve | None = None
    #: Refuses a user's new jobs while their jobs hold their share of the database.
    _room: JobRoom | None = None

    def __attrs_post_init__(self) -> None:
        #: endpoint id -> what blocked its workers, for ``blocker``; on the injected clock.
        self._blockers: TTLCache[str, Blocker | None, float] = TTLCache(
            maxsize=MAX_BLOCKERS_KEPT, ttl=BLOCKER_READ_SECONDS, timer=self._clock.now
        )

    async def submit(
        self, endpoint: Endpoint, request: JobRequest, sync: bool, wait_ms: int | None = None
    ) -> Job:
        """Queue a job (``domain.jobs.parse_job_request`` reads a request from its body)."""
        if endpoint.spec.type is EndpointType.LB:
            # Its workers take no jobs: a queued one would wait for ever.
            raise Invalid(
                f"endpoint {endpoint.id} is a load-balancing endpoint: it takes no jobs; send "
                f"requests to /lb/{endpoint.id}/ and the paths its workers serve"
            )
        if request.webhook is not None:
            await self._webhook_guard(request.webhook, endpoint.caller or endpoint.userId)
        if self._room is not None:
            await self._room.admit(
                endpoint.caller or endpoint.userId,
                len(request.input_json)
                + len(request.webhook or "")
                + len(request.s3_config_json or ""),
            )
        if self._reserve is not None:
            self._reserve.admit(
                job_bytes(request.input_json, request.webhook, request.s3_config_json)
            )
        job = Job(
            id=job_id(sync),
            endpoint_id=endpoint.id,
            status=JobStatus.IN_QUEUE,
            input_json=request.input_json,
            execution_timeout_ms=request.policy.execution_timeout_ms,
            ttl_ms=request.policy.ttl_ms,
            low_priority=request.policy.low_priority,
            webhook=request.webhook,
            s3_config_json=request.s3_config_json,
            submitted_at=self._clock.now(),
            retention_ms=retention_ms(sync, wait_ms),
            caller_id=endpoint.caller,
        )
        job.expires_at = job.submitted_at + job.ttl_ms / 1000
        await self._store.insert_job(job, endpoint.userId)
        # One waiting take for one job: waking them all would cost each of the others an
        # empty claim (a write); a woken take that cannot claim passes it on (dispatch.py).
        self._wakeups.notify_some(Wake.endpoint(endpoint.id), 1)
        if not job.low_priority:
            self._wakeups.notify(Wake.SCALER)
        return job

    async def wait_until_final(
        self, endpoint: Endpoint, job_id: str, timeout: float, submitted: Job | None = None
    ) -> Job:
        """The job once it is final, or as it is when ``timeout`` seconds have passed.

        ``submitted``: the job as the caller's own ``submit`` just returned it, with no await
        since. Nothing can have taken it further before the wait below is listening, so it
        stands in for the first read (a ``/runsync`` reads its job once, when it is done)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        with self._events.awaiting(job_id) as final:
            while True:
                with self._wakeups.listen(Wake.job(job_id)) as event:
                    if submitted is not None:
                        job, submitted = submitted, None
                    else:
                        # Made final on this replica: as the store returned it then, no read.
                        job = final() or await self.get(endpoint, job_id)
                    remaining = deadline - loop.time()
                    if job.status in FINAL_STATES or remaining <= 0 or self._wakeups.closing:
                        return job
                    await self._wakeups.wait(event, remaining)

    async def follow_stream(self, endpoint: Endpoint, job_id: str) -> AsyncIterator[StreamRead]:
        """Every new batch of chunks as it arrives, ending with the job's final state."""
        while True:
            with self._wakeups.listen(Wake.job(job_id)) as event:
                read = await self.read_stream(endpoint, job_id)
                if read.chunks:
                    yield read
                    continue
                if read.job.status in FINAL_STATES or self._wakeups.closing:
                    yield read
                    return
                await self._wakeups.wait(event, 5.0)

    async def get(self, endpoint: Endpoint, job_id: str) -> Job:
        """A job that exists and whose ttl and retention window have not passed. A public
        model's caller gets only their own (anyone else's is unknown to them)."""
        job = await self._store.get_job(endpoint.id, job_id)
        if (
            job is None
            or not job.readable_at(self._clock.now())
            or (endpoint.caller is not None and job.caller_id != endpoint.caller)
        ):
            raise NotFound(f"job {job_id} not found (unknown, or its ttl or retention expired)")
        return job

    async def blocker(self, endpoint: Endpoint) -> Blocker | None:
        """Why the endpoint's workers are held back, from a reading at most a second old: a
        client polling ``/status`` of a queued job learns why it waits without a read of the
        endpoint's workers per poll."""
        try:  # a reading of None (nothing holds it back) is cached too, hence no .get()
            blocker = self._blockers[endpoint.id]
        except KeyError:
            blocker = await self._placement(endpoint, await self._store.list_workers(endpoint.id))
            self._blockers[endpoint.id] = blocker
        return blocker if endpoint.caller is None else for_caller(blocker)

    async def set_ttl(self, endpoint: Endpoint, job_id: str, ttl_ms: int) -> Job:
        await self.get(endpoint, job_id)
        job = await self._store.set_job_ttl(endpoint.id, job_id, ttl_ms)
        if job is None or not job.readable_at(self._clock.now()):
            raise NotFound(f"job {job_id} not found (unknown, or its ttl or retention expired)")
        return job

    async def recent(
        self, endpoint: Endpoint, limit: int, before_seq: int | None
    ) -> tuple[list[Job], int | None]:
        """A page of the endpoint's jobs, newest first, and the cursor of the next page."""
        _owners_only(endpoint, "/requests lists every caller's jobs")
        now = self._clock.now()
        jobs = await self._store.list_jobs(endpoint.id, limit + 1, before_seq)
        more = len(jobs) > limit
        page = [j for j in jobs[:limit] if j.readable_at(now)]
        return page, (jobs[limit - 1].seq if more else None)

    async def read_stream(self, endpoint: Endpoint, job_id: str) -> StreamRead:
        job = await self.get(endpoint, job_id)
        chunks = await self._store.read_new_stream_chunks(job_id)
        if chunks and job.status not in FINAL_STATES:
            # The job may have finished between the two reads; the client stops when it sees a
            # final status with an empty stream, so report the state after the chunks.
            job = await self.get(endpoint, job_id)
        return StreamRead(job=job, chunks=chunks)

    async def peek_stream(self, endpoint: Endpoint, job_id: str, after: int) -> StreamRead:
        """The job and its chunks after ``after``, leaving ``/stream``'s cursor where it is: a
        page watching a job takes nothing from the job's API client."""
        job = await self.get(endpoint, job_id)
        chunks = await self._store.stream_chunks_after(job_id, after)
        if chunks and job.status not in FINAL_STATES:
            job = await self.get(endpoint, job_id)  # as read_stream: the state after the chunks
        return StreamRead(job=job, chunks=chunks)

    async def cancel(self, endpoint: Endpoint, job_id: str) -> Job:
        await self.get(endpoint, job_id)
        now = self._clock.now()
        job = await self._store.cancel_job(endpoint.id, job_id, now)
        if job is None:
            raise NotFound(f"job {job_id} not found")
        if job.status is JobStatus.CANCELLED and job.finished_at == now:
            # Cancelled by this call (the store returns an already final job as it was).
            self._events.finished(job, stop_worker=job.stop_pending)
        return job

    async def retry(self, endpoint: Endpoint, job_id: str) -> Job:
        before = await self.get(endpoint, job_id)
        if before.status not in (JobStatus.FAILED, JobStatus.TIMED_OUT):
            raise Invalid(
                f"only FAILED or TIMED_OUT jobs can be retried; job {job_id} is {before.status}",
                field="status",
            )
        job = await self._store.retry_job(endpoint.id, job_id)
        if job is None:
            raise NotFound(f"job {job_id} not found")
        if job.status is not JobStatus.IN_QUEUE:
            raise Invalid(
                f"only FAILED or TIMED_OUT jobs can be retried; job {job_id} is {job.status}",
                field="status",
            )
        self._wakeups.notify(Wake.endpoint(endpoint.id))
        return job

    async def purge_queue(self, endpoint: Endpoint) -> int:
        _owners_only(endpoint, "/purge-queue would remove every caller's queued jobs")
        return await self._store.purge_queue(endpoint.id)

    async def health(self, endpoint: Endpoint) -> Health:
        counts = await self._store.job_counts(endpoint.id)
        workers = await self._store.list_workers(endpoint.id)
        by_state = dict.fromkeys(WorkerState, 0)
        for worker in workers:
            by_state[worker.state] += 1
        blocker = await self._placement(endpoint, workers)
        if endpoint.caller is not None:
            blocker = for_caller(blocker)
        return Health(jobs=counts, workers=by_state, placement=blocker)


def _owners_only(endpoint: Endpoint, why: str) -> None:
    """Refuse a public model's caller what only the endpoint's owner may do."""
    if endpoint.caller is not None:
        raise Forbidden(f"a public model's callers cannot do this: {why}")
