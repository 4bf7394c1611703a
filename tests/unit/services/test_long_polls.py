"""The long-polls one worker, and one user's workers, may hold at once (``LongPolls``)."""

from __future__ import annotations

import contextlib

import pytest

from skiff.errors import TooManyRequests
from skiff.services.long_polls import LongPolls


def test_a_worker_past_its_bound_is_refused_and_its_other_polls_are_not_counted_twice() -> None:
    polls = LongPolls(per_worker=2, per_user=10)
    with polls.hold("u1", "ep1", "w1"), polls.hold("u1", "ep1", "w1"):
        with pytest.raises(TooManyRequests, match="worker w1 holds 2 long-polls"):
            polls.hold("u1", "ep1", "w1")
        # Another worker of the same user has its own bound.
        with polls.hold("u1", "ep1", "w2"):
            assert polls.held_by("u1") == 3
    assert polls.held_by("u1") == 0
    with polls.hold("u1", "ep1", "w1"):
        pass


def test_a_users_workers_together_are_bounded_and_other_users_are_not() -> None:
    polls = LongPolls(per_worker=2, per_user=3)
    with polls.hold("u1", "ep1", "a"), polls.hold("u1", "ep1", "b"), polls.hold("u1", "ep1", "c"):
        with pytest.raises(TooManyRequests, match="owner hold 3 long-polls") as refused:
            polls.hold("u1", "ep1", "d")
        assert refused.value.retry_after == 1
        with polls.hold("u2", "ep1", "e"):
            assert polls.held_by("u2") == 1


def test_a_poll_that_fails_gives_its_place_back() -> None:
    polls = LongPolls(per_worker=1, per_user=1)
    with pytest.raises(RuntimeError), polls.hold("u1", "ep1", "w1"):
        raise RuntimeError("the take failed")
    assert polls.held_by("u1") == 0
    with polls.hold("u1", "ep1", "w1"):
        pass


def test_a_poll_naming_another_endpoints_worker_does_not_use_up_its_room() -> None:
    """Worker ids are one namespace: another tenant's token names ``w1`` through its own
    endpoint (and is refused, 409, once its take runs); ``w1``'s own polls keep their room."""
    polls = LongPolls(per_worker=2, per_user=10)
    with contextlib.ExitStack() as held:
        for user_id, endpoint_id in [("mallory", "ep-m")] * 2 + [("alice", "ep-a")] * 2:
            held.enter_context(polls.hold(user_id, endpoint_id, "w1"))
        with pytest.raises(TooManyRequests, match="worker w1 holds 2"):
            polls.hold("alice", "ep-a", "w1")
