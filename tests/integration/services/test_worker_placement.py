"""Workers that never call in, scale-downs of starting workers, the server-wide worker limit
and saying why workers are held back: the real scaler, ``Fleet`` and ``LocalProvider`` running
real (sleeping) processes on a real SQLite store, time on a ``ManualClock``."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from eventually import eventually_async
from skiff.app import build_services, open_cluster
from skiff.clock import ManualClock
from skiff.config import Settings
from skiff.domain.endpoints import ComputeType, Endpoint, EndpointSpec
from skiff.domain.health import health_view
from skiff.domain.jobs import parse_job_request
from skiff.domain.placement import BlockerCause
from skiff.domain.templates import Template
from skiff.domain.workers import Worker, WorkerState
from skiff.services.hub import Services
from skiff.store.sqlite import SQLiteStore

START_TIMEOUT = 600.0
#: A worker that never calls in: it sleeps through its start-up.
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


async def build(
    tmp_path: Path, store: SQLiteStore, clock: ManualClock, **settings: object
) -> Services:
    chosen = Settings(
        data_dir=tmp_path / "data",
        worker_start_timeout_seconds=START_TIMEOUT,
        worker_stop_grace_seconds=1,
        **settings,  # type: ignore[arg-type]
    )
    built = build_services(chosen, store, clock, open_cluster(chosen))
    await store.create_template(
        "u1",
        Template(id="t1", name="sleeper", imageName="local/sleeper", dockerStartCmd=SLEEPER),
        clock.now(),
    )
    return built


@pytest.fixture
async def services(
    tmp_path: Path, store: SQLiteStore, clock: ManualClock
) -> AsyncIterator[Services]:
    built = await build(tmp_path, store, clock)
    yield built
    await built.fleet.shutdown()


async def add_endpoint(services: Services, endpoint_id: str, **spec: object) -> Endpoint:
    fields: dict[str, object] = {"name": endpoint_id, "templateId": "t1"}
    fields["computeType"] = ComputeType.CPU
    fields.update(spec)
    return await services.store.create_endpoint(
        Endpoint(
            id=endpoint_id,
            userId="u1",
            version=1,
            createdAt=services.clock.now(),
            spec=EndpointSpec.model_validate(fields),
        )
    )


async def workers_of(services: Services, endpoint_id: str) -> list[Worker]:
    return await services.workers.of_endpoint(endpoint_id)


def running(services: Services) -> list[str]:
    assert services.fleet.provider is not None
    return services.fleet.provider.running()


async def test_a_worker_that_never_calls_in_is_ended_at_the_start_timeout_as_a_failed_start(
    services: Services, clock: ManualClock
) -> None:
    endpoint = await add_endpoint(services, "ep1", workersMin=1, workersMax=1)
    await services.scaler.reconcile(endpoint)
    [hung] = await workers_of(services, "ep1")
    assert hung.state is WorkerState.INITIALIZING and hung.id in running(services)

    clock.advance(START_TIMEOUT - 1)
    await services.scaler.reconcile(endpoint)
    assert hung.id in running(services), "ended before its deadline"

    clock.advance(1)
    await services.scaler.reconcile(endpoint)
    await eventually_async(lambda: hung.id not in running(services), "the hung worker to end")

    async def recorded_unhealthy() -> bool:
        record = await services.workers.get(hung.id)
        return record is not None and record.state is WorkerState.UNHEALTHY

    await eventually_async(recorded_unhealthy, "the hung worker kept as unhealthy")
    failure = await services.fleet.failure("ep1")
    assert failure is not None and failure.failed_starts == 1
    assert f"worker {hung.id} did not call in within 600 s" in failure.error
    assert not services.fleet.may_start("ep1")  # backed off
    hold = await services.placement.why(endpoint)
    assert hold is not None and hold.cause is BlockerCause.FAILING
    assert "did not call in" in hold.reason

    # Once the back-off has passed, the scaler replaces it.
    clock.advance(1)
    await services.scaler.reconcile(endpoint)
    [replacement] = await workers_of(services, "ep1")
    assert replacement.id != hung.id and replacement.state is WorkerState.INITIALIZING
    assert replacement.id in running(services)


async def test_lowering_workers_max_to_zero_ends_workers_still_starting(
    services: Services, clock: ManualClock
) -> None:
    endpoint = await add_endpoint(services, "ep1", workersMin=3, workersMax=3)
    await services.scaler.reconcile(endpoint)
    starting = await workers_of(services, "ep1")
    assert [w.state for w in starting] == [WorkerState.INITIALIZING] * 3

    lowered = await services.store.update_endpoint(
        "ep1", endpoint.spec.model_copy(update={"workersMin": 0, "workersMax": 0}), False
    )
    assert lowered is not None
    clock.advance(1)
    await services.scaler.reconcile(lowered)

    await eventually_async(lambda: running(services) == [], "every starting worker to end")

    async def forgotten() -> bool:
        return await workers_of(services, "ep1") == []

    await eventually_async(forgotten, "their records to go")
    assert await services.fleet.failure("ep1") is None  # a scale-down is no failed start


async def test_the_server_wide_worker_limit_holds_across_endpoints_and_says_so(
    tmp_path: Path, store: SQLiteStore, clock: ManualClock
) -> None:
    services = await build(tmp_path, store, clock, max_workers=3)
    try:
        first = await add_endpoint(services, "ep1", workersMin=4, workersMax=4)
        second = await add_endpoint(services, "ep2", workersMin=4, workersMax=4)
        await services.scaler.reconcile_all()
        await services.scaler.reconcile_all()

        assert len(running(services)) == 3
        every = await services.workers.all()
        assert sum(w.state is WorkerState.INITIALIZING for w in every) == 3
        assert sum(w.state is WorkerState.THROTTLED for w in every) == 5

        held = await services.placement.why(second)
        assert held is not None and held.cause is BlockerCause.WORKER_LIMIT
        assert "its limit of 3 (SKIFF_MAX_WORKERS)" in held.reason
        health = health_view(await services.jobs.health(second))
        assert health["placement"] == {"cause": "worker-limit", "reason": held.reason}
        assert health["workers"]["throttled"] == 4

        # Room made by the first endpoint goes to waiting workers, still never past 3.
        lowered = await services.store.update_endpoint(
            "ep1", first.spec.model_copy(update={"workersMin": 0, "workersMax": 0}), False
        )
        assert lowered is not None
        await services.scaler.reconcile(lowered)

        async def moved_over() -> bool:
            assert len(running(services)) <= 3
            await services.scaler.reconcile_all()
            ep2 = await workers_of(services, "ep2")
            return sum(w.state is WorkerState.INITIALIZING for w in ep2) == 3

        await eventually_async(moved_over, "the freed room to go to the second endpoint")
        assert await workers_of(services, "ep1") == []
        assert len(running(services)) == 3
    finally:
        await services.fleet.shutdown()


async def test_a_gpu_endpoint_on_a_server_without_its_gpu_type_says_why(
    tmp_path: Path, store: SQLiteStore, clock: ManualClock
) -> None:
    services = await build(tmp_path, store, clock, gpus="NVIDIA GeForce RTX 4090:1")
    try:
        endpoint = await add_endpoint(
            services,
            "ep1",
            computeType=ComputeType.GPU,
            gpuTypeIds=["NVIDIA H100 80GB HBM3"],
            workersMin=1,
        )
        await services.scaler.reconcile(endpoint)
        [waiting] = await workers_of(services, "ep1")
        assert waiting.state is WorkerState.THROTTLED and running(services) == []

        health = health_view(await services.jobs.health(endpoint))
        assert health["placement"]["cause"] == "no-gpu"
        assert health["placement"]["reason"] == (
            "no worker can start: each needs a GPU among [NVIDIA H100 80GB HBM3] and this "
            "server has 1 x NVIDIA GeForce RTX 4090; use computeType CPU or GPU types this "
            "server has"
        )
    finally:
        await services.fleet.shutdown()


async def test_an_endpoint_with_nothing_holding_it_back_says_nothing(
    services: Services,
) -> None:
    endpoint = await add_endpoint(services, "ep1")
    assert await services.placement.why(endpoint) is None
    assert "placement" not in health_view(await services.jobs.health(endpoint))


async def test_a_queued_jobs_answers_read_why_at_most_once_a_second(
    tmp_path: Path, store: SQLiteStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = await build(tmp_path, store, clock, gpus="NVIDIA GeForce RTX 4090:1")
    try:
        endpoint = await add_endpoint(
            services, "ep1", computeType=ComputeType.GPU, gpuTypeIds=["NVIDIA H100 80GB HBM3"]
        )
        job = await services.jobs.submit(
            endpoint,
            parse_job_request(b'{"input": {}}', endpoint.spec.executionTimeoutMs),
            sync=False,
        )
        await services.scaler.reconcile(endpoint)
        why = services.placement.why
        reads: list[str] = []

        async def counted(endpoint: Endpoint, workers: list[Worker]) -> object:
            reads.append(endpoint.id)
            return await why(endpoint, workers)

        monkeypatch.setattr(services.jobs, "_placement", counted)
        first = await services.jobs.blocker(endpoint)
        assert first is not None and first.cause is BlockerCause.NO_GPU
        assert (await services.jobs.get(endpoint, job.id)).status.value == "IN_QUEUE"
        # Every poll of /status within the second reuses the reading.
        for _ in range(5):
            assert await services.jobs.blocker(endpoint) == first
        assert reads == ["ep1"]
        clock.advance(1.0)
        assert await services.jobs.blocker(endpoint) == first
        assert reads == ["ep1", "ep1"]
    finally:
        await services.fleet.shutdown()
