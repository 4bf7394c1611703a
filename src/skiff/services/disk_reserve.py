"""Room kept on the database's disk for the work already accepted.

A job's input is written when it is accepted; its result, its stream and its worker's logs are
written later, on the same disk when the database is the embedded SQLite file. Were new jobs
taken until that disk was full, the results of the jobs already running could no longer be
recorded, and each would be run again once its lease ran out. So new jobs are refused (507,
with ``Retry-After``) while the disk has less than ``SKIFF_DISK_RESERVE_MB`` free, and
everything that finishes accepted work (job-done, stream chunks, cancels) goes on using the
room kept: a result is at most 64 MB, and a job's stream at most ``SKIFF_STREAM_MAX_MB``.
What tenants' workers write is held apart, each endpoint to its own disk budget
(services/disk_watch.py).

The disk is read (``statvfs``) at most once a second on the injected clock.
Between two reads, what the jobs accepted since will take is counted against the last figure,
so a burst of large inputs is refused as it reaches the reserve, not a second later.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from pathlib import Path

from attrs import define, field
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from skiff.clock import Clock
from skiff.config import Settings
from skiff.databases import Backend, backend_of
from skiff.datadir import free_bytes
from skiff.errors import InsufficientStorage

log = logging.getLogger(__name__)

MIB = 1024 * 1024
#: How often the disk is read at most (on the injected clock).
READ_EVERY_SECONDS = 1.0
#: What a refused caller is told to wait: freeing a disk is an operator's work, not a moment's.
RETRY_AFTER_SECONDS = 30
#: A job's row, its indexes and its count triggers, beside its input; and the input is written
#: twice with SQLite's write-ahead log (once in the log, once in the file at the checkpoint).
_ROW_BYTES = 8 * 1024
_WRITTEN_TIMES = 2


def job_bytes(*parts: str | None) -> int:
    """What accepting a job with these text parts (its input, webhook, S3 settings) writes,
    counted in characters: JSON is mostly ASCII, and the disk is read again each second."""
    return _ROW_BYTES + _WRITTEN_TIMES * sum(len(p) for p in parts if p)


@define(eq=False, repr=False, slots=False)
class DiskReserve:
    """Refuses new work while ``path``'s disk has less than ``reserve`` bytes free."""

    _path: Path
    _reserve: int
    _clock: Clock
    _measure: Callable[[Path], int] = free_bytes
    #: The last figure read; None before the first read, or when the disk could not be read.
    _measured: int | None = field(init=False, default=None)
    #: What was admitted since the last periodic read: its writes may not have landed yet.
    _admitted: int = field(init=False, default=0)
    _read_at: float = field(init=False, default=-math.inf)
    _low: bool = field(init=False, default=False)
    #: Jobs refused for want of room, since start (``skiff_jobs_refused_for_room_total``).
    refused: int = field(init=False, default=0)

    def admit(self, size: int) -> None:
        """Count ``size`` bytes of new work, or raise ``InsufficientStorage`` when they would
        leave less than the reserve free."""
        now = self._clock.now()
        if now - self._read_at >= READ_EVERY_SECONDS:
            self._admitted, self._read_at = 0, now
            self._read()
        elif self._short(size):
            # Space may have been freed since: look again before refusing, still counting what
            # was admitted (a write that has landed meanwhile counts twice, for a second at most).
            self._read()
        if self._short(size):
            self.refused += 1
            raise InsufficientStorage(
                "the server's disk is nearly full: no new job is accepted until its operator "
                "frees space (the jobs already accepted go on); nothing of this request was kept",
                RETRY_AFTER_SECONDS,
            )
        self._admitted += size

    @property
    def reserve_bytes(self) -> int:
        return self._reserve

    def free_now(self) -> int | None:
        """The disk's free bytes, read now; None when it cannot be read."""
        try:
            return self._measure(self._path)
        except OSError:
            return None

    def _short(self, size: int) -> bool:
        measured = self._measured
        return measured is not None and measured - self._admitted - size < self._reserve

    def _read(self) -> None:
        try:
            free = self._measure(self._path)
        except OSError as exc:
            # Not knowing is no reason to refuse work: the store's own error answers a write
            # that truly finds no room.
            log.warning("cannot read the free space of %s: %s", self._path, exc)
            self._measured = None
            return
        self._measured = free
        low = free - self._admitted < self._reserve
        if low != self._low:
            self._low = low
            if low:
                log.error(
                    "the disk of %s has %d MiB free, under the %d MiB kept for accepted work: "
                    "new jobs are refused until space is freed",
                    self._path,
                    free // MIB,
                    self._reserve // MIB,
                )
            else:
                log.warning("the disk of %s has room again: new jobs are accepted", self._path)


class ReserveMetrics:
    """The reserve's figures on ``/metrics`` (a collector on ``Metrics.registry``): the disk's
    free bytes, read at each scrape, beside the reserve, and the jobs refused."""

    def __init__(self, reserve: DiskReserve) -> None:
        self._reserve = reserve

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, CounterMetricFamily]:
        return (
            GaugeMetricFamily(
                "skiff_database_disk_free_bytes",
                "Free bytes on the disk of the embedded database (read at the scrape).",
            ),
            GaugeMetricFamily(
                "skiff_database_disk_reserve_bytes",
                "Bytes kept free there for accepted work (SKIFF_DISK_RESERVE_MB): under it, "
                "new jobs are refused.",
            ),
            CounterMetricFamily(
                "skiff_jobs_refused_for_room",
                "Jobs refused with 507 because the database's disk was nearly full.",
            ),
        )

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        reserve = self._reserve
        free, kept, refused = self._families()
        now = reserve.free_now()
        if now is not None:  # else no sample: the figure is unknown, not zero
            free.add_metric([], now)
        kept.add_metric([], reserve.reserve_bytes)
        refused.add_metric([], reserve.refused)
        return [free, kept, refused]


def for_settings(settings: Settings, clock: Clock) -> DiskReserve | None:
    """The reserve of the embedded SQLite store's disk; None with PostgreSQL (its disk is its
    server's, which refuses a write it has no room for: answered 507 all the same) or when
    ``SKIFF_DISK_RESERVE_MB`` is 0."""
    if backend_of(settings.database_url) is not Backend.SQLITE or settings.disk_reserve_mb <= 0:
        return None
    return DiskReserve(settings.sqlite_path().parent, settings.disk_reserve_mb * MIB, clock)
