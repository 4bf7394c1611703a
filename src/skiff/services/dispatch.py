"""The worker side of the job interface: hand out jobs, take results, stream chunks, stop signals.

Results that arrive for a job that is no longer this worker's (cancelled, timed out, requeued)
are acknowledged and ignored: the SDK retries 5xx answers, and a late result must not undo a
decision already made.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from attrs import define, field, setters

from skiff.clock import Clock
from skiff.domain.endpoints import Endpoint
from skiff.domain.jobs import Job, JobStatus
from skiff.domain.results import (
    DEFAULT_STREAM_MAX_BYTES,
    Outcome,
    StreamFull,
    WorkerChunk,
    WorkerResult,
    stream_full_reason,
    stream_size,
)
from skiff.domain.streams import split_chunk
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.services.job_events import JobEvents
from skiff.services.job_room import JobRoom
from skiff.services.lineup import Lineup, Queue
from skiff.services.metrics import Metrics
from skiff.services.result_holds import ResultHolds
from skiff.services.wakeups import Claim, Wake, Wakeups
from skiff.services.workers import Workers
from skiff.store.base import Store

log = logging.getLogger(__name__)

StillConnected = Callable[[], Awaitable[bool]]
#: Ends a worker at once, unwarned, and says whether it could (the fleet's ``end_at_once``).
EndWorker = Callable[[Worker], Awaitable[bool]]


async def _cannot_end(worker: Worker) -> bool:
    return False


def _never_endable(worker: Worker) -> bool:
    return False


def _room_of(worker: Worker, limit: int) -> int:
    """How many notifications a take of ``worker`` for ``limit`` jobs may answer for: none
    for a worker whose claims are refused (a standby)."""
    return limit if worker.claims_jobs else 0


def _holds_or_off(holds: ResultHolds | None) -> ResultHolds:
    return holds or ResultHolds(0)


def _lineup_or_off(lineup: Lineup | None) -> Lineup:
    return lineup or Lineup(0)


#: A worker that is being stopped still polls; answer it slowly so it does not spin.
_STOPPING_WAIT_SECONDS = 1.0


@define(eq=False, repr=False, slots=False, on_setattr=setters.NO_OP)
class Dispatch:
    _store: Store
    _clock: Clock
    _wakeups: Wakeups
    _workers: Workers
    _events: JobEvents
    #: Told of take outcomes (finished jobs reach it through ``events``).
    _metrics: Metrics
    _lease_seconds: float
    _max_attempts: int
    #: Answers to job-done kept back until the worker's next job reaches it (off: none).
    result_holds: ResultHolds = field(default=None, converter=_holds_or_off)
    #: Jobs handed to a default worker behind the one it takes (off: none).
    lineup: Lineup = field(default=None, converter=_lineup_or_off)
    #: The most a job's stream may hold (``domain.results.stream_size``).
    _stream_max_bytes: int = DEFAULT_STREAM_MAX_BYTES
    #: Refuses what a worker writes past its endpoint owner's room (None: never).
    _room: JobRoom | None = None
    #: Ends a worker whose next lined-up job is no longer wanted (services/lineup.py); the
    #: fleet sets it, as it is built after this.
    end_worker: EndWorker = field(init=False, default=_cannot_end)
    #: Whether ``end_worker`` could end this worker: only such a worker gets jobs lined up,
    #: as a line-up's cancelled job is kept from starting only by ending the worker first.
    can_end: Callable[[Worker], bool] = field(init=False, default=_never_endable)

    def __attrs_post_init__(self) -> None:
        self._wakeups.on_close(self.result_holds.close)

    async def take(
        self,
        endpoint: Endpoint,
        worker_id: str,
        limit: int,
        wait: float,
        still_connected: StillConnected,
        jobs_in_progress: bool | None = None,
        may_line_up: bool = False,
        room: int | None = None,
    ) -> list[Job]:
        """``room``: how many jobs the worker has room for (the SDK's ``batch_size``), when
        ``limit`` is less (a cap on one answer): a take that brings ``limit`` jobs then leaves
        it room, and it polls again at once (result_holds.py). None: ``limit``.
        ``jobs_in_progress`` is the SDK's ``job_in_progress``: when the worker says it holds
        nothing, any job still marked as its own was stopped or its result was lost; the
        stopped ones are let go and the lost ones go back to the queue at once.
        ``may_line_up``: the worker takes a list in answer to a take of one (an SDK that
        does, ``lineup.accepts_lineups``); such a worker holding nothing may get jobs lined
        up behind the first (services/lineup.py)."""
        # Seen first: the path names the worker in its endpoint's terms, and every step after
        # knows it by its record's id (``Workers.seen``), as its held answers are kept: a take
        # naming another endpoint's worker's id is an outside worker's of its own.
        worker = await self._workers.seen(endpoint.id, worker_id, endpoint.version)
        self.result_holds.take_arrived(worker.id)
        line_up = may_line_up and limit == 1 and jobs_in_progress is False
        try:
            if jobs_in_progress is False and await self._workers.jobs_of(worker.id):
                await self._let_go(worker)
            jobs = await self._poll(endpoint, worker, limit, wait, still_connected, line_up)
        except BaseException:
            # Its arrival stopped the watch on the worker's held answers: a take that ends
            # without an answer (the worker gone, the request cancelled) restarts it, or they
            # would wait out max_hold.
            self.result_holds.take_answered(worker.id, room or limit, 0)
            raise
        self.result_holds.take_answered(worker.id, room or limit, len(jobs))
        self._metrics.take_poll(endpoint.id, bool(jobs))
        return jobs

    async def _poll(
        self,
        endpoint: Endpoint,
        worker: Worker,
        limit: int,
        wait: float,
        still_connected: StillConnected,
        line_up: bool,
    ) -> list[Job]:
        """Claim for a worker that takes work, waiting up to ``wait`` for jobs to be queued."""
        if not worker.takes_work:
            self.result_holds.release(worker.id)
            await asyncio.sleep(min(wait, _STOPPING_WAIT_SECONDS))
            return []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        woken = False
        key = Wake.endpoint(endpoint.id)
        #: Notifications this take answers for (``wakeups.Claim``), carried from turn to turn.
        owed = 0
        while True:
            # What it answers for and does not take goes on to another take as it stops
            # listening (``Wakeups.claiming``), or with it to its next turn.
            with (
                self._wakeups.claiming(key, _room_of(worker, limit), owed) as claim,
                self.result_holds.polling(worker.id, limit),
            ):
                if woken:
                    # Told to stop while it waited (perhaps by another replica): it must not
                    # take a job it cannot finish. The claim itself refuses a stopping worker;
                    # this only ends the poll sooner.
                    current = await self._workers.get(worker.id)
                    if current is None or not current.takes_work:
                        self.result_holds.release(worker.id)
                        return []
                    worker = current
                    claim.room = _room_of(worker, limit)
                if not await still_connected():
                    return []
                jobs = await self._claim(endpoint, worker, limit, claim, line_up)
                if jobs is None:
                    return []  # it may no longer claim
                remaining = deadline - loop.time()
                if jobs or remaining <= 0 or self._wakeups.closing:
                    return jobs
                await self._wakeups.wait(claim, remaining)
                woken = True
                owed, claim.owed = claim.owed, 0

    async def _claim(
        self, endpoint: Endpoint, worker: Worker, limit: int, claim: Claim, line_up: bool
    ) -> list[Job] | None:
        """The take's claim; None when the worker's claims are refused now (told to stop or
        held back since it was read). What ``claim`` answered for until now the claim sees, as
        it is made after each of those jobs was queued: when it took less than it had room
        for, nothing more was there to take, and when it took its fill, as many as it took
        are accounted for."""
        now = self._clock.now()
        # One fewer than asked while job-done answers are held (result_holds.py).
        room = self.result_holds.room(worker.id, limit)
        claim.looking = False
        covered = claim.owed
        jobs = await self._store.claim_jobs(
            endpoint.id, worker.id, room, now, now + self._lease_seconds
        )
        if not jobs and covered:
            # Empty: the queue was, or the claim was refused. Only the second leaves jobs
            # that this take answered for and nobody else was woken for.
            current = await self._workers.get(worker.id)
            if current is None or not current.claims_jobs:
                return None
        claim.owed -= covered if len(jobs) < room else min(covered, len(jobs))
        if jobs:
            self._workers.jobs_taken(worker)
            if line_up:
                jobs += await self._line_up(endpoint, worker)
        return jobs

    async def _line_up(self, endpoint: Endpoint, worker: Worker) -> list[Job]:
        """More jobs for a worker that holds nothing and has room for one: the SDK's loop
        runs them back to back, and asks again only on its next one-second tick
        (services/lineup.py)."""
        if self.lineup.expected_seconds(endpoint.id) is None or self.lineup.seconds <= 0:
            return []
        if not self.can_end(worker):
            # A worker this server does not run (external, another replica's) would start a
            # lined-up job cancelled before its turn: it gets one job per take, as the protocol
            # has it.
            return []
        counts = await self._store.job_counts(endpoint.id)
        if counts.in_queue <= 0:
            return []
        others = [w for w in await self._workers.of_endpoint(endpoint.id) if w.id != worker.id]
        queue = Queue(
            queued=counts.in_queue,
            live_workers=1 + sum(1 for w in others if w.is_live),
            idle_others=sum(
                1 for w in others if w.state in (WorkerState.IDLE, WorkerState.INITIALIZING)
            ),
        )
        extras = self.lineup.extras(endpoint.id, queue)
        if extras <= 0:
            return []
        now = self._clock.now()
        jobs = await self._store.line_up_jobs(
            endpoint.id, worker.id, extras, now, now + self._lease_seconds
        )
        self._metrics.jobs_lined_up(endpoint.id, len(jobs))
        return jobs

    async def done(
        self, endpoint: Endpoint, worker_id: str, job_id: str, result: WorkerResult
    ) -> str | None:
        """Record a job-done result (``domain.results.parse_worker_result`` reads it from the
        body). Returns why the result was refused (a final result's job then FAILED with that
        reason; a progress update is only not kept), or None when it was taken as sent."""
        worker = await self._workers.seen(endpoint.id, worker_id, endpoint.version)
        if result.stop_pod:
            await self._workers.mark_recycle(worker)
        no_room = await self._no_room(
            endpoint, len(result.output_json or "") + len(result.error or "")
        )
        if result.outcome is Outcome.PROGRESS:
            if no_room is not None:
                # A progress update is not the job's end: refusing it should not end the job.
                log.info("progress update of job %s not kept: %s", job_id, no_room)
                return no_room
            if await self._store.record_progress(job_id, worker.id, result.output_json):
                self._wakeups.notify(Wake.job(job_id))
            return None
        if no_room is not None:
            await self._finish(worker, job_id, JobStatus.FAILED, None, no_room)
            return no_room
        status = JobStatus.FAILED if result.outcome is Outcome.FAILED else JobStatus.COMPLETED
        await self._finish(worker, job_id, status, result.output_json, result.error)
        return result.error if result.refused else None

    async def _no_room(self, endpoint: Endpoint, size: int) -> str | None:
        """Why ``size`` bytes a worker of ``endpoint`` writes cannot be kept (its owner's
        jobs hold twice their share), or None."""
        if self._room is None:
            return None
        return await self._room.room_for_result(endpoint.userId, size)

    async def _finish(
        self,
        worker: Worker,
        job_id: str,
        status: JobStatus,
        output_json: str | None,
        error: str | None,
    ) -> None:
        finished = await self._store.finish_job(
            job_id, worker.id, status, output_json, error, self._clock.now()
        )
        if finished is not None:
            # The store let the worker go of the job in the same transaction (and started the
            # next job lined up on it).
            self._events.finished(finished)
            if finished.started_at is not None and finished.finished_at is not None:
                self.lineup.observe(
                    finished.endpoint_id, finished.finished_at - finished.started_at
                )
            if finished.line_broken:
                # Its next job was cancelled or purged in line: the SDK starts it as soon as
                # this answer ends the job before it, so the worker is ended first.
                await self._break_line(worker)
                return
            # Recorded and announced: only the answer to the worker may wait, to start its next
            # job sooner (services/result_holds.py).
            await self.result_holds.hold(worker.id)
        else:
            await self._workers.jobs_released(worker, [job_id])

    async def stream(
        self, endpoint: Endpoint, worker_id: str, job_id: str, chunk: WorkerChunk
    ) -> str | None:
        """Append a job-stream chunk (``domain.results.read_stream_chunk`` reads it). A chunk
        that cannot be stored (nested too deep, past what the job's stream may hold, or past
        its endpoint owner's room: ``JobRoom.room_for_result``) FAILS
        the job with the reason, which is returned; None when the chunk was kept."""
        worker = await self._workers.seen(endpoint.id, worker_id, endpoint.version)
        refused = chunk.refused
        if refused is None:
            pieces = split_chunk(chunk.output_json, chunk.metrics_json)
            refused = await self._no_room(endpoint, stream_size(pieces)) or await self._append(
                worker, job_id, pieces
            )
            if refused is None:
                return None
        await self._finish(worker, job_id, JobStatus.FAILED, None, refused)
        return refused

    async def _append(
        self, worker: Worker, job_id: str, pieces: list[tuple[str, str | None]]
    ) -> str | None:
        """Store a chunk's pieces; None when kept (or the worker no longer holds the job),
        else why not: the job's stream would pass its cap."""
        try:
            held = await self._store.append_stream_chunks(
                job_id, worker.id, pieces, self._stream_max_bytes
            )
        except StreamFull:
            return stream_full_reason(self._stream_max_bytes)
        if held:
            self._wakeups.notify(Wake.job(job_id))
        return None

    async def runs(
        self, endpoint: Endpoint, worker_id: str, job_id: str, lined_up: bool = False
    ) -> bool:
        """Whether the worker runs the job now (or, with ``lined_up``, has it lined up): a
        large stream chunk or result of a job it does not is dropped before it is read
        (reading 64 MB costs the event loop, and nothing of such a job is kept anyway)."""
        worker = await self._workers.seen(endpoint.id, worker_id, endpoint.version)
        return await self._store.job_held_by(job_id, worker.id, lined_up)

    async def stop_signals(
        self, endpoint: Endpoint, worker_id: str, wait: float, still_connected: StillConnected
    ) -> list[str]:
        worker = await self._workers.seen(endpoint.id, worker_id, endpoint.version)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        woken = False
        while True:
            with self._wakeups.listen(Wake.stop(worker.id)) as event:
                if woken and not await self._still_wanted(worker.id):
                    # Being stopped: the SDK leaves only once this poll ends, and it runs no
                    # job any more that a signal could be for.
                    return []
                if not await still_connected():
                    return []
                ids = await self._store.take_stop_signals(worker.id, self._clock.now())
                if (
                    ids
                    and await self._store.lineup_broken(worker.id)
                    and await self._break_line(worker)
                ):
                    # Told to stop its running job, the SDK would start the next one in its
                    # line at once, and that one was cancelled or purged in line.
                    return []
                if ids:
                    # The worker stays busy until it next asks for work saying it holds
                    # nothing: a synchronous handler runs on until it returns.
                    return ids
                remaining = deadline - loop.time()
                if remaining <= 0 or self._wakeups.closing:
                    return []
                await self._wakeups.wait(event, remaining)
                woken = True

    async def _break_line(self, worker: Worker) -> bool:
        """The job this worker starts next on its own is no longer wanted: the runpod SDK runs
        every job it queued (even when told to shut down) and a stop signal reaches only a job
        already started, so the worker is ended before it is answered; the rest of its line goes
        back to the queue untouched when its exit is reported (services/lineup.py). One this
        server cannot end (an external worker's process is not ours) is answered anyway: the
        stop signal the store recorded reaches the job once it runs. Whether it was ended."""
        if not await self.end_worker(worker):
            return False
        # Nothing of its is held any more: its process is gone.
        self.result_holds.release(worker.id)
        return True

    async def _still_wanted(self, worker_id: str) -> bool:
        current = await self._workers.get(worker_id)
        return current is not None and current.takes_work

    async def ping(self, endpoint: Endpoint, worker_id: str, job_ids: list[str]) -> None:
        worker = await self._workers.seen(endpoint.id, worker_id, endpoint.version)
        # Only what the worker says it holds (and the store says is its own): a job it never
        # got (a lost take reply) must let its lease lapse so the job goes back to the queue.
        if job_ids:
            await self._store.renew_leases(
                worker.id, job_ids, self._clock.now() + self._lease_seconds
            )

    async def _let_go(self, worker: Worker) -> None:
        released = await self._release(
            worker.id, "the worker dropped this job without reporting a result"
        )
        self._announce(released)
        await self._workers.jobs_released(worker, None)

    def request_stop(self, worker_id: str) -> None:
        """A job this worker holds expired: wake its job-stop long-poll. The signal itself is
        already stored, with its time: the let-go grace counts from there. (A job cancelled or
        timed out wakes it as it becomes final: ``JobEvents.finished``.)"""
        self._wakeups.notify(Wake.stop(worker_id))

    def worker_stopping(self, worker_id: str) -> None:
        """The worker was told to stop (its record says so): answer its held job-dones and
        end its job-stop poll now, since the SDK leaves only once its job tasks and that poll
        are done."""
        self.result_holds.release(worker_id)
        self._wakeups.notify(Wake.stop(worker_id))

    def wake_pollers(self, endpoint_id: str) -> None:
        """End the waits of an endpoint's job-take long-polls so each re-checks its worker."""
        self._wakeups.notify(Wake.endpoint(endpoint_id))

    async def worker_lost(
        self, worker: Worker, reason: str, *, unseen_since: bool = False, for_owner: bool = False
    ) -> list[Job]:
        """Its jobs go back to the queue (or fail once they used up their attempts).
        ``unseen_since``: nobody saw it end (its replica died, it went silent), so what it ran
        ended when it last called in, not now: a public model's caller is billed the attempt up
        to then, not the time no server ran it (by the store, as it releases the jobs). A worker
        stopped because its owner is disabled (``for_owner``), or lost while they are, was
        stopped or refused for that alone: its jobs go back with their attempts given back, to
        run once the owner is enabled again."""
        alive_until = worker.last_seen if unseen_since else None
        counted = not (for_owner or await self._owner_disabled(worker))
        released = await self._release(worker.id, reason, alive_until, counted=counted)
        self._announce(released)
        self.result_holds.release(worker.id)
        await self._workers.remove(worker.id)
        return released

    async def release_expired_leases(self) -> list[Job]:
        released = await self._release(
            None, "the worker holding this job stopped answering (lease expired)"
        )
        if released:
            # A worker whose last job lapsed holds nothing now: idle (and so, in time, stopped
            # for idleness) rather than running for ever.
            now = self._clock.now()
            for worker in await self._workers.all():
                if worker.state is WorkerState.RUNNING:
                    await self._store.let_go_of_jobs(worker.id, [], now)
        self._announce(released)
        return released

    async def forget_silent_workers(self, silence: float) -> list[Worker]:
        """External workers are not ours to watch as processes: one that has not called in
        (take, ping, result) for ``silence`` seconds is gone, and so is its claim on jobs."""
        now = self._clock.now()
        silent = [
            w
            for w in await self._workers.all()
            if w.kind is WorkerKind.EXTERNAL and now - (w.last_seen or w.started_at) > silence
        ]
        for worker in silent:
            await self.worker_lost(
                worker, "the external worker stopped calling in", unseen_since=True
            )
        return silent

    async def _release(
        self,
        worker_id: str | None,
        reason: str,
        alive_until: float | None = None,
        *,
        counted: bool = True,
    ) -> list[Job]:
        """``release_jobs`` now; the store bills a public model's caller the attempt of each
        job it queues again as it does: up to now, or to ``alive_until`` (when its worker was
        last seen) where that is earlier."""
        now = self._clock.now()
        return await self._store.release_jobs(
            worker_id, now, self._max_attempts, reason, alive_until, counted=counted
        )

    async def _owner_disabled(self, worker: Worker) -> bool:
        """Whether the owner of the worker's endpoint is disabled now (the store says: the
        administrator may have disabled them through another replica)."""
        endpoint = await self._store.get_endpoint(worker.endpoint_id)
        if endpoint is None:
            return False
        owner = await self._store.get_user(endpoint.userId)
        return owner is not None and owner.disabled

    def _announce(self, released: list[Job]) -> None:
        for job in released:
            if job.status is JobStatus.IN_QUEUE:
                self._wakeups.notify(Wake.job(job.id))
                self._wakeups.notify(Wake.endpoint(job.endpoint_id))
            else:
                # A lost worker's job that used up its attempts ends FAILED here.
                self._events.finished(job)
