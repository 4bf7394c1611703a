"""A worker's call-in (``Workers.seen``): names are each endpoint's own, so a call naming a
worker of another endpoint is an outside worker of the caller's, kept apart and never refused,
and the other worker is left as it was, whichever replica answers (one that holds no copy of
its record asks the store). And the copies of records each replica keeps: on a follower, gone
by themselves once the leader forgets their workers, never more than the cap, and never
trusted over the store. The real service on a real SQLite store."""

from __future__ import annotations

import asyncio

import pytest

from skiff.clock import ManualClock
from skiff.domain.workers import Worker, WorkerKind, WorkerState, outside_key
from skiff.services.workers import TOUCH_EVERY_SECONDS, Workers
from skiff.store.sqlite import SQLiteStore


def starting(worker_id: str, endpoint_id: str, clock: ManualClock) -> Worker:
    """A worker the server started, not called in yet."""
    return Worker(
        id=worker_id,
        endpoint_id=endpoint_id,
        kind=WorkerKind.LOCAL,
        state=WorkerState.INITIALIZING,
        version=1,
        started_at=clock.now(),
    )


async def test_a_call_naming_another_endpoints_worker_is_a_worker_of_its_own(
    store: SQLiteStore, clock: ManualClock
) -> None:
    await store.save_worker(starting("w-bob", "ep-bob", clock))
    # A replica that has never seen the worker: no copy of its record to check against.
    other_replica = Workers(store, clock)

    alices = await other_replica.seen("ep-alice", "w-bob", version=1)

    assert (alices.id, alices.endpoint_id, alices.kind) == (
        outside_key("ep-alice", "w-bob"),
        "ep-alice",
        WorkerKind.EXTERNAL,
    )
    assert alices.name == "w-bob"
    bobs = await store.get_worker("w-bob")
    assert bobs is not None
    assert bobs.state is WorkerState.INITIALIZING and bobs.last_seen is None


async def test_a_name_taken_first_by_another_tenant_keeps_no_one_out(
    store: SQLiteStore, clock: ManualClock
) -> None:
    """Outside workers name themselves (``RUNPOD_POD_ID``): a tenant who calls in first under
    a name another tenant uses neither keeps that tenant's worker out nor shares a record with
    it, and each goes on being found under its own endpoint, on either replica."""
    mallory, alice = Workers(store, clock, "replica-1"), Workers(store, clock, "replica-2")
    squatter = await mallory.seen("ep-mallory", "gpu-box-1", version=1)

    first = await alice.seen("ep-alice", "gpu-box-1", version=3)
    clock.advance(TOUCH_EVERY_SECONDS * 2)  # past the copies: the store is asked again
    again = await alice.seen("ep-alice", "gpu-box-1", version=3)
    from_mallorys_replica = await mallory.seen("ep-alice", "gpu-box-1", version=3)

    assert squatter.id == outside_key("ep-mallory", "gpu-box-1")
    assert first.id == again.id == from_mallorys_replica.id == outside_key("ep-alice", "gpu-box-1")
    assert {w.id for w in await store.list_workers("ep-alice")} == {first.id}
    assert {w.id for w in await store.list_workers("ep-mallory")} == {squatter.id}
    assert first.name == squatter.name == "gpu-box-1"


async def test_what_an_outside_worker_is_recorded_under_never_depends_on_other_tenants(
    store: SQLiteStore, clock: ManualClock
) -> None:
    """Whether another endpoint's worker had the name first or not, the record's id is the
    same: nothing of it (nor of what a tenant is shown) tells that the name is in use."""
    workers = Workers(store, clock)
    alone = await workers.seen("ep-a", "w-1", version=1)
    await workers.seen("ep-b", "w-2", version=1)
    after_another = await workers.seen("ep-a", "w-2", version=1)

    assert alone.id == outside_key("ep-a", "w-1")
    assert after_another.id == outside_key("ep-a", "w-2")
    assert await store.get_worker("w-1") is None and await store.get_worker("w-2") is None


async def test_first_calls_at_once_on_two_replicas_meet_on_one_record(
    store: SQLiteStore, clock: ManualClock
) -> None:
    """An outside worker's ping and take come together, perhaps to two replicas: one record."""
    one, other = Workers(store, clock, "replica-1"), Workers(store, clock, "replica-2")
    made = await asyncio.gather(
        one.seen("ep-a", "gpu1", version=1), other.seen("ep-a", "gpu1", version=1)
    )

    assert made[0].id == made[1].id == outside_key("ep-a", "gpu1")
    assert [w.id for w in await store.list_workers("ep-a")] == [made[0].id]


async def test_a_worker_the_server_started_is_found_under_its_own_id(
    store: SQLiteStore, clock: ManualClock
) -> None:
    workers = Workers(store, clock)
    started = await workers.add(starting("abcdefghijklmn", "ep-a", clock))
    called = await workers.seen("ep-a", "abcdefghijklmn", version=1)

    assert called.id == started.id and called.kind is WorkerKind.LOCAL
    assert called.name == "abcdefghijklmn"


