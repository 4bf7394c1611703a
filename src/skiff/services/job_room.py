"""Each user's share of the database: the bytes their jobs hold there, bounded.

Every tenant's jobs share one database and its disk. Bounded by the request rate alone, one
tenant could queue large inputs on an endpoint with no workers, or have its own worker answer
tiny jobs with 64 MB results, and keep them there for their time to live, until the disk
reserve (``disk_reserve.py``) refused every tenant's new jobs. So the store counts what each
user's jobs hold (migrations ``0017_job_bytes.sql``), from a job's insert until its row is
removed: its input, webhook and S3 settings against who submitted it (a public model's caller,
else the endpoint's owner), its result, error and stream against the endpoint's owner, whose
worker wrote them (a model's owner cannot fill its callers' shares), and a pending webhook
delivery's copy of them alike.

A user's new job is refused (507, ``Retry-After``) once their jobs hold ``most`` bytes
(``SKIFF_JOB_MB_PER_USER``). What a worker sends for accepted work (a result, a stream chunk, a
progress update) is refused only past twice that, so that the results of a full queue still
find room: the job then fails with the reason, as a stream past its cap does. A user's jobs hold
at most about twice their share, then, and each replica's second of admissions more.

The store is read at most once a second per user, on the injected clock. Between two reads,
what was admitted since counts against the last figure (in characters: the store's next
figure is in UTF-8 bytes), so a burst is refused as it reaches the bound rather than a second
later. Each replica counts its own admissions: several together may pass the bound by what
they admit in that second.
"""

from __future__ import annotations

from collections.abc import Iterable

from attrs import define, field
from cachetools import TTLCache
from prometheus_client.core import CounterMetricFamily, Metric

from skiff.clock import Clock
from skiff.errors import InsufficientStorage
from skiff.store.base import Store

MIB = 1024 * 1024
#: How long a user's figure is used before the store is read again.
READ_EVERY_SECONDS = 1.0
#: Users whose figures are kept between reads: more submitting within a second are read again.
MAX_USERS_KEPT = 10_000
#: What a refused caller is told to wait: bytes come back as jobs are removed (a result's
#: retention, a ttl, a purge), in minutes rather than seconds.
RETRY_AFTER_SECONDS = 30
#: What a worker may still write for accepted work, as a multiple of the share.
RESULTS_ROOM = 2


@define(eq=False, repr=False, slots=True)
class _Held:
    """A user's figure as last read, and what was admitted on this replica since."""

    read: int
    admitted: int = 0

    @property
    def now(self) -> int:
        return self.read + self.admitted


@define(eq=False, repr=False, slots=False)
class JobRoom:
    """Refuses a user's new job while their jobs hold ``most`` bytes or more, and what a
    worker writes past twice that (``most`` 0: no bound)."""

    _store: Store
    _clock: Clock
    _most: int
    _held: TTLCache[str, _Held, float] = field(init=False)
    #: Jobs refused for their user's bytes, since start (``skiff_jobs_refused_for_user_bytes``).
    refused: int = field(init=False, default=0)
    #: Results, stream chunks and progress updates refused so, since start.
    results_refused: int = field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        self._held = TTLCache(maxsize=MAX_USERS_KEPT, ttl=READ_EVERY_SECONDS, timer=self._clock.now)

    async def admit(self, user_id: str, size: int) -> None:
        """Count ``size`` bytes of a new job of ``user_id``'s, or raise ``InsufficientStorage``
        when their jobs hold the bound already or this one would pass it."""
        if not self._most:
            return
        held = await self._figure(user_id)
        if held.now + size > self._most:
            self.refused += 1
            raise InsufficientStorage(
                f"your jobs hold {held.now // MIB} MiB in inputs, results and streams, and "
                f"this one ({size} bytes) would take them past the {self._most // MIB} MiB one "
                "user may hold: bytes come back as your jobs are removed (a result once its "
                "retention ends, or at once with GET /status/ID?ttl=1; a queued job when its "
                "ttl passes or its queue is purged); nothing of this request was kept",
                RETRY_AFTER_SECONDS,
            )
        held.admitted += size

    async def room_for_result(self, owner_id: str, size: int) -> str | None:
        """Count ``size`` bytes a worker of ``owner_id``'s endpoint writes for a job; None when
        they fit, else why not (the job fails with it)."""
        if not self._most:
            return None
        held = await self._figure(owner_id)
        if held.now + size > RESULTS_ROOM * self._most:
            self.results_refused += 1
            return (
                f"the worker's output ({size} bytes) would take the jobs of its endpoint's "
                f"owner past {RESULTS_ROOM * self._most // MIB} MiB, twice the share of the "
                "database one user may hold; it was not kept"
            )
        held.admitted += size
        return None

    async def _figure(self, user_id: str) -> _Held:
        held = self._held.get(user_id)
        if held is None:
            read = await self._store.job_bytes_of(user_id)
            # Another request may have read it meanwhile and admitted against it: use that.
            held = self._held.setdefault(user_id, _Held(read))
        return held


class JobRoomMetrics:
    """What was refused for its user's bytes, on ``/metrics`` (a collector on
    ``Metrics.registry``)."""

    def __init__(self, room: JobRoom) -> None:
        self._room = room

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, CounterMetricFamily]:
        return (
            CounterMetricFamily(
                "skiff_jobs_refused_for_user_bytes",
                "Jobs refused with 507 because their user's jobs held SKIFF_JOB_MB_PER_USER.",
            ),
            CounterMetricFamily(
                "skiff_results_refused_for_user_bytes",
                "Results, stream chunks and progress updates refused (their jobs failed) "
                "because the endpoint owner's jobs held twice SKIFF_JOB_MB_PER_USER.",
            ),
        )

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        jobs, results = self._families()
        jobs.add_metric([], self._room.refused)
        results.add_metric([], self._room.results_refused)
        return [jobs, results]
