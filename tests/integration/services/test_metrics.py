"""Prometheus metrics on a real SQLite store, with the clock injected: the numbers are read
back by prometheus-client's own parser, not by matching text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from prometheus_client.parser import text_string_to_metric_families

from service_stubs import any_webhook, connected, nothing_blocks
from skiff.clock import ManualClock
from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import JobStatus, parse_job_request
from skiff.domain.results import parse_worker_result
from skiff.domain.workers import Worker, WorkerKind, WorkerState, outside_key
from skiff.services.dispatch import Dispatch
from skiff.services.job_events import JobEvents
from skiff.services.jobs import Jobs
from skiff.services.metrics import Metrics
from skiff.services.wakeups import Wakeups
from skiff.services.workers import Workers
from skiff.store.sqlite import SQLiteStore

Labels = frozenset[tuple[str, str]]


def parse(text: bytes) -> dict[tuple[str, Labels], float]:
    """Every sample of the exposition, keyed by (sample name, labels)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
    }


def value(samples: dict[tuple[str, Labels], float], name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def endpoints_named(samples: dict[tuple[str, Labels], float]) -> set[str]:
    return {dict(labels)["endpoint"] for _name, labels in samples if dict(labels).get("endpoint")}


@dataclass
class Rig:
    store: SQLiteStore
    clock: ManualClock
    workers: Workers
    dispatch: Dispatch
    jobs: Jobs
    metrics: Metrics
    ep1: Endpoint
    ep2: Endpoint
    #: What the ``oldest_queued_at`` callable answers, per endpoint id, and who asked.
    oldest: dict[str, float] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    async def submit(self, endpoint: Endpoint) -> str:
        return (
            await self.jobs.submit(
                endpoint,
                parse_job_request(b'{"input": {}}', endpoint.spec.executionTimeoutMs),
                sync=False,
            )
        ).id

    async def take(self, endpoint: Endpoint, worker_id: str) -> list[str]:
        taken = await self.dispatch.take(endpoint, worker_id, 1, 0.05, connected)
        return [j.id for j in taken]

    async def scrape(self) -> dict[tuple[str, Labels], float]:
        return parse(await self.metrics.render())


def _endpoint(endpoint_id: str, now: float) -> Endpoint:
    return Endpoint(
        id=endpoint_id,
        userId="u1",
        version=1,
        createdAt=now,
        spec=EndpointSpec(name=endpoint_id, templateId="t1"),
    )


@pytest.fixture
async def rig(store: SQLiteStore, clock: ManualClock) -> AsyncIterator[Rig]:
    wakeups = Wakeups()
    events = JobEvents(wakeups)
    workers = Workers(store, clock)
    oldest: dict[str, float] = {}
    asked: list[str] = []

    async def oldest_queued_at(endpoint_id: str) -> float | None:
        asked.append(endpoint_id)
        return oldest.get(endpoint_id)

    metrics = Metrics(store, clock, workers, oldest_queued_at)
    events.on_final(metrics.job_finished)
    dispatch = Dispatch(
        store, clock, wakeups, workers, events, metrics, lease_seconds=30.0, max_attempts=2
    )
    ep1, ep2 = _endpoint("ep1", clock.now()), _endpoint("ep2", clock.now())
    await store.create_endpoint(ep1)
    await store.create_endpoint(ep2)
    yield Rig(
        store,
        clock,
        workers,
        dispatch,
        Jobs(store, clock, wakeups, events, nothing_blocks, any_webhook),
        metrics,
        ep1,
        ep2,
        oldest,
        asked,
    )


async def test_jobs_histograms_polls_and_workers_after_a_round_of_work(rig: Rig) -> None:
    a, b, c, _d = [await rig.submit(rig.ep1) for _ in range(4)]
    rig.clock.advance(2)
    assert await rig.take(rig.ep1, "w1") == [a]
    rig.clock.advance(3)
    await rig.dispatch.done(rig.ep1, "w1", a, parse_worker_result(b'{"output": {"ok": true}}'))
    rig.clock.advance(1)
    assert await rig.take(rig.ep1, "w1") == [b]
    rig.clock.advance(0.5)
    await rig.dispatch.done(rig.ep1, "w1", b, parse_worker_result(b'{"error": "boom"}'))
    assert await rig.take(rig.ep1, "w3") == [c]
    assert await rig.take(rig.ep2, "w2") == []
    await rig.workers.add(
        Worker(
            id="w4",
            endpoint_id="ep1",
            kind=WorkerKind.LOCAL,
            state=WorkerState.INITIALIZING,
            version=1,
            started_at=rig.clock.now(),
        )
    )

    samples = await rig.scrape()

    expected_jobs = {
        "IN_QUEUE": 1,
        "IN_PROGRESS": 1,
        "COMPLETED": 1,
        "FAILED": 1,
        "CANCELLED": 0,
        "TIMED_OUT": 0,
    }
    for state, count in expected_jobs.items():
        assert value(samples, "skiff_jobs", endpoint="ep1", state=state) == count
        assert value(samples, "skiff_jobs", endpoint="ep2", state=state) == 0
    assert value(samples, "skiff_queue_depth", endpoint="ep1") == 1
    assert value(samples, "skiff_queue_depth", endpoint="ep2") == 0

    # a waited 2 s and ran 3 s; b waited 2 + 3 + 1 = 6 s and ran 0.5 s.
    assert value(samples, "skiff_job_delay_seconds_count", endpoint="ep1") == 2
    assert value(samples, "skiff_job_delay_seconds_sum", endpoint="ep1") == pytest.approx(8)
    assert value(samples, "skiff_job_delay_seconds_bucket", endpoint="ep1", le="2.5") == 1
    assert value(samples, "skiff_job_execution_seconds_count", endpoint="ep1") == 2
    assert value(samples, "skiff_job_execution_seconds_sum", endpoint="ep1") == pytest.approx(3.5)
    assert value(samples, "skiff_job_execution_seconds_bucket", endpoint="ep1", le="0.5") == 1

    assert value(samples, "skiff_jobs_finished_total", endpoint="ep1", status="COMPLETED") == 1
    assert value(samples, "skiff_jobs_finished_total", endpoint="ep1", status="FAILED") == 1

    assert value(samples, "skiff_job_take_polls_total", endpoint="ep1", outcome="job") == 3
    assert value(samples, "skiff_job_take_polls_total", endpoint="ep2", outcome="empty") == 1

    expected_workers = {state.value: 0 for state in WorkerState} | {
        "idle": 1,
        "running": 1,
        "initializing": 1,
    }
    for state, count in expected_workers.items():
        assert value(samples, "skiff_workers", endpoint="ep1", state=state) == count
    assert value(samples, "skiff_workers", endpoint="ep2", state="idle") == 1


async def test_oldest_queued_age_comes_from_the_callable_and_is_zero_when_empty(
    rig: Rig,
) -> None:
    await rig.submit(rig.ep1)
    rig.oldest["ep1"] = rig.clock.now()
    rig.clock.advance(42)

    samples = await rig.scrape()

    assert value(samples, "skiff_queue_oldest_age_seconds", endpoint="ep1") == pytest.approx(42)
    assert value(samples, "skiff_queue_oldest_age_seconds", endpoint="ep2") == 0
    # An empty queue is not asked about: the query is only for endpoints with waiting jobs.
    assert rig.asked == ["ep1"]


async def test_an_unknown_oldest_job_reads_zero(rig: Rig) -> None:
    await rig.submit(rig.ep1)
    samples = await rig.scrape()
    assert value(samples, "skiff_queue_oldest_age_seconds", endpoint="ep1") == 0


async def test_a_deleted_endpoint_leaves_no_series_behind(rig: Rig) -> None:
    job = await rig.submit(rig.ep2)
    assert await rig.take(rig.ep2, "w2") == [job]
    await rig.dispatch.done(rig.ep2, "w2", job, parse_worker_result(b'{"output": 1}'))
    assert "ep2" in endpoints_named(await rig.scrape())

    await rig.store.delete_endpoint("ep2", 0.0)
    await rig.workers.remove("w2")

    assert endpoints_named(await rig.scrape()) == {"ep1"}


async def test_an_endpoint_counted_again_after_its_series_were_dropped_starts_from_zero(
    rig: Rig,
) -> None:
    async def one_job() -> None:
        job = await rig.submit(rig.ep2)
        assert await rig.take(rig.ep2, "w2") == [job]
        await rig.dispatch.done(rig.ep2, "w2", job, parse_worker_result(b'{"output": 1}'))

    await one_job()
    await rig.store.delete_endpoint("ep2", 0.0)
    await rig.workers.remove("w2")
    assert endpoints_named(await rig.scrape()) == {"ep1"}  # its series dropped

    await rig.store.create_endpoint(rig.ep2)
    await one_job()

    samples = await rig.scrape()
    assert value(samples, "skiff_jobs_finished_total", endpoint="ep2", status="COMPLETED") == 1
    assert value(samples, "skiff_job_take_polls_total", endpoint="ep2", outcome="job") == 1
    assert value(samples, "skiff_job_delay_seconds_count", endpoint="ep2") == 1
    assert value(samples, "skiff_job_execution_seconds_count", endpoint="ep2") == 1


async def test_a_lost_workers_job_out_of_attempts_counts_as_failed(rig: Rig) -> None:
    job = await rig.submit(rig.ep1)
    for name in ("w1", "w2"):
        assert await rig.take(rig.ep1, name) == [job]
        worker = await rig.workers.get(outside_key(rig.ep1.id, name))
        assert worker is not None
        await rig.dispatch.worker_lost(worker, "gone")

    samples = await rig.scrape()

    assert value(samples, "skiff_jobs_finished_total", endpoint="ep1", status="FAILED") == 1
    assert value(samples, "skiff_jobs", endpoint="ep1", state="FAILED") == 1


async def test_job_finished_takes_any_final_job_such_as_a_timed_out_one(rig: Rig) -> None:
    job = await rig.submit(rig.ep1)
    assert await rig.take(rig.ep1, "w1") == [job]
    rig.clock.advance(601)  # past the default 600 s execution timeout
    for timed_out in await rig.store.time_out_jobs(rig.clock.now()):
        rig.metrics.job_finished(timed_out)

    samples = await rig.scrape()

    assert value(samples, "skiff_jobs_finished_total", endpoint="ep1", status="TIMED_OUT") == 1
    assert value(samples, "skiff_job_execution_seconds_sum", endpoint="ep1") == pytest.approx(601)


async def test_a_job_cancelled_in_the_queue_is_counted_without_durations(rig: Rig) -> None:
    job = await rig.jobs.cancel(rig.ep1, await rig.submit(rig.ep1))
    assert job.status is JobStatus.CANCELLED

    samples = await rig.scrape()

    assert value(samples, "skiff_jobs_finished_total", endpoint="ep1", status="CANCELLED") == 1
    assert ("skiff_job_delay_seconds_count", frozenset({("endpoint", "ep1")})) not in samples


async def test_each_metrics_object_has_its_own_registry(rig: Rig) -> None:
    async def unknown(_endpoint_id: str) -> float | None:
        return None

    # A second set of the same metric names in one process must not clash.
    other = Metrics(rig.store, rig.clock, rig.workers, unknown)
    await rig.submit(rig.ep1)
    samples = parse(await other.render())
    assert value(samples, "skiff_jobs", endpoint="ep1", state="IN_QUEUE") == 1
    assert not any(name == "skiff_job_take_polls_total" for name, _ in samples)
