"""The line-up rules (services/lineup.py): which workers take a list in answer to a single
take, the endpoint's execution-time estimate, and how many jobs go behind the one taken."""

from __future__ import annotations

import pytest

from skiff.services.lineup import (
    ALPHA,
    FLOOR_SECONDS,
    MAX_ENDPOINTS,
    MAX_LINEUP,
    MIN_SAMPLES,
    TICK_SECONDS,
    Lineup,
    Queue,
    accepts_lineups,
)

EP = "ep1"


def _agent(version: str) -> str:
    """The runpod SDK's own User-Agent (runpod/user_agent.py)."""
    return f"RunPod-Python-SDK/{version} (Linux 6.1.0-18-amd64; x86_64) Language/Python 3.11.9"


def _trained(seconds: float, execution_seconds: float, endpoint_id: str = EP) -> Lineup:
    """A line-up whose endpoint has just enough history, every job having run this long."""
    lineup = Lineup(seconds)
    for _ in range(MIN_SAMPLES):
        lineup.observe(endpoint_id, execution_seconds)
    return lineup


def _queue(queued: int, live_workers: int = 1, idle_others: int = 0) -> Queue:
    return Queue(queued=queued, live_workers=live_workers, idle_others=idle_others)


# -- which workers take a list ------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.12.0", "1.12.3", "1.13.0", "2.0.0"])
def test_an_sdk_from_1_12_on_takes_a_line_up(version: str) -> None:
    assert accepts_lineups(_agent(version))


@pytest.mark.parametrize("version", ["1.11.9", "1.2.0", "1.7.13", "0.10.0"])
def test_an_sdk_before_1_12_gets_one_job_per_take(version: str) -> None:
    """Compared as numbers: 1.2.0 is older than 1.12.0 though "1.2" sorts after "1.12"."""
    assert not accepts_lineups(_agent(version))


@pytest.mark.parametrize(
    "agent", ["python-httpx/0.27.0", "curl/8.5.0", "aiohttp/3.9.5", "RunPod-Python-SDK", ""]
)
def test_a_worker_that_is_not_the_sdk_gets_one_job_per_take(agent: str) -> None:
    assert not accepts_lineups(agent)


def test_a_worker_without_a_user_agent_gets_one_job_per_take() -> None:
    assert not accepts_lineups(None)


# -- the execution-time estimate ----------------------------------------------------------


def test_no_estimate_before_min_samples_jobs_finished() -> None:
    lineup = Lineup(20.0)
    assert lineup.expected_seconds(EP) is None
    for _ in range(MIN_SAMPLES - 1):
        lineup.observe(EP, 0.5)
        assert lineup.expected_seconds(EP) is None
    lineup.observe(EP, 0.5)
    assert lineup.expected_seconds(EP) == pytest.approx(0.5)


def test_the_estimate_is_a_moving_average_weighted_to_the_newest_job() -> None:
    lineup = Lineup(20.0)
    for took in (1.0, 2.0, 4.0):
        lineup.observe(EP, took)
    # 1.0, then 1.0 + 0.3 * (2.0 - 1.0) = 1.3, then 1.3 + 0.3 * (4.0 - 1.3) = 2.11
    assert lineup.expected_seconds(EP) == pytest.approx(2.11)
    lineup.observe(EP, 0.11)
    assert lineup.expected_seconds(EP) == pytest.approx(2.11 + ALPHA * (0.11 - 2.11))


def test_a_job_that_took_no_time_counts_as_the_floor() -> None:
    lineup = _trained(20.0, 0.0)
    assert lineup.expected_seconds(EP) == pytest.approx(FLOOR_SECONDS)


def test_each_endpoint_has_its_own_estimate() -> None:
    lineup = _trained(20.0, 0.5)
    assert lineup.expected_seconds("ep2") is None
    for _ in range(MIN_SAMPLES):
        lineup.observe("ep2", 3.0)
    assert lineup.expected_seconds(EP) == pytest.approx(0.5)
    assert lineup.expected_seconds("ep2") == pytest.approx(3.0)


