"""A job became final: the one call every site that makes a job final makes, once per job.

A job ends in several places: its worker's result or a chunk too deep (``Dispatch``), a cancel
(``Jobs``), its execution timeout (``Reaper``), a lost worker's last attempt (``Dispatch``).
Each of them says so here, with the job as the store returned it, and what follows is the same
whoever said it: the job's waiters (``/runsync``, ``/status`` long-polls, streams) wake first,
then the worker's job-stop poll when the job was taken from a worker still running it, then the
subscribers in the order they subscribed (the metrics, the webhook sender).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from skiff.domain.jobs import Job
from skiff.services.wakeups import Wake, Wakeups

#: Told of every job that became final.
OnFinal = Callable[[Job], None]


class JobEvents:
    def __init__(self, wakeups: Wakeups) -> None:
        self._wakeups = wakeups
        self._subscribers: list[OnFinal] = []
        #: Jobs a caller on this replica waits for (``awaiting``), each with how many wait and
        #: the job as it became final here, once it has: the waiter's answer without a read.
        self._awaited: dict[str, tuple[int, Job | None]] = {}

    @contextlib.contextmanager
    def awaiting(self, job_id: str) -> Iterator[Callable[[], Job | None]]:
        """While inside, the job as it becomes final on this replica is kept for the caller:
        what it yields gives it (None until then, and for a job made final elsewhere)."""
        count, final = self._awaited.get(job_id, (0, None))
        self._awaited[job_id] = (count + 1, final)
        try:
            yield lambda: self._awaited[job_id][1]
        finally:
            count, final = self._awaited[job_id]
            if count <= 1:
                del self._awaited[job_id]
            else:
                self._awaited[job_id] = (count - 1, final)

    def on_final(self, subscriber: OnFinal) -> None:
        """Call ``subscriber`` with every job that becomes final from now on."""
        self._subscribers.append(subscriber)

    def finished(self, job: Job, stop_worker: bool = False) -> None:
        """``job`` just became final. ``stop_worker``: it was cancelled or timed out while its
        worker ran it, and the store has recorded the stop signal that worker must now fetch."""
        awaited = self._awaited.get(job.id)
        if awaited is not None:
            self._awaited[job.id] = (awaited[0], job)
        self._wakeups.notify(Wake.job(job.id))
        if stop_worker and job.worker_id is not None:
            # The signal itself is stored with its time; the let-go grace counts from there.
            self._wakeups.notify(Wake.stop(job.worker_id))
        for subscriber in self._subscribers:
            subscriber(job)
