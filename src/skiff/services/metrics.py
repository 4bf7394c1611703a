"""Prometheus metrics for ``GET /metrics``.

Two kinds of numbers:

- Events, counted as they happen (``take_poll``, ``job_finished``): job delay and execution
  histograms, finished jobs by status, job-take long-polls by outcome. They live in ordinary
  prometheus-client instruments.
- State, read at scrape time (``render``): jobs by state, queue depth and the age of the
  oldest queued job per endpoint, workers by state. The store is async and prometheus
  collectors are not, so ``render`` reads every number first and hands a snapshot to a
  collector just before the text is generated, with no await in between.

Every instrument lives in this object's own ``CollectorRegistry``, never the process-global
one, so several apps in one process (tests) do not collide.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from attrs import define
from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from skiff.clock import Clock
from skiff.domain.jobs import Job, JobStatus
from skiff.domain.workers import WorkerState
from skiff.services.workers import Workers
from skiff.store.base import JobCounts, Store

#: The submission time (epoch seconds) of an endpoint's oldest queued job, or None.
OldestQueuedAt = Callable[[str], Awaitable[float | None]]

#: What ``GET /metrics`` answers with: the classic text format that ``generate_latest``
#: writes. (``prometheus_client.CONTENT_TYPE_LATEST`` names version 1.0.0 in 0.26, which a
#: scraper only gets when it asks for it.)
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

#: Jobs wait and run from milliseconds (a warm echo worker) to an hour (model inference):
#: the default buckets of prometheus-client stop at 10 s.
_DURATION_BUCKETS = (
    0.01,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    float("inf"),
)

_POLL_OUTCOMES = ("job", "empty")


@dataclass(slots=True)
class _JobSeries:
    """One endpoint's children of the job-event instruments, each made when first used."""

    delay: Histogram | None = None
    execution: Histogram | None = None
    finished: dict[JobStatus, Counter] = field(default_factory=dict)
    polls: dict[str, Counter] = field(default_factory=dict)


def _jobs_by_state(counts: JobCounts) -> dict[JobStatus, int]:
    return {
        JobStatus.IN_QUEUE: counts.in_queue,
        JobStatus.IN_PROGRESS: counts.in_progress,
        JobStatus.COMPLETED: counts.completed,
        JobStatus.FAILED: counts.failed,
        JobStatus.CANCELLED: counts.cancelled,
        JobStatus.TIMED_OUT: counts.timed_out,
    }


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """The state numbers of one scrape, per endpoint id."""

    jobs: dict[str, dict[JobStatus, int]] = field(default_factory=dict)
    oldest_age: dict[str, float] = field(default_factory=dict)
    workers: dict[str, dict[WorkerState, int]] = field(default_factory=dict)


def _jobs_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "skiff_jobs", "Jobs stored, by endpoint and state.", labels=["endpoint", "state"]
    )


def _depth_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "skiff_queue_depth", "Jobs waiting for a worker (IN_QUEUE).", labels=["endpoint"]
    )


def _age_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "skiff_queue_oldest_age_seconds",
        "How long the oldest queued job has waited; 0 when the queue is empty.",
        labels=["endpoint"],
    )


def _workers_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "skiff_workers",
        "Workers in the register, by endpoint and state.",
        labels=["endpoint", "state"],
    )


class _StateCollector:
    """Yields the gauges of the last snapshot ``Metrics.render`` took."""

    def __init__(self) -> None:
        self.snapshot = _Snapshot()

    def describe(self) -> Iterable[Metric]:
        # Naming the families lets the registry refuse a clash, without collecting at
        # registration (when there is no snapshot yet).
        return [_jobs_family(), _depth_family(), _age_family(), _workers_family()]

    def collect(self) -> Iterable[Metric]:
        snap = self.snapshot
        jobs, depth, age, workers = (
            _jobs_family(),
            _depth_family(),
            _age_family(),
            _workers_family(),
        )
        for endpoint_id, by_state in snap.jobs.items():
            for status, count in by_state.items():
                jobs.add_metric([endpoint_id, status.value], count)
            depth.add_metric([endpoint_id], by_state[JobStatus.IN_QUEUE])
            age.add_metric([endpoint_id], snap.oldest_age.get(endpoint_id, 0.0))
        for endpoint_id, worker_states in snap.workers.items():
            for state, count in worker_states.items():
                workers.add_metric([endpoint_id, state.value], count)
        return [jobs, depth, age, workers]


