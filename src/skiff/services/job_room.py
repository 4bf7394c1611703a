"""Each user's share of the database: the bytes their jobs hold there, bounded.

Every tenant's jobs share one database and its disk. Bounded by the request rate alone, one
tenant could queue large inputs on an endpoint with no workers, and keep them there for their
time to live, until the disk reserve (``disk_reserve.py``) refused every tenant's new jobs. So
a user may hold at most ``SKIFF_JOB_MB_PER_USER`` MiB in the jobs they submitted: inputs,
webhooks, S3 settings, results, errors and streams, counted by the store (migrations
``0017_job_bytes.sql``) for as long as a job's row is kept (until it expires, its result's
retention ends, or its queue is purged). A job counts against who submitted it: a public
model's caller, not the model's owner. A new job past the bound is refused with 507 and
``Retry-After``; a result is never refused, since accepted work finishes, so a user's running
jobs may take them past the bound, and their next job waits until results are collected.

The store is read at most once a second per user, on the injected clock. Between two reads,
what was admitted since counts against the last figure, so a burst is refused as it reaches
the bound rather than a second later. Each replica counts its own admissions: several
together may pass the bound by what they admit in that second.
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
#: What a refused caller is told to wait: a result collected frees its bytes at once.
RETRY_AFTER_SECONDS = 5


@define(eq=False, repr=False, slots=True)
class _Held:
    """A user's figure as last read, and what was admitted on this replica since."""

    read: int
    admitted: int = 0


@define(eq=False, repr=False, slots=False)
class JobRoom:
    """Refuses a user's new job while their jobs hold ``most`` bytes or more (0: no bound)."""

    _store: Store
    _clock: Clock
    _most: int
    _held: TTLCache[str, _Held, float] = field(init=False)
    #: Jobs refused for their user's bytes, since start (``skiff_jobs_refused_for_user_bytes``).
    refused: int = field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        self._held = TTLCache(maxsize=MAX_USERS_KEPT, ttl=READ_EVERY_SECONDS, timer=self._clock.now)

    async def admit(self, user_id: str, size: int) -> None:
        """Count ``size`` bytes of a new job of ``user_id``'s, or raise ``InsufficientStorage``
        when their jobs hold the bound already or this one would pass it."""
        if not self._most:
            return
        held = self._held.get(user_id)
        if held is None:
            held = _Held(await self._store.job_bytes_of(user_id))
            self._held[user_id] = held
        if held.read + held.admitted + size > self._most:
            self.refused += 1
            raise InsufficientStorage(
                f"your jobs hold {(held.read + held.admitted) // MIB} MiB in inputs, results "
                f"and streams, and this one ({size} bytes) would take them past the "
                f"{self._most // MIB} MiB one user may hold: collect your jobs' results, or "
                "let queued ones run, expire or be purged, then try again; nothing of this "
                "request was kept",
                RETRY_AFTER_SECONDS,
            )
        held.admitted += size


class JobRoomMetrics:
    """The jobs refused for their user's bytes, on ``/metrics`` (a collector on
    ``Metrics.registry``)."""

    def __init__(self, room: JobRoom) -> None:
        self._room = room

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily(
            "skiff_jobs_refused_for_user_bytes",
            "Jobs refused with 507 because their user's jobs held SKIFF_JOB_MB_PER_USER already.",
        )

    def describe(self) -> Iterable[Metric]:
        return [self._family()]

    def collect(self) -> Iterable[Metric]:
        refused = self._family()
        refused.add_metric([], self._room.refused)
        return [refused]