def test_past_max_endpoints_the_longest_unseen_estimate_goes_first() -> None:
    lineup = _trained(20.0, 0.5, "first")
    for _ in range(MIN_SAMPLES):
        lineup.observe("second", 0.5)
    # "first" is seen again, so "second" is now the longest unseen.
    lineup.observe("first", 0.5)
    for n in range(MAX_ENDPOINTS - 2):
        lineup.observe(f"other{n}", 0.5)
    assert lineup.expected_seconds("second") is not None
    lineup.observe("one-more", 0.5)
    assert lineup.expected_seconds("second") is None
    assert lineup.expected_seconds("first") == pytest.approx(0.5)
    # Forgotten, it needs its history again before it lines up.
    assert lineup.extras("second", _queue(100)) == 0


# -- how many jobs go behind the one taken ------------------------------------------------


@pytest.mark.parametrize("seconds", [0.0, -1.0])
def test_no_line_up_when_turned_off(seconds: float) -> None:
    assert _trained(seconds, 0.01).extras(EP, _queue(100)) == 0


def test_no_line_up_without_history() -> None:
    lineup = Lineup(20.0)
    for _ in range(MIN_SAMPLES - 1):
        lineup.observe(EP, 0.01)
    assert lineup.extras(EP, _queue(100)) == 0


def test_the_line_up_holds_what_the_worker_runs_within_the_seconds() -> None:
    """20 s of 2 s jobs is ten jobs, the one taken among them: nine behind it."""
    assert _trained(20.0, 2.0).extras(EP, _queue(100)) == 9


def test_the_job_taken_counts_in_the_seconds() -> None:
    """Jobs as long as the whole budget leave no room behind the one taken."""
    assert _trained(2.0, 2.0).extras(EP, _queue(100)) == 0


def test_jobs_longer_than_the_seconds_are_never_lined_up() -> None:
    assert _trained(1.0, 2.0).extras(EP, _queue(100)) == 0


def test_the_line_up_leaves_the_jobs_idle_workers_wait_for() -> None:
    # 1/8 s jobs: 159 fit in 20 s, 7 within one tick, so only the queue bounds it.
    lineup = _trained(20.0, 0.125)
    assert lineup.extras(EP, _queue(10, live_workers=4, idle_others=3)) == 7
    assert lineup.extras(EP, _queue(3, live_workers=4, idle_others=3)) == 0


def test_never_more_than_is_queued() -> None:
    assert _trained(20.0, 0.125).extras(EP, _queue(2)) == 2


def test_the_line_up_is_bounded_by_the_fair_share_across_live_workers() -> None:
    """Half-second jobs, 20 queued behind the taken one and four live workers, none idle: 21
    jobs over four workers is six each, so five behind this one's."""
    lineup = _trained(20.0, 0.5)
    assert lineup.extras(EP, _queue(20, live_workers=4)) == 5
    assert lineup.extras(EP, _queue(20, live_workers=1)) == 20


def test_jobs_within_one_tick_are_lined_up_beyond_the_fair_share() -> None:
    """1/64 s jobs: a busy worker asks again only after a tick, in which it would run 64; a
    fair share of 101 jobs over ten workers (ten behind its own) would leave it idle."""
    expected = 1 / 64
    lineup = _trained(20.0, expected)
    within_tick = int(TICK_SECONDS / expected) - 1
    assert within_tick == 63
    assert lineup.extras(EP, _queue(100, live_workers=10)) == within_tick


def test_the_tick_exception_still_leaves_the_jobs_idle_workers_wait_for() -> None:
    lineup = _trained(20.0, 1 / 64)
    assert lineup.extras(EP, _queue(100, live_workers=10, idle_others=9)) == 63
    assert lineup.extras(EP, _queue(30, live_workers=10, idle_others=9)) == 21


def test_never_more_than_max_lineup() -> None:
    lineup = _trained(20.0, FLOOR_SECONDS)
    assert lineup.extras(EP, _queue(10_000)) == MAX_LINEUP


@pytest.mark.parametrize(
    "queue",
    [
        _queue(0),
        _queue(0, live_workers=3, idle_others=2),
        _queue(1, live_workers=5, idle_others=4),
        _queue(0, live_workers=0),
    ],
)
def test_the_line_up_is_never_negative(queue: Queue) -> None:
    assert _trained(20.0, 0.125).extras(EP, queue) == 0