# -- the copies one replica keeps -------------------------------------------------------------
# A leader and a follower on one store: only the leader forgets silent outside workers (the
# reaper), so what the follower copied of them must go by itself.

LIFETIME = 60.0


def replicas(store: SQLiteStore, clock: ManualClock, **follower: int) -> tuple[Workers, Workers]:
    leader = Workers(store, clock, "leader", copy_seconds=LIFETIME)
    return leader, Workers(store, clock, "follower", copy_seconds=LIFETIME, **follower)


async def test_a_followers_copies_of_workers_the_leader_forgot_go_after_their_lifetime(
    store: SQLiteStore, clock: ManualClock
) -> None:
    leader, follower = replicas(store, clock)
    ids = [(await follower.seen("ep-a", f"w-{n}", version=1)).id for n in range(20)]
    assert follower.copies_held() == len(ids)
    clock.advance(LIFETIME / 2)
    for worker_id in ids:
        assert await store.get_worker(worker_id) is not None
        await leader.remove(worker_id)  # what the reaper does to silent ones, on the leader

    clock.advance(LIFETIME / 2 + 1)

    assert all(follower.copy(worker_id) is None for worker_id in ids)
    assert follower.copies_held() == 0


async def test_a_copy_the_store_keeps_confirming_is_kept(
    store: SQLiteStore, clock: ManualClock
) -> None:
    _, follower = replicas(store, clock)
    await follower.seen("ep-a", "w-busy", version=1)
    for _ in range(10):
        clock.advance(LIFETIME / 4)
        await follower.seen("ep-a", "w-busy", version=1)  # touches the store every time

    assert follower.copy(outside_key("ep-a", "w-busy")) is not None


async def test_a_fresh_copy_is_answered_without_the_store(
    store: SQLiteStore, clock: ManualClock
) -> None:
    leader, follower = replicas(store, clock)
    first = await follower.seen("ep-a", "w-1", version=1)
    await leader.remove(first.id)
    clock.advance(TOUCH_EVERY_SECONDS / 2)

    # The store has no such worker now, but a copy touched this recently is not checked.
    assert await follower.seen("ep-a", "w-1", version=1) is first
    assert await store.get_worker(first.id) is None


async def test_a_follower_follows_the_store_when_a_forgotten_worker_calls_in_again(
    store: SQLiteStore, clock: ManualClock
) -> None:
    """The leader forgot a silent outside worker, which then called in again through it: the
    follower's stale copy gives way to the record the store has now."""
    leader, follower = replicas(store, clock)
    before = await follower.seen("ep-a", "w-back", version=1)
    await leader.remove(before.id)
    again = await leader.seen("ep-a", "w-back", version=2)
    clock.advance(TOUCH_EVERY_SECONDS * 2)

    worker = await follower.seen("ep-a", "w-back", version=2)
    assert worker.id == before.id and worker.version == again.version == 2
    copy = follower.copy(before.id)
    assert copy is not None and copy.version == 2


async def test_a_stale_copy_of_a_worker_the_store_no_longer_has_is_dropped(
    store: SQLiteStore, clock: ManualClock
) -> None:
    leader, follower = replicas(store, clock)
    gone = await leader.seen("ep-b", "w-gone", version=1)
    await follower.seen("ep-b", "w-gone", version=1)
    await leader.remove(gone.id)
    clock.advance(TOUCH_EVERY_SECONDS * 2)

    # Called in again, a new record: the follower does not answer from its copy of the old one.
    worker = await follower.seen("ep-b", "w-gone", version=2)
    assert worker.version == 2
    stored = await store.get_worker(gone.id)
    assert stored is not None and stored.version == 2


async def test_a_replica_holds_no_more_copies_than_its_cap(
    store: SQLiteStore, clock: ManualClock
) -> None:
    _, follower = replicas(store, clock, copies_max=8)
    for n in range(30):
        await follower.seen("ep-a", f"w-{n}", version=1)
        assert follower.copies_held() <= 8

    assert follower.copies_held() == 8
    assert follower.copy(outside_key("ep-a", "w-29")) is not None  # the newest are kept


async def test_an_outside_worker_calling_in_again_is_touched_under_its_key_alone(
    store: SQLiteStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    workers = Workers(store, clock)
    await workers.seen("ep-a", "gpu1", version=1)
    touched: list[str] = []
    touch = store.touch_worker

    async def counted(worker_id: str, endpoint_id: str, now: float) -> Worker | None:
        touched.append(worker_id)
        return await touch(worker_id, endpoint_id, now)

    monkeypatch.setattr(store, "touch_worker", counted)
    clock.advance(TOUCH_EVERY_SECONDS)
    await workers.seen("ep-a", "gpu1", version=1)

    assert touched == [outside_key("ep-a", "gpu1")]
