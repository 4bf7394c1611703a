"""Contract tests of the store's usage (``Store.*usage*``, billing): every test runs on SQLite
(a real database file) and on PostgreSQL (a fresh schema; skipped when no server is reachable).

At most one usage of a subject is open at once, whoever opens it; an end is never before its
start; a usage last seen long ago ends where it was last seen; a user reads only their own
usages that overlap the range asked for."""

from __future__ import annotations

from typing import Any

from integration.store import test_store_contract as contract
from integration.store.test_store_contract import T0
from skiff.domain.billing import Usage, UsageKind
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
