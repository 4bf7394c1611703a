"""A worker's call-in (``Workers.seen``) through an endpoint that is not its own: refused, and
the worker left as it was, whichever replica answers (one that holds no copy of its record
asks the store). And the copies of records each replica keeps: on a follower, gone by
themselves once the leader forgets their workers, never more than the cap, and never trusted
over the store to refuse a call. The real service on a real SQLite store."""

from __future__ import annotations

import pytest

from skiff.clock import ManualClock
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.errors import Conflict
from skiff.services.workers import TOUCH_EVERY_SECONDS, Workers
from skiff.store.sqlite import SQLiteStore


async def test_a_call_naming_another_endpoints_worker_is_refused_and_changes_nothing(
    store: SQLiteStore, clock: ManualClock
) -> None:
    starting = Worker(
        id="w-bob",
        endpoint_id="ep-bob",
        kind=WorkerKind.LOCAL,
        state=WorkerState.INITIALIZING,
        version=1,
        started_at=clock.now(),
    )
    await store.save_worker(starting)
    # A replica that has never seen the worker: no copy of its record to check against.
    other_replica = Workers(store, clock)

    with pytest.raises(Conflict, match="in use by another endpoint"):
        await other_replica.seen("ep-alice", "w-bob", version=1)

    worker = await store.get_worker("w-bob")
    assert worker is not None
    assert worker.state is WorkerState.INITIALIZING and worker.last_seen is None


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
    ids = [f"w-{n}" for n in range(20)]
    for worker_id in ids:
        await follower.seen("ep-a", worker_id, version=1)
    assert follower.copies_held() == len(ids)
    clock.advance(LIFETIME / 2)
    for worker_id in ids:
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

    assert follower.copy("w-busy") is not None


async def test_a_fresh_copy_is_answered_without_the_store(
    store: SQLiteStore, clock: ManualClock
) -> None:
    leader, follower = replicas(store, clock)
    first = await follower.seen("ep-a", "w-1", version=1)
    await leader.remove("w-1")
    clock.advance(TOUCH_EVERY_SECONDS / 2)

    # The store has no such worker now, but a copy touched this recently is not checked.
    assert await follower.seen("ep-a", "w-1", version=1) is first
    assert await store.get_worker("w-1") is None


async def test_a_follower_follows_the_store_when_a_worker_id_moved_to_another_endpoint(
    store: SQLiteStore, clock: ManualClock
) -> None:
    leader, follower = replicas(store, clock)
    await follower.seen("ep-a", "w-moved", version=1)
    await leader.remove("w-moved")
    await leader.seen("ep-b", "w-moved", version=1)

    # Not refused from the follower's stale copy: the store says the id is ep-b's now.
    worker = await follower.seen("ep-b", "w-moved", version=1)
    assert worker.endpoint_id == "ep-b"
    copy = follower.copy("w-moved")
    assert copy is not None and copy.endpoint_id == "ep-b"
    # And through its old endpoint it is refused now, by what the store says.
    with pytest.raises(Conflict, match="in use by another endpoint"):
        await follower.seen("ep-a", "w-moved", version=1)


async def test_a_stale_copy_of_a_worker_the_store_no_longer_has_is_dropped(
    store: SQLiteStore, clock: ManualClock
) -> None:
    leader, follower = replicas(store, clock)
    await leader.seen("ep-b", "w-gone", version=1)
    await follower.seen("ep-b", "w-gone", version=1)
    await leader.remove("w-gone")

    # Named through ep-a, a new outside worker of ep-a; the copy of ep-b's goes with it.
    worker = await follower.seen("ep-a", "w-gone", version=1)
    assert worker.endpoint_id == "ep-a"
    copy = follower.copy("w-gone")
    assert copy is not None and copy.endpoint_id == "ep-a"


async def test_a_replica_holds_no_more_copies_than_its_cap(
    store: SQLiteStore, clock: ManualClock
) -> None:
    _, follower = replicas(store, clock, copies_max=8)
    for n in range(30):
        await follower.seen("ep-a", f"w-{n}", version=1)
        assert follower.copies_held() <= 8

    assert follower.copies_held() == 8
    assert follower.copy("w-29") is not None  # the newest are the ones kept
