"""Workers that fail at their start: the back-off between their starts, and what the endpoint
then says of them. The real scaler, ``Fleet`` and ``LocalProvider`` running real processes on a
real SQLite store, time on a ``ManualClock``."""

from __future__ import annotations

import sys
from collections.abc import Set

import pytest

from eventually import eventually_async
from skiff.clock import ManualClock
from skiff.domain.endpoints import ComputeType, Endpoint, EndpointSpec
from skiff.domain.health import health_view
from skiff.domain.jobs import parse_job_request
from skiff.domain.placement import BlockerCause, placement_view
from skiff.domain.templates import Template
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.services.fleet import backoff_delay
from skiff.services.hub import Services
from skiff.store.sqlite import SQLiteStore

#: A worker whose handler cannot even be imported: it exits at once, every time.
FAILING = [sys.executable, "-c", "import sys; sys.exit(1)"]
#: An interpreter without ``runpod`` (``-S``: no site-packages) running a worker.
NO_RUNPOD = [sys.executable, "-S", "-c", "import runpod"]
#: A worker that starts fine (it never calls in; the tests say when it is up).
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
async def services(local_services: Services) -> Services:
    await local_services.store.create_template(
        "u1",
        Template(id="t1", name="failing", imageName="local/failing", dockerStartCmd=FAILING),
        local_services.clock.now(),
    )
    return local_services


async def add_endpoint(services: Services, **spec: object) -> Endpoint:
    fields: dict[str, object] = {"name": "ep1", "templateId": "t1", "computeType": ComputeType.CPU}
    fields.update(spec)
    return await services.store.create_endpoint(
        Endpoint(
            id="ep1",
            userId="u1",
            version=1,
            createdAt=services.clock.now(),
            spec=EndpointSpec.model_validate(fields),
        )
    )


async def add_up_worker(services: Services, worker_id: str, kind: WorkerKind) -> None:
    """A worker of the endpoint that is up and idle: an external one (started by hand with
    the endpoint's worker token) or a local one started earlier."""
    now = services.clock.now()
    await services.workers.add(
        Worker(
            id=worker_id,
            endpoint_id="ep1",
            kind=kind,
            state=WorkerState.IDLE,
            version=1,
            started_at=now,
            last_seen=now,
            idle_since=now,
            owner=services.workers.replica_id if kind is WorkerKind.LOCAL else None,
        )
    )


async def unhealthy(services: Services) -> list[Worker]:
    return [
        w for w in await services.workers.of_endpoint("ep1") if w.state is WorkerState.UNHEALTHY
    ]


async def local_started(services: Services) -> list[Worker]:
    return [
        w
        for w in await services.workers.of_endpoint("ep1")
        if w.kind is WorkerKind.LOCAL and w.pid is not None
    ]


async def fail_once(services: Services, endpoint: Endpoint, failed_before: int) -> None:
    """A pass of the scaler starts a worker, which fails: the endpoint's failure counts it."""
    await services.scaler.reconcile(endpoint)
    assert await local_started(services), "no worker was started"

    async def counted() -> bool:
        failure = await services.fleet.failure("ep1")
        return failure is not None and failure.failed_starts == failed_before + 1

    await eventually_async(counted, f"failed start {failed_before + 1} to be recorded")
    await eventually_async(lambda: services.fleet.provider.running() == [], "the worker to be gone")

    async def kept_unhealthy() -> bool:
        return bool(await unhealthy(services))

    # The exit's handling ends by keeping the worker as unhealthy, after the failure is counted:
    # a pass of the scaler before that (a loaded machine) would see no such record yet.
    await eventually_async(kept_unhealthy, "the failed worker to be kept as unhealthy")


@pytest.mark.parametrize("kind", [WorkerKind.EXTERNAL, WorkerKind.LOCAL])
async def test_a_worker_up_since_before_the_failure_does_not_cut_the_back_off(
    services: Services, clock: ManualClock, kind: WorkerKind
) -> None:
    """An idle external worker, or a local one up since before the failed start, used to
    count as a worker that came up: every pass forgot the failed starts, and the failing one
    was started again every second."""
    endpoint = await add_endpoint(services, workersMin=2, workersMax=2)
    await add_up_worker(services, "up", kind)
    clock.advance(1)

    await fail_once(services, endpoint, failed_before=0)
    assert not services.fleet.may_start("ep1")
    for _ in range(3):
        await services.scaler.reconcile(endpoint)
        assert await local_started(services) == [], "started again within its back-off"
        assert len(await unhealthy(services)) == 1
    failure = await services.fleet.failure("ep1")
    assert failure is not None and failure.failed_starts == 1, "the failure was forgotten"

    # Each failure doubles the wait: 1 s after the first, 2 s after the second.
    clock.advance(1)
    await fail_once(services, endpoint, failed_before=1)
    failure = await services.fleet.failure("ep1")
    assert failure is not None and failure.next_start_at - failure.at == 2
    clock.advance(1)
    await services.scaler.reconcile(endpoint)
    assert await local_started(services) == []


async def test_a_worker_started_after_the_failure_that_comes_up_ends_the_back_off(
    services: Services, clock: ManualClock, store: SQLiteStore
) -> None:
    endpoint = await add_endpoint(services, workersMin=1, workersMax=1)
    await fail_once(services, endpoint, failed_before=0)
    # The template is mended: the next start works.
    await store.update_template(
        "u1",
        Template(id="t1", name="failing", imageName="local/failing", dockerStartCmd=SLEEPER),
    )
    clock.advance(1)
    await services.scaler.reconcile(endpoint)
    [replacement] = await local_started(services)
    await services.workers.set_state(replacement, WorkerState.IDLE)  # it called in

    await services.scaler.reconcile(endpoint)
    assert await services.fleet.failure("ep1") is None
    assert services.fleet.may_start("ep1")


