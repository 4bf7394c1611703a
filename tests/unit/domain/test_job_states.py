"""The job state machine: every legal move, the illegal ones, and the guards derived from it."""

from __future__ import annotations

import itertools

import pytest

from skiff.domain.jobs import FINAL_STATES, TRANSITIONS, JobStatus, sources_of

LEGAL = sorted((src, dst) for src, dsts in TRANSITIONS.items() for dst in dsts)
ILLEGAL = sorted(
    (src, dst)
    for src, dst in itertools.product(JobStatus, JobStatus)
    if dst not in TRANSITIONS[src]
)


def test_every_state_has_an_entry_in_transitions() -> None:
    assert set(TRANSITIONS) == set(JobStatus)


@pytest.mark.parametrize(("current", "target"), LEGAL, ids=[f"{s}->{d}" for s, d in LEGAL])
def test_a_legal_move_is_guarded_by_its_source(current: JobStatus, target: JobStatus) -> None:
    assert current in sources_of(target)


@pytest.mark.parametrize(("current", "target"), ILLEGAL, ids=[f"{s}->{d}" for s, d in ILLEGAL])
def test_an_illegal_move_is_refused_by_the_guard(current: JobStatus, target: JobStatus) -> None:
    assert current not in sources_of(target)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (JobStatus.IN_QUEUE, {JobStatus.IN_PROGRESS, JobStatus.FAILED, JobStatus.TIMED_OUT}),
        (JobStatus.IN_PROGRESS, {JobStatus.IN_QUEUE}),
        (JobStatus.COMPLETED, {JobStatus.IN_PROGRESS}),
        (JobStatus.FAILED, {JobStatus.IN_PROGRESS}),
        (JobStatus.TIMED_OUT, {JobStatus.IN_PROGRESS}),
        (JobStatus.CANCELLED, {JobStatus.IN_QUEUE, JobStatus.IN_PROGRESS}),
    ],
    # Named by the target alone: a set's order, and so its name, differs between processes.
    ids=lambda value: str(value) if isinstance(value, JobStatus) else "",
)
def test_sources_of_lists_the_states_that_may_move_to_target(
    target: JobStatus, expected: set[JobStatus]
) -> None:
    assert sources_of(target) == frozenset(expected)


def test_final_states_are_the_four_terminal_ones() -> None:
    assert (
        frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.TIMED_OUT})
        == FINAL_STATES
    )


@pytest.mark.parametrize("state", sorted(FINAL_STATES), ids=str)
def test_final_states_only_move_back_to_the_queue_on_retry(state: JobStatus) -> None:
    retryable = {JobStatus.FAILED, JobStatus.TIMED_OUT}
    expected = {JobStatus.IN_QUEUE} if state in retryable else set()
    assert set(TRANSITIONS[state]) == expected


def test_completed_and_cancelled_have_no_outgoing_moves() -> None:
    for state in (JobStatus.COMPLETED, JobStatus.CANCELLED):
        for target in JobStatus:
            assert state not in sources_of(target)
