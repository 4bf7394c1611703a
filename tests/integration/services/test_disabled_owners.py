"""A disabled user's workers and pods are stopped, and nothing of theirs starts while they are
disabled: the real scaler, ``Fleet``, pod runner and local providers running real (sleeping)
processes on a real SQLite store, time on a ``ManualClock``.

Two sets of services on one store play two replicas: the administrator disables the user on
``other``, whose wake-ups never reach ``leader``; the leader's loops act on what the store
says, whatever its own caches hold, and so does a leader started afresh (a restart)."""

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
from skiff.domain.jobs import JobStatus, parse_job_request
from skiff.domain.pods import DesiredStatus, Pod, PodCreate, PodUpdate
from skiff.domain.templates import Template
from skiff.domain.users import User
from skiff.domain.workers import WorkerState
from skiff.services.hub import Services
from skiff.store.sqlite import SQLiteStore

#: A worker or pod that runs until it is ended (a worker of these never calls in).
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
#: One that sits out its stop's grace (SIGTERM ignored) until it is killed.
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)",
]


def build(tmp_path: Path, name: str, store: SQLiteStore, clock: ManualClock) -> Services:
    # One attempt a job: a stop that counted one would fail the job it stopped.
    settings = Settings(data_dir=tmp_path / name, worker_stop_grace_seconds=1, max_attempts=1)
    return build_services(settings, store, clock, open_cluster(settings))


@pytest.fixture
async def leader(tmp_path: Path, store: SQLiteStore, clock: ManualClock) -> AsyncIterator[Services]:
    built = build(tmp_path, "leader", store, clock)
    built.pod_runner.leading = True
    yield built
    await built.fleet.shutdown()
    await built.pod_runner.shutdown()


@pytest.fixture
async def other(tmp_path: Path, store: SQLiteStore, clock: ManualClock) -> Services:
    """Another replica: where the administrator's request lands."""
    return build(tmp_path, "other", store, clock)


async def admin_and_bob(services: Services) -> tuple[User, User]:
    admin = await services.auth.ensure_user("admin", is_admin=True)
    bob = (await services.accounts.create_user(admin, "bob")).user
    return admin, bob


async def bobs_endpoint(
    services: Services, bob: User, command: list[str] = SLEEPER, **spec: object
) -> Endpoint:
    clock = services.clock
    template = Template(id="t1", name="sleeper", imageName="local/s", dockerStartCmd=command)
    await services.store.create_template(bob.id, template, clock.now())
    fields: dict[str, object] = {"name": "ep1", "templateId": "t1"}
    fields |= {"computeType": ComputeType.CPU, **spec}
    return await services.store.create_endpoint(
        Endpoint(
            id="ep1",
            userId=bob.id,
            version=1,
            createdAt=clock.now(),
            spec=EndpointSpec.model_validate(fields),
        )
    )


def running(services: Services) -> list[str]:
    return services.fleet.provider.running()


async def submit(services: Services, endpoint: Endpoint) -> str:
    request = parse_job_request(b'{"input": {}}', endpoint.spec.executionTimeoutMs)
    return (await services.jobs.submit(endpoint, request, sync=False)).id


async def status(services: Services, job_id: str) -> JobStatus:
    job = await services.store.get_job("ep1", job_id)
    assert job is not None
    return job.status


async def test_a_disabled_users_workers_are_stopped_their_jobs_kept_and_none_start_until_enabled(
    leader: Services, other: Services, clock: ManualClock
) -> None:
    admin, bob = await admin_and_bob(other)
    endpoint = await bobs_endpoint(leader, bob, workersMin=1, workersMax=2)
    await leader.scaler.reconcile_all()
    await eventually_async(lambda: len(running(leader)) == 1, "bob's worker to run")
    [worker] = await leader.workers.of_endpoint("ep1")
    busy, queued = await submit(leader, endpoint), await submit(leader, endpoint)
    now = clock.now()
    claimed = await leader.store.claim_jobs("ep1", worker.id, 1, now, now + 30)
    assert [j.id for j in claimed] == [busy]
    # The leader's own cache says bob is active: the store decides, not this memory.
    await leader.auth.check_worker_owner(bob.id)

    await other.accounts.set_disabled(admin, bob.id, True)
    await leader.scaler.reconcile_all()

    # Stopped as a scale-down stops a worker, busy as it was: its job goes back to the queue.
    await eventually_async(lambda: running(leader) == [], "bob's worker to be stopped")

    async def requeued() -> bool:
        return await status(leader, busy) is JobStatus.IN_QUEUE

    await eventually_async(requeued, "the job in progress to go back to the queue")
    # Stopped for its owner, not for anything the job did: the attempt is given back.
    stopped = await leader.store.get_job("ep1", busy)
    assert stopped is not None and stopped.attempt == 0
    assert await status(leader, queued) is JobStatus.IN_QUEUE
    assert await leader.workers.of_endpoint("ep1") == []
    # However long the jobs wait, and whatever workersMin says, none starts.
    for _ in range(3):
        clock.advance(600)
        await leader.scaler.reconcile_all()
    assert running(leader) == [] and await leader.workers.of_endpoint("ep1") == []

    await other.accounts.set_disabled(admin, bob.id, False)
    await leader.scaler.reconcile_all()
    await eventually_async(lambda: len(running(leader)) >= 1, "bob's workers to start again")
    assert await status(leader, busy) is JobStatus.IN_QUEUE


