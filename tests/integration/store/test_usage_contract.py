"""Contract tests of the store's usage (``Store.*usage*``, billing): every test runs on SQLite
(a real database file) and on PostgreSQL (a fresh schema; skipped when no server is reachable).

At most one usage of a subject is open at once, whoever opens it; an end is never before its
start; a usage last seen long ago ends where it was last seen; a user reads only their own
usages that overlap the range asked for. A run of a public model's caller's job is recorded by
whatever ends it, in the same operation, and once however often (or however many replicas at
once) end it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from integration.store import test_store_contract as contract
from integration.store.test_store_contract import EP, T0, make_endpoint, make_job, make_worker
from skiff.domain.billing import Usage, UsageKind
from skiff.domain.jobs import JobStatus
from skiff.domain.public_models import PublicModel
from skiff.domain.volumes import NetworkVolume
from skiff.store.base import Store

#: The meter's allowance past a usage's last sighting.
GAP = 60.0
db_path = contract.db_path
store = contract.store


def usage(usage_id: str = "u-1", **changes: Any) -> Usage:
    fields: dict[str, Any] = {
        "id": usage_id,
        "user_id": "alice",
        "kind": UsageKind.WORKER,
        "started_at": T0,
        "endpoint_id": "ep-1",
        "instance_id": "w-1",
        "gpu_type": "NVIDIA A40",
        "gpu_count": 2,
        **changes,
    }
    return Usage(**fields)


async def test_an_open_usage_reads_back_as_written(store: Store) -> None:
    assert await store.open_usage(usage(), "worker:w-1", T0 + 1)
    assert await store.open_usages() == [("worker:w-1", usage(), T0 + 1)]


async def test_a_subject_has_at_most_one_open_usage(store: Store) -> None:
    assert await store.open_usage(usage("u-1"), "worker:w-1", T0)
    assert not await store.open_usage(usage("u-2"), "worker:w-1", T0)
    assert await store.end_usage("worker:w-1", T0 + 10, GAP)
    assert await store.open_usage(usage("u-3", started_at=T0 + 10), "worker:w-1", T0 + 10)
    assert [u.id for _, u, _ in await store.open_usages()] == ["u-3"]


async def test_an_ended_usage_is_recorded_as_it_is(store: Store) -> None:
    ended = usage(ended_at=T0 + 60)
    assert await store.open_usage(ended, "worker:w-1", T0 + 60)
    assert await store.open_usage(usage("u-2"), "worker:w-1", T0)  # none of it open: opens
    assert [u.id for u in await store.usages_of("alice", T0, T0 + 100)] == ["u-1", "u-2"]
    assert [u.id for _, u, _ in await store.open_usages()] == ["u-2"]


async def test_an_end_is_never_before_the_start(store: Store) -> None:
    await store.open_usage(usage(started_at=T0 + 5), "worker:w-1", T0 + 5)
    assert await store.end_usage("worker:w-1", T0, GAP)
    (ended,) = await store.usages_of("alice", T0, T0 + 100)
    assert ended.ended_at == T0 + 5
    assert not await store.end_usage("worker:w-1", T0 + 50, GAP)  # none open any more


async def test_an_end_long_after_the_last_sighting_is_put_a_gap_after_it(store: Store) -> None:
    await store.open_usage(usage(), "worker:w-1", T0 + 10)
    assert await store.end_usage("worker:w-1", T0 + 3600, 4.0)
    (ended,) = await store.usages_of("alice", T0, T0 + 7200)
    assert ended.ended_at == T0 + 14


async def test_a_usage_unseen_since_a_time_ends_where_it_was_last_seen(store: Store) -> None:
    await store.open_usage(usage("u-1"), "worker:w-1", T0)
    await store.open_usage(usage("u-2", instance_id="w-2"), "worker:w-2", T0)
    await store.touch_usages(T0 + 30)
    await store.end_usage("worker:w-2", T0 + 40, GAP)
    assert await store.end_unseen_usages(T0 + 100) == 1
    ended = {u.id: u.ended_at for u in await store.usages_of("alice", T0, T0 + 1000)}
    assert ended == {"u-1": T0 + 30, "u-2": T0 + 40}
    assert await store.open_usages() == []


async def test_a_user_reads_their_own_usages_overlapping_the_range(store: Store) -> None:
    await store.open_usage(usage("early"), "worker:a", T0)
    await store.end_usage("worker:a", T0 + 10, GAP)
    await store.open_usage(usage("late", started_at=T0 + 50), "worker:b", T0 + 50)
    await store.open_usage(usage("bobs", user_id="bob", started_at=T0), "worker:c", T0)
    assert [u.id for u in await store.usages_of("alice", T0 + 5, T0 + 60)] == ["early", "late"]
    assert [u.id for u in await store.usages_of("alice", T0 + 10, T0 + 50)] == []
    assert [u.id for u in await store.usages_of("alice", T0 + 60, T0 + 70)] == ["late"]
    assert [u.id for u in await store.usages_of("bob", T0, T0 + 70)] == ["bobs"]


async def test_every_owners_network_volumes_are_listed_for_the_meter(store: Store) -> None:
    for owner, volume_id, at in (("alice", "v-1", T0), ("bob", "v-2", T0 + 1)):
        made = NetworkVolume(
            id=volume_id, name=volume_id, size=5, dataCenterId="local", createdAt=at
        )
        await store.create_network_volume(owner, made)
    assert [(o, v.id, v.size) for o, v in await store.all_network_volumes()] == [
        ("alice", "v-1", 5),
        ("bob", "v-2", 5),
    ]


# -- public models' callers' runs -------------------------------------------------------------


async def _a_callers_job_running(store: Store, **job: Any) -> None:
    """Endpoint ``EP``, published as "m1", runs bob's job "j-1" on its worker "w-1" (two GPUs)
    from ``T0 + 1``."""
    await store.create_endpoint(make_endpoint())
    await store.publish_model(PublicModel("m1", EP, "", "u-1", T0))
    await store.save_worker(replace(make_worker("w-1"), gpu="NVIDIA A40", gpu_ids="0,1"))
    await store.insert_job(make_job("j-1", caller_id="bob", **job))
    [claimed] = await store.claim_jobs(EP, "w-1", 1, now=T0 + 1, lease_until=T0 + 61)
    assert claimed.id == "j-1"


def _run(ended_at: float, attempt: int = 1, retries: int = 0) -> Usage:
    """bob's run of "j-1", from ``T0 + 1``, as it is billed."""
    return Usage(
        id=f"call:j-1:{retries}:{attempt}",
        user_id="bob",
        kind=UsageKind.WORKER,
        started_at=T0 + 1,
        ended_at=ended_at,
        endpoint_id="m1",
        instance_id="w-1",
        gpu_type="NVIDIA A40",
        gpu_count=2,
    )


