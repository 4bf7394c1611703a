"""How often the scaler may run a reconcile pass: a burst at once, then one per gap."""

from __future__ import annotations

import pytest

from skiff.services.scaler import BURST, MIN_GAP_SECONDS, Passes


def run_passes(passes: Passes, now: float, count: int) -> list[float]:
    """When ``count`` passes wanted back to back from ``now`` run (waiting as told)."""
    ran = []
    for _ in range(count):
        now += passes.wait_before_next(now)
        passes.take(now)
        ran.append(now)
    return ran


def test_after_a_quiet_spell_a_burst_of_passes_runs_at_once() -> None:
    passes = Passes(0.0)
    assert run_passes(passes, 10.0, BURST) == [10.0] * BURST


def test_beyond_the_burst_passes_come_one_per_gap() -> None:
    passes = Passes(0.0)
    ran = run_passes(passes, 10.0, BURST + 3)
    gaps = [b - a for a, b in zip(ran[BURST - 1 :], ran[BURST:], strict=False)]
    assert gaps == [pytest.approx(MIN_GAP_SECONDS)] * 3


def test_the_burst_comes_back_after_being_quiet_long_enough() -> None:
    passes = Passes(0.0)
    run_passes(passes, 10.0, BURST + 5)
    later = 10.0 + 60.0
    assert run_passes(passes, later, BURST) == [later] * BURST


def test_a_new_endpoint_and_its_first_job_each_get_a_pass_at_once() -> None:
    # The endpoint's creation wakes the scaler, and 10 ms later its first job does.
    passes = Passes(0.0)
    assert run_passes(passes, 5.0, 1) == [5.0]
    assert run_passes(passes, 5.01, 1) == [5.01]
