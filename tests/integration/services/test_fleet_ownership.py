"""Which replica owns a local worker, and what happens to records no process backs any more:
the real ``Fleet`` with the real ``LocalProvider`` on a real SQLite store."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest

from eventually import eventually_async
from skiff.app import build_services, open_cluster
from skiff.clock import ManualClock
from skiff.config import Settings
from skiff.domain.endpoints import ComputeType, Endpoint, EndpointSpec
from skiff.domain.jobs import JobStatus, parse_job_request
from skiff.domain.templates import Template
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.services.auth import Auth
from skiff.services.hub import Services
from skiff.store.sqlite import SQLiteStore


@pytest.fixture
async def services(
    tmp_path: Path, store: SQLiteStore, clock: ManualClock
) -> AsyncIterator[Services]:
    settings = Settings(data_dir=tmp_path / "data")
    built = build_services(settings, store, clock, open_cluster(settings))
    yield built
    await built.fleet.shutdown()


def record(worker_id: str, owner: str | None, state: WorkerState, now: float) -> Worker:
    return Worker(
        id=worker_id,
        endpoint_id="ep1",
        kind=WorkerKind.LOCAL,
        state=state,
        version=1,
        started_at=now,
        owner=owner,
    )


async def held_job(services: Services, worker_id: str) -> str:
    """A job submitted and claimed by ``worker_id``; returns its id."""
    endpoint = await services.store.get_endpoint("ep1")
    assert endpoint is not None
    job = await services.jobs.submit(
        endpoint, parse_job_request(b'{"input": {}}', endpoint.spec.executionTimeoutMs), sync=False
    )
    now = services.clock.now()
    claimed = await services.store.claim_jobs("ep1", worker_id, 1, now, now + 30)
    assert [j.id for j in claimed] == [job.id]
    return job.id


@pytest.fixture
async def endpoint(services: Services) -> None:
    await services.store.create_endpoint(
        Endpoint(
            id="ep1",
            userId="u1",
            version=1,
            createdAt=services.clock.now(),
            spec=EndpointSpec(name="ep", templateId="t1", computeType=ComputeType.CPU),
        )
    )


async def test_own_records_without_a_process_are_forgotten_and_their_jobs_requeued(
    services: Services, endpoint: None
) -> None:
    me = services.workers.replica_id
    await services.workers.add(record("ghost", me, WorkerState.RUNNING, services.clock.now()))
    job_id = await held_job(services, "ghost")

    forgotten = await services.fleet.forget_stale_own(leading=True)

    assert [w.id for w in forgotten] == ["ghost"]
    assert await services.workers.get("ghost") is None
    job = await services.store.get_job("ep1", job_id)
    assert job is not None and job.status is JobStatus.IN_QUEUE


async def test_a_leader_keeps_its_pending_records_and_a_follower_drops_them(
    services: Services, endpoint: None
) -> None:
    me = services.workers.replica_id
    await services.workers.add(record("waiting", me, WorkerState.THROTTLED, services.clock.now()))

    assert await services.fleet.forget_stale_own(leading=True) == []
    assert [w.id for w in await services.fleet.forget_stale_own(leading=False)] == ["waiting"]


async def test_records_of_other_replicas_and_external_workers_are_not_this_replicas_to_forget(
    services: Services, endpoint: None
) -> None:
    now = services.clock.now()
    await services.workers.add(record("theirs", "replica-b", WorkerState.IDLE, now))
    external = record("ext", None, WorkerState.IDLE, now)
    external.kind = WorkerKind.EXTERNAL
    await services.workers.add(external)

    assert await services.fleet.forget_stale_own(leading=False) == []


async def test_the_new_leader_sweeps_the_workers_of_dead_replicas_only(
    services: Services, endpoint: None
) -> None:
    now = services.clock.now()
    await services.workers.add(record("dead-1", "replica-dead", WorkerState.RUNNING, now))
    await services.workers.add(record("live-1", "replica-live", WorkerState.IDLE, now))
    job_id = await held_job(services, "dead-1")

    async def alive(ids: Iterable[str]) -> set[str]:
        return {i for i in ids if i == "replica-live"}

    swept = await services.fleet.sweep_dead(alive, same_host=False)

    assert [w.id for w in swept] == ["dead-1"]
    assert await services.workers.get("live-1") is not None
    job = await services.store.get_job("ep1", job_id)
    assert job is not None and job.status is JobStatus.IN_QUEUE


async def test_the_swept_workers_homes_on_this_host_go_with_them(
    services: Services, endpoint: None
) -> None:
    """A crashed server's workers left their homes behind; kept, they would count against the
    next worker's disk budget and end it as a failed start."""
    now = services.clock.now()
    await services.workers.add(record("dead-1", "replica-dead", WorkerState.RUNNING, now))
    home = services.fleet.home("ep1", "dead-1")
    home.mkdir(parents=True)
    (home / "left.bin").write_bytes(b"x" * 1024)

    async def alive(ids: Iterable[str]) -> set[str]:
        return set()

    await services.fleet.sweep_dead(alive, same_host=True)

    assert not home.parent.exists()


async def test_a_process_whose_record_was_deleted_elsewhere_is_stopped(
    services: Services, endpoint: None, tmp_path: Path
) -> None:
    """An endpoint deleted through another replica takes its workers' records with it; the
    replica running the process notices and ends it."""
    template = Template(
        id="t1",
        name="sleeper",
        imageName="local/sleeper",
        dockerStartCmd=[sys.executable, "-c", "import time; time.sleep(60)"],
    )
    await services.store.create_template("u1", template, services.clock.now())
    endpoint_record = await services.store.get_endpoint("ep1")
    assert endpoint_record is not None
    worker = await services.fleet.start_worker(endpoint_record)
    assert worker is not None and worker.pid is not None
    provider = services.fleet.provider
    assert provider is not None and worker.id in provider.running()

    await services.store.delete_endpoint("ep1", 0.0)
    await services.fleet.reap_orphans()

    await eventually_async(
        lambda: worker.id not in provider.running(), "the orphaned worker's process to end"
    )


async def test_replicas_starting_together_both_bootstrap_the_administrator(
    store: SQLiteStore, clock: ManualClock
) -> None:
    first, second = Auth(store, clock, 0), Auth(store, clock, 0)
    await asyncio.gather(
        first.bootstrap_admin("sk_shared_key_0123456789"),
        second.bootstrap_admin("sk_shared_key_0123456789"),
    )
    user = await first.authenticate("sk_shared_key_0123456789")
    assert user.is_admin
