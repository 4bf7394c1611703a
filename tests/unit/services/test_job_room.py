"""A user's share of the database: the store's figure read at most once a second per user on
the injected clock, what was admitted since counted in between (by requests that missed the
figure together too), each user apart, what workers write refused only past twice the share,
and no bound at 0. (The store's figures: tests/integration/store/test_job_bytes_contract.py.)"""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from skiff.clock import ManualClock
from skiff.errors import InsufficientStorage
from skiff.services.job_room import (
    MIB,
    RESULTS_ROOM,
    RETRY_AFTER_SECONDS,
    JobRoom,
    JobRoomMetrics,
)
from skiff.store.base import Store


class Figures:
    """The one store call the room makes, answering what the test sets and counting reads."""

    def __init__(self) -> None:
        self.held: dict[str, int] = {}
        self.reads = 0

    async def job_bytes_of(self, user_id: str) -> int:
        self.reads += 1
        return self.held.get(user_id, 0)


def room_of(figures: Figures, clock: ManualClock, most: int = 10 * MIB) -> JobRoom:
    return JobRoom(cast(Store, figures), clock, most)


async def test_jobs_are_admitted_under_the_bound_with_one_read_a_second() -> None:
    figures, clock = Figures(), ManualClock()
    room = room_of(figures, clock)
    for _ in range(5):
        await room.admit("alice", MIB)
    assert figures.reads == 1
    clock.advance(1.0)
    await room.admit("alice", MIB)
    assert figures.reads == 2


async def test_what_was_admitted_since_the_read_counts_so_a_burst_stops_at_the_bound() -> None:
    figures, clock = Figures(), ManualClock()
    figures.held["alice"] = 7 * MIB
    room = room_of(figures, clock)
    await room.admit("alice", 2 * MIB)
    await room.admit("alice", MIB)  # exactly the bound
    with pytest.raises(InsufficientStorage) as refused:
        await room.admit("alice", 1)
    assert refused.value.status_code == 507
    assert refused.value.retry_after == RETRY_AFTER_SECONDS
    assert "your jobs hold 10 MiB" in refused.value.message
    assert "nothing of this request was kept" in refused.value.message
    assert room.refused == 1


async def test_a_refusal_lasts_until_the_store_says_bytes_were_given_back() -> None:
    figures, clock = Figures(), ManualClock()
    figures.held["alice"] = 10 * MIB
    room = room_of(figures, clock)
    with pytest.raises(InsufficientStorage):
        await room.admit("alice", 100)
    figures.held["alice"] = 4 * MIB  # results collected, a queue purged
    with pytest.raises(InsufficientStorage):
        await room.admit("alice", 100)  # the figure of this second still stands
    clock.advance(1.0)
    await room.admit("alice", 100)
    # What was admitted before the new read is in the store's figure now: not counted twice.
    await room.admit("alice", 6 * MIB - 100)


async def test_each_user_is_held_to_their_own_figure() -> None:
    figures, clock = Figures(), ManualClock()
    figures.held["mallory"] = 10 * MIB
    room = room_of(figures, clock)
    with pytest.raises(InsufficientStorage):
        await room.admit("mallory", 1)
    await room.admit("alice", 5 * MIB)
    await room.admit("bob", 5 * MIB)


async def test_a_bound_of_zero_admits_everything_without_reading() -> None:
    figures, clock = Figures(), ManualClock()
    figures.held["alice"] = 10**12
    room = room_of(figures, clock, most=0)
    await room.admit("alice", 10**9)
    assert figures.reads == 0


async def test_requests_that_miss_the_figure_together_share_one_count() -> None:
    """Fifty submissions arriving while the figure is read: only what fits is admitted."""
    figures, clock = Figures(), ManualClock()
    figures.held["alice"] = 9 * MIB
    gate = asyncio.Event()
    read = figures.job_bytes_of

    async def slow_read(user_id: str) -> int:
        await gate.wait()
        return await read(user_id)

    figures.job_bytes_of = slow_read  # type: ignore[method-assign]
    room = room_of(figures, clock)
    tries = [asyncio.ensure_future(room.admit("alice", MIB)) for _ in range(50)]
    await asyncio.sleep(0)
    gate.set()
    outcomes = await asyncio.gather(*tries, return_exceptions=True)
    assert sum(o is None for o in outcomes) == 1
    assert all(isinstance(o, InsufficientStorage) for o in outcomes if o is not None)


async def test_what_a_worker_writes_is_refused_only_past_twice_the_share() -> None:
    figures, clock = Figures(), ManualClock()
    figures.held["owner"] = 10 * MIB  # new jobs refused already
    room = room_of(figures, clock)
    with pytest.raises(InsufficientStorage):
        await room.admit("owner", 1)
    assert await room.room_for_result("owner", 6 * MIB) is None
    assert await room.room_for_result("owner", 4 * MIB) is None  # exactly twice
    why = await room.room_for_result("owner", 1)
    assert why is not None and f"{RESULTS_ROOM * 10} MiB" in why and "not kept" in why
    assert room.results_refused == 1 and room.refused == 1
    assert await room_of(figures, clock, most=0).room_for_result("owner", 10**12) is None


async def test_the_refusals_are_counted_on_metrics() -> None:
    figures, clock = Figures(), ManualClock()
    figures.held["alice"] = 20 * MIB
    room = room_of(figures, clock)
    for _ in range(3):
        with pytest.raises(InsufficientStorage):
            await room.admit("alice", 1)
    assert await room.room_for_result("alice", 1) is not None
    families = {f.name: f for f in JobRoomMetrics(room).collect()}
    assert [s.value for s in families["skiff_jobs_refused_for_user_bytes"].samples] == [3]
    assert [s.value for s in families["skiff_results_refused_for_user_bytes"].samples] == [1]
