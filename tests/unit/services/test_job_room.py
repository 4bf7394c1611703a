"""A user's share of the database: the store's figure read at most once a second per user on
the injected clock, what was admitted since counted in between, each user apart, and no bound
at 0. (The store's figures themselves: tests/integration/store/test_job_bytes_contract.py.)"""

from __future__ import annotations

from typing import cast

import pytest

from skiff.clock import ManualClock
from skiff.errors import InsufficientStorage
from skiff.services.job_room import MIB, RETRY_AFTER_SECONDS, JobRoom, JobRoomMetrics
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


async def test_the_refusals_are_counted_on_metrics() -> None:
    figures, clock = Figures(), ManualClock()
    figures.held["alice"] = 10 * MIB
    room = room_of(figures, clock)
    for _ in range(3):
        with pytest.raises(InsufficientStorage):
            await room.admit("alice", 1)
    (family,) = JobRoomMetrics(room).collect()
    assert family.name == "skiff_jobs_refused_for_user_bytes"
    assert [s.value for s in family.samples if s.name.endswith("_total")] == [3]