async def failing_on_import(services: Services, store: SQLiteStore) -> Endpoint:
    """An endpoint with a job queued whose one worker has failed once: its interpreter has
    no ``runpod`` to import."""
    await store.update_template(
        "u1", Template(id="t1", name="failing", imageName="local/x", dockerStartCmd=NO_RUNPOD)
    )
    endpoint = await add_endpoint(services, workersMax=1)
    request = parse_job_request(b'{"input": {}}', endpoint.spec.executionTimeoutMs)
    await services.jobs.submit(endpoint, request, sync=False)
    await fail_once(services, endpoint, failed_before=0)
    return endpoint


async def test_a_worker_that_fails_on_import_names_the_error_where_the_caller_looks(
    services: Services, store: SQLiteStore
) -> None:
    """Not only "exited with code 1": the failure, and so /health's and a queued job's
    ``placement``, end with the line of its log that says why."""
    endpoint = await failing_on_import(services, store)

    failure = await services.fleet.failure("ep1")
    assert failure is not None
    assert failure.error.endswith(
        "exited with code 1 right after it started: ModuleNotFoundError: No module named 'runpod'"
    ), failure.error
    assert failure.last_log_lines[-1] == "ModuleNotFoundError: No module named 'runpod'"
    placement = health_view(await services.jobs.health(endpoint))["placement"]
    assert placement["cause"] == BlockerCause.FAILING.value
    assert placement["reason"].endswith("ModuleNotFoundError: No module named 'runpod'")
    assert await services.jobs.blocker(endpoint) == await services.placement.why(endpoint)


async def test_a_public_model_caller_is_told_the_workers_fail_but_not_why(
    services: Services, store: SQLiteStore
) -> None:
    """Why a start failed is the owner's to read (the worker's reason, or its log's last line,
    may hold hosts, paths or credentials): a public model's caller, on its copy of the
    endpoint, learns only that the model's workers fail to start."""
    endpoint = await failing_on_import(services, store)

    as_caller = endpoint.model_copy(update={"caller": "u2"})
    blocker = await services.jobs.blocker(as_caller)
    assert blocker is not None
    seen = [
        health_view(await services.jobs.health(as_caller))["placement"],
        placement_view(blocker),
    ]
    for placement in seen:
        assert placement == {
            "cause": BlockerCause.FAILING.value,
            "reason": "the model's workers fail to start",
        }
    # The owner, on the same endpoint at the same moment, still reads why.
    owners = health_view(await services.jobs.health(endpoint))["placement"]
    assert owners["reason"].endswith("No module named 'runpod'")


async def test_an_unfit_ping_counts_only_for_a_worker_of_that_endpoint_this_server_runs(
    services: Services, store: SQLiteStore
) -> None:
    """The ping comes with the endpoint's worker token, which every worker of the endpoint
    holds, and names any worker id: one its endpoint's own workers could send by the thousand.
    An id this server runs no worker of, or a worker of another endpoint, counts no failed
    start (and leaves no record behind); the endpoint's own running worker does."""
    await store.update_template(
        "u1", Template(id="t1", name="sleeper", imageName="local/x", dockerStartCmd=SLEEPER)
    )
    endpoint = await add_endpoint(services, workersMin=1, workersMax=1)
    await services.scaler.reconcile(endpoint)
    [running] = await local_started(services)

    for made_up in range(50):
        await services.fleet.unfit("ep1", f"made-up-{made_up}", "check", "reason")
    await services.fleet.unfit("ep2", running.id, "check", "from another endpoint's token")
    assert await services.fleet.failure("ep1") is None
    assert await services.fleet.failure("ep2") is None
    assert services.fleet.may_start("ep1") and services.fleet.may_start("ep2")

    await services.fleet.unfit("ep1", running.id, "model_files", "missing")
    failure = await services.fleet.failure("ep1")
    assert failure is not None and failure.failed_starts == 1
    assert "fitness check 'model_files' failed: missing" in failure.error


def test_the_back_off_doubles_to_its_cap_and_stays_there_however_long_it_fails() -> None:
    """1, 2, 4 ... 60 s; and still 60 at the 1,025th failure in a row, where the doubling
    itself (2.0 ** 1024) would overflow and end every pass of the scaler."""
    assert [backoff_delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff_delay(1025) == backoff_delay(10**9) == 60


async def test_an_endpoint_whose_reconcile_fails_holds_back_none_after_it(
    services: Services, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One endpoint's trouble (its workers are its tenant's code) ends only its own part of
    the scaler's pass: the endpoints listed after it are reconciled, and the failure is
    logged with the endpoint's id."""
    first = await add_endpoint(services)
    later = await services.store.create_endpoint(
        first.model_copy(update={"id": "ep2", "createdAt": first.createdAt + 1})
    )
    reconciled: list[str] = []
    reconcile = services.scaler.reconcile

    async def failing_for_the_first(endpoint: Endpoint, disabled: Set[str] | None = None) -> None:
        if endpoint.id == first.id:
            raise OverflowError("math range error")
        reconciled.append(endpoint.id)
        await reconcile(endpoint, disabled)

    monkeypatch.setattr(services.scaler, "reconcile", failing_for_the_first)
    await services.scaler.reconcile_all()
    assert reconciled == [later.id]
    assert f"endpoint {first.id}: its reconcile failed" in caplog.text