@define(eq=False, repr=False, slots=False)
class Metrics:
    _store: Store
    _clock: Clock
    _workers: Workers
    _oldest_queued_at: OldestQueuedAt

    def __attrs_post_init__(self) -> None:
        self.registry = CollectorRegistry()
        self._delay = self._seconds(
            "skiff_job_delay_seconds",
            "Time from submission until a worker started the job (finished jobs).",
        )
        self._execution = self._seconds(
            "skiff_job_execution_seconds",
            "Time from a worker's start of the job until it finished (finished jobs).",
        )
        self._finished = Counter(
            "skiff_jobs_finished",
            "Jobs that reached a final state, by endpoint and status.",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self._polls = Counter(
            "skiff_job_take_polls",
            "job-take long-polls answered, by endpoint and outcome (job or empty).",
            ["endpoint", "outcome"],
            registry=self.registry,
        )
        self._lined_up = Counter(
            "skiff_jobs_lined_up",
            "Jobs handed to a default worker behind the one it took, to run when that one ends "
            "(services/lineup.py).",
            ["endpoint"],
            registry=self.registry,
        )
        self._lb_requests = Counter(
            "skiff_lb_requests",
            "Requests to load-balancing endpoints, by endpoint and answer class (2xx, 4xx, "
            "5xx; 502 and 503 are skiff's own: the worker failed, none was ready).",
            ["endpoint", "code"],
            registry=self.registry,
        )
        self._lb_head = self._seconds(
            "skiff_lb_response_seconds",
            "Load-balancing endpoints: time from a request's arrival to its answer's head "
            "(waiting for a ready worker included).",
        )
        #: Each load-balancing endpoint's series, by answer code, and its head-time series:
        #: looked up once, not through ``labels()`` on every proxied request.
        self._lb_counts: dict[str, dict[str, Counter]] = {}
        self._lb_heads: dict[str, Histogram] = {}
        #: Each endpoint's job-event series (statuses and poll outcomes by name), looked up
        #: once: ``labels()`` on every job was a measurable share of a ``/runsync``.
        self._job_series: dict[str, _JobSeries] = {}
        self._state = _StateCollector()
        self.registry.register(self._state)
        # Endpoint ids that have series in the event instruments, so a deleted endpoint's
        # series can be removed (prometheus-client does not list them); the statuses it was
        # counted under are the keys of its ``_job_series``.
        self._labelled: set[str] = set()

    def _seconds(self, name: str, documentation: str) -> Histogram:
        """A duration per endpoint, in the buckets every skiff duration uses."""
        return Histogram(
            name, documentation, ["endpoint"], buckets=_DURATION_BUCKETS, registry=self.registry
        )

    # -- events -----------------------------------------------------------------------------
    def _series(self, endpoint_id: str) -> _JobSeries:
        series = self._job_series.get(endpoint_id)
        if series is None:
            self._labelled.add(endpoint_id)
            series = self._job_series[endpoint_id] = _JobSeries()
        return series

    def take_poll(self, endpoint_id: str, got_job: bool) -> None:
        """A job-take long-poll answered, with at least one job or empty."""
        polls = self._series(endpoint_id).polls
        outcome = "job" if got_job else "empty"
        count = polls.get(outcome)
        if count is None:
            count = polls[outcome] = self._polls.labels(endpoint_id, outcome)
        count.inc()

    def jobs_lined_up(self, endpoint_id: str, count: int) -> None:
        """Jobs lined up behind a take's job."""
        self._labelled.add(endpoint_id)
        self._lined_up.labels(endpoint_id).inc(count)

    def lb_request(self, endpoint_id: str, status: int, seconds: float) -> None:
        """A request to a load-balancing endpoint got its answer's head (or skiff's refusal)."""
        code = str(status) if status in (502, 503) else f"{status // 100}xx"
        counts = self._lb_counts.get(endpoint_id)
        if counts is None:
            self._labelled.add(endpoint_id)
            counts = self._lb_counts[endpoint_id] = {}
            self._lb_heads[endpoint_id] = self._lb_head.labels(endpoint_id)
        count = counts.get(code)
        if count is None:
            count = counts[code] = self._lb_requests.labels(endpoint_id, code)
        count.inc()
        self._lb_heads[endpoint_id].observe(max(0.0, seconds))

    def job_finished(self, job: Job) -> None:
        """A job reached a final state (as the store returned it); any final status works, so
        the reaper's TIMED_OUT jobs and cancellations count through here too."""
        series = self._series(job.endpoint_id)
        count = series.finished.get(job.status)
        if count is None:
            count = series.finished[job.status] = self._finished.labels(
                job.endpoint_id, job.status.value
            )
        count.inc()
        # A job cancelled while queued never started: it has neither a delay nor a run time.
        if job.started_at is None:
            return
        # max(0, ...): a wall clock stepped back must not produce a negative observation.
        # A child exists from its first observation on: one looked up early would show an
        # endpoint whose jobs never started with a zero-count histogram.
        if series.delay is None:
            series.delay = self._delay.labels(job.endpoint_id)
        series.delay.observe(max(0.0, job.started_at - job.submitted_at))
        if job.finished_at is not None:
            if series.execution is None:
                series.execution = self._execution.labels(job.endpoint_id)
            series.execution.observe(max(0.0, job.finished_at - job.started_at))

    # -- scrape -----------------------------------------------------------------------------
    async def render(self) -> bytes:
        """The exposition text (``CONTENT_TYPE``) with the state read now."""
        # Only endpoints tracked before the listing may be dropped: one created while this
        # scrape awaits is missing from the listing but must keep its fresh series.
        tracked_before = set(self._labelled)
        endpoints = [e.id for e in await self._store.list_endpoints(None)]
        existing = set(endpoints)
        now = self._clock.now()
        jobs: dict[str, dict[JobStatus, int]] = {}
        oldest_age: dict[str, float] = {}
        for endpoint_id in endpoints:
            counts = await self._store.job_counts(endpoint_id)
            jobs[endpoint_id] = _jobs_by_state(counts)
            if counts.in_queue:
                submitted = await self._oldest_queued_at(endpoint_id)
                if submitted is not None:
                    oldest_age[endpoint_id] = max(0.0, now - submitted)
        workers: dict[str, dict[WorkerState, int]] = {
            endpoint_id: dict.fromkeys(WorkerState, 0) for endpoint_id in endpoints
        }
        for worker in await self._workers.all():
            if worker.endpoint_id in workers:
                workers[worker.endpoint_id][worker.state] += 1
        # From here to the end nothing awaits, so a concurrent scrape cannot swap the snapshot
        # between setting it and writing the text.
        for endpoint_id in tracked_before - existing:
            self._forget(endpoint_id)
        self._state.snapshot = _Snapshot(jobs=jobs, oldest_age=oldest_age, workers=workers)
        return generate_latest(self.registry)

    def _forget(self, endpoint_id: str) -> None:
        """Drop a deleted endpoint's event series, so label values stay bounded to the
        endpoints that exist."""
        self._labelled.discard(endpoint_id)
        series = self._job_series.pop(endpoint_id, None)
        statuses = series.finished if series is not None else {}
        self._delay.remove(endpoint_id)
        self._execution.remove(endpoint_id)
        self._lined_up.remove(endpoint_id)
        for status in statuses:
            self._finished.remove(endpoint_id, status.value)
        for outcome in _POLL_OUTCOMES:
            self._polls.remove(endpoint_id, outcome)
        if self._lb_heads.pop(endpoint_id, None) is not None:
            self._lb_head.remove(endpoint_id)
        for code in self._lb_counts.pop(endpoint_id, {}):
            self._lb_requests.remove(endpoint_id, code)
