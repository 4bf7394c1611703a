"""A worker's call-in (``Workers.seen``): names are each endpoint's own, so a call naming a
worker of another endpoint is an outside worker of the caller's, kept apart and never refused,
and the other worker is left as it was, whichever replica answers (one that holds no copy of
its record asks the store). And the copies of records each replica keeps: on a follower, gone
by themselves once the leader forgets their workers, never more than the cap, and never
trusted over the store. The real service on a real SQLite store."""

from __future__ import annotations

from skiff.clock import ManualClock
from skiff.domain.workers import Worker, WorkerKind, WorkerState, outside_key
from skiff.services.workers import TOUCH_EVERY_SECONDS, Workers
from skiff.store.sqlite import SQLiteStore


async def test_a_call_naming_another_endpoints_worker_is_a_worker_of_its_own(
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
    """Outside workers name themselves (``RUNPOD_POD_ID``): a tenant who calls in first
    under a name another tenant uses neither keeps that tenant's worker out nor shares a
    record with it, and each goes on being found under its own endpoint."""
    mallory, alice = Workers(store, clock, "replica-1"), Workers(store, clock, "replica-2")
    squatter = await mallory.seen("ep-mallory", "gpu-box-1", version=1)

    first = await alice.seen("ep-alice", "gpu-box-1", version=3)
    clock.advance(TOUCH_EVERY_SECONDS * 2)  # past the copies: the store is asked again
    again = await alice.seen("ep-alice", "gpu-box-1", version=3)
    from_mallorys_replica = await mallory.seen("ep-alice", "gpu-box-1", version=3)

    assert squatter.id == "gpu-box-1" and squatter.endpoint_id == "ep-mallory"
    assert first.id == again.id == from_mallorys_replica.id == outside_key("ep-alice", "gpu-box-1")
    assert {w.id for w in await store.list_workers("ep-alice")} == {first.id}
    assert {w.id for w in await store.list_workers("ep-mallory")} == {"gpu-box-1"}
    assert first.name == squatter.name == "gpu-box-1"


async def test_a_name_kept_apart_stays_so_after_the_other_worker_goes(
    store: SQLiteStore, clock: ManualClock
) -> None:
    """The first record an endpoint has under a name is the one it keeps using, so its
    worker's jobs stay its own when the name falls free."""
    workers = Workers(store, clock)
    await workers.seen("ep-b", "w-1", version=1)
    kept_apart = await workers.seen("ep-a", "w-1", version=1)
    await workers.remove("w-1")
    clock.advance(TOUCH_EVERY_SECONDS * 2)

    assert (await workers.seen("ep-a", "w-1", version=1)).id == kept_apart.id
    assert await store.get_worker("w-1") is None


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
    # Through its old endpoint it is a worker of that endpoint's own now, kept apart.
    apart = await follower.seen("ep-a", "w-moved", version=1)
    assert (apart.id, apart.endpoint_id) == (outside_key("ep-a", "w-moved"), "ep-a")


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