async def test_enabling_the_owner_during_the_stops_grace_still_gives_the_attempt_back(
    leader: Services, other: Services, clock: ManualClock
) -> None:
    """Why the worker was stopped decides, not what the owner is by the time it exits."""
    admin, bob = await admin_and_bob(other)
    endpoint = await bobs_endpoint(leader, bob, STUBBORN, workersMin=1, workersMax=1)
    await leader.scaler.reconcile_all()
    await eventually_async(lambda: len(running(leader)) == 1, "bob's worker to run")
    [worker] = await leader.workers.of_endpoint("ep1")
    busy = await submit(leader, endpoint)
    now = clock.now()
    await leader.store.claim_jobs("ep1", worker.id, 1, now, now + 30)

    await other.accounts.set_disabled(admin, bob.id, True)
    await leader.scaler.reconcile_all()
    # Enabled again while the worker sits out its grace (1 s) before it is killed.
    await other.accounts.set_disabled(admin, bob.id, False)
    await eventually_async(lambda: running(leader) == [], "bob's worker to be killed")

    async def requeued() -> bool:
        return await status(leader, busy) is JobStatus.IN_QUEUE

    await eventually_async(requeued, "the job to go back to the queue, not fail")
    job = await leader.store.get_job("ep1", busy)
    assert job is not None and job.attempt == 0


async def test_a_disabled_users_starting_and_throttled_workers_go_too(
    leader: Services, other: Services
) -> None:
    """A worker still starting, and one wanted but waiting for room (the server's worker limit),
    are stopped and dropped alike: none is given room later."""
    admin, bob = await admin_and_bob(other)
    leader.fleet.worker_limit = 1
    await bobs_endpoint(leader, bob, workersMin=2, workersMax=2)
    await leader.scaler.reconcile_all()
    await eventually_async(lambda: len(running(leader)) == 1, "one worker to start")
    states = sorted(w.state for w in await leader.workers.of_endpoint("ep1"))
    assert states == sorted([WorkerState.INITIALIZING, WorkerState.THROTTLED])

    await other.accounts.set_disabled(admin, bob.id, True)
    await leader.scaler.reconcile_all()
    await eventually_async(lambda: running(leader) == [], "the starting worker to end")

    async def none_left() -> bool:
        await leader.scaler.reconcile_all()
        return await leader.workers.of_endpoint("ep1") == []

    await eventually_async(none_left, "no worker record of bob's left")
    assert running(leader) == []


async def pod_of(services: Services, user: User, **more: object) -> Pod:
    create = PodCreate.model_validate(
        {
            "imageName": "local/python",
            "computeType": "CPU",
            "volumeInGb": 0,
            "dockerStartCmd": SLEEPER,
            **more,
        }
    )
    pod = await services.pods.create(user, create)

    async def started() -> bool:
        await services.pod_runner.reconcile()
        return pod.id in services.pod_runner.running_ids()

    await eventually_async(started, f"pod {pod.id} to run")
    return pod


async def test_a_disabled_users_pods_are_stopped_and_stay_stopped_once_they_are_enabled(
    leader: Services, other: Services, clock: ManualClock
) -> None:
    admin, bob = await admin_and_bob(other)
    pod = await pod_of(leader, bob)
    locked = await pod_of(leader, bob)
    await leader.pods.update(bob, locked.id, PodUpdate(locked=True))
    clock.advance(5)

    await other.accounts.set_disabled(admin, bob.id, True)
    await leader.pod_runner.reconcile()

    assert leader.pod_runner.running_ids() == []
    for pod_id in (pod.id, locked.id):
        stopped = await leader.store.find_pod(pod_id)
        # As bob's own stop would leave it (a lock keeps bob's hands off, not the
        # administrator's).
        assert stopped is not None and stopped.desiredStatus is DesiredStatus.EXITED
        assert stopped.lastStatusChange == clock.now()
        assert stopped.placement.owner is None

    await other.accounts.set_disabled(admin, bob.id, False)
    for _ in range(3):
        clock.advance(60)
        await leader.pod_runner.reconcile()
    assert leader.pod_runner.running_ids() == []
    assert (await leader.pods.get(bob, pod.id)).desiredStatus is DesiredStatus.EXITED

    # Started again by bob, as any stopped pod.
    await leader.pods.start(bob, pod.id)

    async def started() -> bool:
        await leader.pod_runner.reconcile()
        return leader.pod_runner.running_ids() == [pod.id]

    await eventually_async(started, "bob's pod to run again")


async def test_a_leader_started_while_a_user_is_disabled_runs_nothing_of_theirs(
    tmp_path: Path, other: Services, store: SQLiteStore, clock: ManualClock
) -> None:
    """After a restart (or with a pod started through a replica whose key cache still let the
    user in), the store alone says who is disabled: their endpoint's minimum is not started and
    their pod wanted running is stopped as their stop would, not started."""
    admin, bob = await admin_and_bob(other)
    await bobs_endpoint(other, bob, workersMin=1, workersMax=1)
    other.pod_runner.leading = True  # so that the pod's create is accepted here
    pod = await other.pods.create(
        bob,
        PodCreate.model_validate(
            {"imageName": "local/python", "computeType": "CPU", "dockerStartCmd": SLEEPER}
        ),
    )
    await other.accounts.set_disabled(admin, bob.id, True)

    restarted = build(tmp_path, "restarted", store, clock)
    restarted.pod_runner.leading = True
    try:
        for _ in range(3):
            await restarted.scaler.reconcile_all()
            await restarted.pod_runner.reconcile()
        assert running(restarted) == [] and restarted.pod_runner.running_ids() == []
        assert await restarted.workers.of_endpoint("ep1") == []
        stopped = await store.find_pod(pod.id)
        assert stopped is not None and stopped.desiredStatus is DesiredStatus.EXITED
    finally:
        await restarted.fleet.shutdown()
        await restarted.pod_runner.shutdown()
