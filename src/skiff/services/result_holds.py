"""Answering a worker's job-done when its next job reaches it, so the SDK starts that job at once.

The runpod SDK's job loop (``rp_scale.JobScaler.run_jobs``) notices a job its take brought in
only when it next wakes: when one of its running job tasks ends, or else on a 100 ms tick
(``asyncio.sleep(0.1)`` when it runs nothing, ``asyncio.wait(..., timeout=0.1)`` when it does).
So a job handed to an idle worker waits 50 ms on average before its handler runs, whatever the
server does. A job task ends when the answer to its job-done arrives. skiff records a result the
moment it arrives (the job is final, its waiters are woken, its webhook is queued: nothing here
delays what a client sees) and may keep the *answer* to the worker back until this worker is
handed its next job: releasing it then ends that task, the loop wakes and starts the new job
at once instead of on the tick.

Keeping an answer back has costs the rules below keep small:

- The held job still counts against the worker's concurrency (the SDK removes it from its
  ``JobsProgress`` only when the task ends). An answer is therefore held only while the worker
  has a take waiting here that asked for at least two jobs (``batch_size >= 2``), or after a
  take brought it jobs and left it room, so that it polls again at once: a worker with room
  for one job or fewer, or one a take just filled, is never held back, so a
  ``concurrency_modifier`` of 1 (the SDK's default) sees no difference. While it holds
  results, a take is given at most ``room - 1`` jobs, so the worker still has room after
  queueing them and polls again at once.
- Release happens when the proof arrives that the worker queued what it was given: its next
  take. If that take does not come within ``watch`` seconds (the worker is full and sleeping,
  its ``concurrency_modifier`` changed and it waits for its jobs to drain, it is shutting down,
  or its next take went to another replica), its answers are released anyway. The same watch
  follows a take answered with no job: a worker that does not poll again promptly is released.
- A worker told to stop, one that is lost, a server shutting down, and any answer held for
  ``max_hold`` seconds are released at once.

The SDK logs "Finished." for a job when its answer arrives, so with holding on that line can
come later than the job's ``executionTime`` says; ``SKIFF_RESULT_HOLD_SECONDS=0`` turns holding
off.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from skiff.services.wakeups import Signal

#: A take whose answer leaves the worker room for at least this many more jobs keeps polling at
#: once, so its next take is the proof that it queued the jobs it was given.
_MIN_ROOM = 2


@dataclass
class _Worker:
    #: Takes of this worker waiting here, by the room each asked for.
    polls: list[int] = field(default_factory=list)
    #: The answers held for this worker, each waiting on its own signal: set to release.
    release: list[Signal] | None = None
    held: int = 0
    #: A take of this worker was answered with jobs: its next take releases the held answers.
    armed: bool = False
    watchdog: asyncio.TimerHandle | None = None


class ResultHolds:
    def __init__(self, max_hold: float, watch: float = 0.05) -> None:
        #: Longest one answer is held; 0 turns holding off.
        self.max_hold = max_hold
        #: How soon a worker must poll again after a take was answered before its answers are
        #: released anyway.
        self.watch = watch
        self._workers: dict[str, _Worker] = {}
        self._closing = False

    @property
    def enabled(self) -> bool:
        return self.max_hold > 0 and not self._closing

    @property
    def tracked(self) -> int:
        """Workers this keeps anything for (none once they neither poll nor wait)."""
        return len(self._workers)

    def held(self, worker_id: str) -> int:
        state = self._workers.get(worker_id)
        return state.held if state is not None else 0

    # -- the take side -------------------------------------------------------------------

    def take_arrived(self, worker_id: str) -> None:
        """A take of this worker arrived: it is looping, and has queued what it was last given."""
        state = self._workers.get(worker_id)
        if state is None:
            return
        self._cancel_watch(state)
        if state.armed:
            self._release(worker_id)

    def room(self, worker_id: str, asked: int) -> int:
        """How many jobs to hand a take that asked for ``asked``: one fewer while answers are
        held, so the worker still has room after queueing them and polls again at once."""
        if asked >= _MIN_ROOM and self.held(worker_id) > 0:
            return asked - 1
        return asked

    @contextlib.contextmanager
    def polling(self, worker_id: str, asked: int) -> Iterator[None]:
        """Around the wait of a take that asked for ``asked`` jobs."""
        state = self._workers.setdefault(worker_id, _Worker())
        state.polls.append(asked)
        try:
            yield
        finally:
            state.polls.remove(asked)
            self._drop_if_unused(worker_id, state)

    def take_answered(self, worker_id: str, asked: int, delivered: int) -> None:
        """A take of this worker that asked for ``asked`` jobs was answered: arm the release
        (jobs were given) and watch for its next take.

        A worker with room is armed by any take that brought it jobs, answers held or not:
        until its next take arrives it may not have queued them yet, and a job-done answered
        in that moment would end its last running task first, leaving the SDK's loop asleep
        on its tick when the jobs reach its queue (a job's time at the worker was 100 ms).
        A take that got all it asked for arms nothing: the worker is full, and the SDK sleeps
        a second before it asks again, so a held answer would wait out the whole watch while
        the jobs just handed over wait for a running task to end."""
        if not self.enabled:
            return
        arms = 0 < delivered < asked
        state = self._workers.get(worker_id)
        if state is None:
            if not arms:
                return
            state = self._workers[worker_id] = _Worker()
        elif state.held == 0 and not arms:
            return
        if delivered > 0:
            state.armed = True
        self._cancel_watch(state)
        loop = asyncio.get_running_loop()
        state.watchdog = loop.call_later(self.watch, self._release, worker_id)

    # -- the result side -----------------------------------------------------------------

    async def hold(self, worker_id: str) -> None:
        """Return when this worker's job-done may be answered: at once unless it is polling
        here with room to spare or was just handed jobs (armed), else once its next job has
        reached it (or a rule above releases it)."""
        if not self.enabled:
            return
        state = self._workers.get(worker_id)
        if state is None or not (state.armed or any(asked >= _MIN_ROOM for asked in state.polls)):
            return
        waiters = state.release
        if waiters is None:
            waiters = state.release = []
        # A signal with its timer rather than an Event under ``asyncio.timeout``: this runs
        # once per job-done, and the context's set-up was a measurable share of it.
        signal = Signal()
        waiters.append(signal)
        state.held += 1
        try:
            await signal.wait(self.max_hold)
        finally:
            if state.release is waiters:
                waiters.remove(signal)
                state.held -= 1
            self._drop_if_unused(worker_id, state)

    def release(self, worker_id: str) -> None:
        """Answer every job-done held for this worker now (it is being stopped, or lost)."""
        self._release(worker_id)

    def close(self) -> None:
        """The server is going down: answer everything held, and hold nothing more."""
        self._closing = True
        for worker_id in list(self._workers):
            self._release(worker_id)

    def _release(self, worker_id: str) -> None:
        state = self._workers.get(worker_id)
        if state is None:
            return
        self._cancel_watch(state)
        state.armed = False
        if state.release is not None:
            for signal in state.release:
                signal.set()
            # A later hold waits in a new list; the woken ones no longer count.
            state.release = None
            state.held = 0
        self._drop_if_unused(worker_id, state)

    def _cancel_watch(self, state: _Worker) -> None:
        if state.watchdog is not None:
            state.watchdog.cancel()
            state.watchdog = None

    def _drop_if_unused(self, worker_id: str, state: _Worker) -> None:
        unused = not state.polls and state.held == 0 and state.watchdog is None
        if unused and self._workers.get(worker_id) is state:
            del self._workers[worker_id]
