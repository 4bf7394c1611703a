"""A worker's log pace: a burst at once, then a rate; what is over it becomes a wait."""

from __future__ import annotations

import pytest

from skiff.domain.log_pace import LogPace, PacesByUser

KIB = 1024


def test_a_burst_is_written_without_waiting() -> None:
    pace = LogPace.full(rate=100 * KIB, burst=400 * KIB, now=0.0)
    assert [pace.spend(100 * KIB, 0.0) for _ in range(4)] == [0.0, 0.0, 0.0, 0.0]


def test_past_the_burst_the_wait_is_what_the_rate_owes() -> None:
    pace = LogPace.full(rate=100 * KIB, burst=100 * KIB, now=0.0)
    assert pace.spend(100 * KIB, 0.0) == 0.0
    assert pace.spend(50 * KIB, 0.0) == pytest.approx(0.5)
    # Waiting it out pays the debt; the next chunk owes only for itself.
    assert pace.spend(10 * KIB, 0.5) == pytest.approx(0.1)


def test_over_time_the_output_comes_at_the_rate() -> None:
    pace = LogPace.full(rate=64 * KIB, burst=64 * KIB, now=0.0)
    now, written = 0.0, 0
    while now < 10.0:
        written += 16 * KIB
        now += pace.spend(16 * KIB, now)
    assert written == pytest.approx(64 * KIB * 11, rel=0.01)  # the burst, then 10 s of rate


def test_idle_time_refills_no_more_than_the_burst() -> None:
    pace = LogPace.full(rate=100 * KIB, burst=200 * KIB, now=0.0)
    pace.spend(200 * KIB, 0.0)
    assert pace.spend(200 * KIB, 3600.0) == 0.0
    assert pace.spend(1 * KIB, 3600.0) > 0


def test_a_clock_that_steps_back_takes_nothing_away() -> None:
    pace = LogPace.full(rate=100 * KIB, burst=100 * KIB, now=10.0)
    pace.spend(50 * KIB, 10.0)
    assert pace.spend(10 * KIB, 5.0) == 0.0
    assert pace.tokens == pytest.approx(40 * KIB)
    # And the step back is not counted as time passed when the clock comes forward again.
    assert pace.spend(40 * KIB, 10.0) == 0.0


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (1, 0), (-1, 1)])
def test_a_pace_needs_a_rate_and_a_burst(rate: float, burst: float) -> None:
    with pytest.raises(ValueError, match="rate and a burst"):
        LogPace.full(rate=rate, burst=burst, now=0.0)


def test_a_user_has_one_pace_for_all_of_their_logs_and_another_user_another() -> None:
    paces = PacesByUser(rate=100 * KIB, burst=100 * KIB)
    first = paces.of("alice", 0.0)
    assert paces.of("alice", 5.0) is first
    first.spend(100 * KIB, 0.0)
    assert paces.of("bob", 0.0).spend(100 * KIB, 0.0) == 0.0