#: Each way a running job's run ends (T0 + 8 unless said), and when that run is billed to.
ENDS: dict[str, tuple[Callable[[Store], Awaitable[object]], float]] = {
    "its worker's result": (
        lambda s: s.finish_job("j-1", "w-1", JobStatus.COMPLETED, "1", None, T0 + 8),
        T0 + 8,
    ),
    "a cancel": (lambda s: s.cancel_job(EP, "j-1", T0 + 8), T0 + 8),
    "its execution timeout": (lambda s: s.time_out_jobs(T0 + 8), T0 + 8),
    "its ttl": (lambda s: s.expire_jobs(T0 + 8, 10), T0 + 8),
    "its worker lost": (lambda s: s.release_jobs("w-1", T0 + 8, 3, "lost"), T0 + 8),
    "its worker lost unseen since": (
        lambda s: s.release_jobs("w-1", T0 + 30, 3, "lost", alive_until=T0 + 8),
        T0 + 8,
    ),
    "its worker lost on its last attempt": (
        lambda s: s.release_jobs("w-1", T0 + 8, 1, "lost"),
        T0 + 8,
    ),
    "its lease lapsed": (lambda s: s.release_jobs(None, T0 + 62, 3, "lapsed"), T0 + 62),
    "its endpoint deleted": (lambda s: s.delete_endpoint(EP, T0 + 8), T0 + 8),
}


@pytest.mark.parametrize("end", list(ENDS), ids=list(ENDS))
async def test_a_callers_run_is_recorded_once_by_whatever_ends_it_however_often(
    store: Store, end: str
) -> None:
    """Two at once (two replicas, or a retry racing the first): one ends the run, and the run
    is recorded once."""
    await _a_callers_job_running(store, execution_timeout_ms=7_000, ttl_ms=8_000)
    ending, ended_at = ENDS[end]
    await asyncio.gather(ending(store), ending(store))
    await ending(store)
    assert await store.usages_of("bob", T0, T0 + 100) == [_run(ended_at)]


async def test_the_owners_own_job_records_no_run(store: Store) -> None:
    await store.create_endpoint(make_endpoint())
    await store.publish_model(PublicModel("m1", EP, "", "u-1", T0))
    await store.insert_job(make_job("j-1"))
    await store.claim_jobs(EP, "w-1", 1, now=T0 + 1, lease_until=T0 + 61)
    await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, "1", None, T0 + 8)
    assert await store.usages_of("u-1", T0, T0 + 100) == []
    assert await store.open_usages() == []


async def test_a_callers_job_that_never_ran_records_nothing(store: Store) -> None:
    await store.create_endpoint(make_endpoint())
    await store.insert_job(make_job("j-1", caller_id="bob"))
    assert await store.cancel_job(EP, "j-1", T0 + 8) is not None
    assert await store.usages_of("bob", T0, T0 + 100) == []


async def test_each_run_of_a_callers_job_is_recorded_apart(store: Store) -> None:
    """Queued again by its worker's loss, then run to a failure, retried and run again: three
    runs, each its own record."""
    await _a_callers_job_running(store)
    await store.release_jobs("w-1", T0 + 8, 3, "lost")
    await store.claim_jobs(EP, "w-1", 1, now=T0 + 10, lease_until=T0 + 70)
    await store.finish_job("j-1", "w-1", JobStatus.FAILED, None, "boom", T0 + 12)
    assert await store.retry_job(EP, "j-1") is not None
    await store.claim_jobs(EP, "w-1", 1, now=T0 + 20, lease_until=T0 + 80)
    await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, "1", None, T0 + 25)
    billed = await store.usages_of("bob", T0, T0 + 100)
    assert [(u.id, u.started_at, u.ended_at) for u in billed] == [
        ("call:j-1:0:1", T0 + 1, T0 + 8),
        ("call:j-1:1:2", T0 + 10, T0 + 12),
        ("call:j-1:2:1", T0 + 20, T0 + 25),
    ]


async def test_a_run_of_a_model_withdrawn_meanwhile_is_recorded_under_its_endpoint(
    store: Store,
) -> None:
    await _a_callers_job_running(store)
    assert await store.unpublish_model("m1")
    await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, "1", None, T0 + 8)
    assert await store.usages_of("bob", T0, T0 + 100) == [replace(_run(T0 + 8), endpoint_id=EP)]
