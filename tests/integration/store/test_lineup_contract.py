"""Contract tests of the store's line-ups (services/lineup.py, ``Store.line_up_jobs``): jobs
handed to a worker to run after the one it runs. Every test runs on SQLite (a real database
file) and on PostgreSQL (a fresh schema; skipped when no server is reachable), through the
``store`` fixture of test_store_contract.py.

A lined-up job stays IN_QUEUE with its worker and lease recorded, not started and no attempt
counted; it starts (IN_PROGRESS, ``started_at``, attempt + 1, its execution deadline) only when
the worker finishes, or is told to stop, the job before it. Time is the tests' own: plain
numbers from ``T0``, no clock is read."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from integration.store import test_store_contract as contract
from integration.store.test_store_contract import EP, T0, insert_jobs, make_job, make_worker
from skiff.domain.jobs import Job, JobCounts, JobStatus
from skiff.domain.workers import WorkerState
from skiff.store.base import Store

#: The contract tests' fixtures: ``store`` is a real SQLite file, then a fresh PostgreSQL schema.
db_path = contract.db_path
store = contract.store

#: The worker's claim and its line-up are made at this time, with this lease.
CLAIMED_AT = T0 + 1
LEASE = T0 + 61
#: Each job's executionTimeout (7 s): a started job's deadline is its start plus this.
TIMEOUT_MS = 7_000
TIMEOUT_S = TIMEOUT_MS / 1000


def job_of(job_id: str, **changes: Any) -> Job:
    return make_job(job_id, execution_timeout_ms=TIMEOUT_MS, **changes)


async def get(store: Store, job_id: str) -> Job:
    job = await store.get_job(EP, job_id)
    assert job is not None, f"{job_id} is gone"
    return job


async def running_with_lineup(
    store: Store, lined: tuple[str, ...] = ("a", "b"), worker_id: str = "w-1"
) -> list[Job]:
    """``worker_id`` (recorded, idle) claims "run" at CLAIMED_AT and gets ``lined`` lined up
    behind it; returns the lined-up jobs as ``line_up_jobs`` answered."""
    await store.save_worker(make_worker(worker_id))
    await insert_jobs(store, job_of("run"), *(job_of(job_id) for job_id in lined))
    [run] = await store.claim_jobs(EP, worker_id, 1, now=CLAIMED_AT, lease_until=LEASE)
    assert run.id == "run"
    got = await store.line_up_jobs(EP, worker_id, len(lined), now=CLAIMED_AT, lease_until=LEASE)
    assert [j.id for j in got] == list(lined)
    return got


def assert_lined_up(
    job: Job, worker_id: str = "w-1", lease: float = LEASE, attempt: int = 0
) -> None:
    assert job.status is JobStatus.IN_QUEUE, job
    assert job.worker_id == worker_id, job
    assert job.lease_until == lease, job
    assert job.started_at is None, job
    assert job.run_deadline is None, job
    assert job.finished_at is None, job
    assert job.attempt == attempt, job


def assert_started(job: Job, at: float, worker_id: str = "w-1", attempt: int = 1) -> None:
    assert job.status is JobStatus.IN_PROGRESS, job
    assert job.worker_id == worker_id, job
    assert job.started_at == at, job
    assert job.attempt == attempt, job
    assert job.run_deadline == at + TIMEOUT_S, job


def assert_back_in_queue(job: Job, attempt: int = 0, retries: int = 0) -> None:
    """Handed back as it was: no worker, no lease, no attempt or retry counted."""
    assert job.status is JobStatus.IN_QUEUE, job
    assert job.worker_id is None, job
    assert job.lease_until is None, job
    assert job.started_at is None, job
    assert job.error is None, job
    assert job.attempt == attempt, job
    assert job.retries == retries, job


async def recount(store: Store, job_ids: list[str]) -> JobCounts:
    """The counts ``job_counts`` should give, from the jobs themselves (all of EP, submitted
    in ``job_ids`` order)."""
    jobs = [j for j in [await store.get_job(EP, i) for i in job_ids] if j is not None]

    def n(status: JobStatus) -> int:
        return sum(1 for j in jobs if j.status is status)

    waiting = [j for j in jobs if j.status is JobStatus.IN_QUEUE and not j.low_priority]
    return JobCounts(
        in_queue=n(JobStatus.IN_QUEUE),
        in_progress=n(JobStatus.IN_PROGRESS),
        completed=n(JobStatus.COMPLETED),
        failed=n(JobStatus.FAILED),
        cancelled=n(JobStatus.CANCELLED),
        timed_out=n(JobStatus.TIMED_OUT),
        retried=sum(j.retries for j in jobs),
        in_queue_normal=len(waiting),
        oldest_queued_at=min((j.submitted_at for j in waiting), default=None),
    )


async def assert_counts_match(store: Store, job_ids: list[str]) -> None:
    assert await store.job_counts(EP) == await recount(store, job_ids)
    await store.fold_job_counts()
    assert await store.job_counts(EP) == await recount(store, job_ids)


# -- lining up -------------------------------------------------------------------------------


async def test_line_up_hands_queued_jobs_in_claim_order_and_leaves_them_queued_on_the_worker(
    store: Store,
) -> None:
    await store.save_worker(make_worker("w-1"))
    # "low" is the oldest waiting job, but low priority: claim order puts it last.
    await insert_jobs(store, job_of("run"), job_of("low", low_priority=True))
    await insert_jobs(store, job_of("n1"), job_of("n2"), job_of("n3"))
    await store.claim_jobs(EP, "w-1", 1, now=CLAIMED_AT, lease_until=LEASE)
    got = await store.line_up_jobs(EP, "w-1", 2, now=T0 + 2, lease_until=T0 + 62)
    assert [j.id for j in got] == ["n1", "n2"]
    more = await store.line_up_jobs(EP, "w-1", 5, now=T0 + 3, lease_until=T0 + 63)
    assert [j.id for j in more] == ["n3", "low"]
    for job, lease in zip(got + more, (T0 + 62, T0 + 62, T0 + 63, T0 + 63), strict=True):
        assert_lined_up(job, lease=lease)
        assert await get(store, job.id) == job
    assert await store.line_up_jobs(EP, "w-1", 5, now=T0 + 4, lease_until=T0 + 64) == []
    worker = await store.get_worker("w-1")
    assert worker is not None and worker.state is WorkerState.RUNNING


async def test_lined_up_jobs_start_one_by_one_in_line_up_order_across_line_ups(
    store: Store,
) -> None:
    await store.save_worker(make_worker("w-1"))
    await insert_jobs(store, job_of("run"), job_of("low", low_priority=True))
    await insert_jobs(store, job_of("n1"), job_of("n2"))
    await store.claim_jobs(EP, "w-1", 1, now=CLAIMED_AT, lease_until=LEASE)
    await store.line_up_jobs(EP, "w-1", 1, now=CLAIMED_AT, lease_until=LEASE)
    await store.line_up_jobs(EP, "w-1", 5, now=CLAIMED_AT, lease_until=LEASE)
    order = ["run", "n1", "n2", "low"]
    for i, (done, next_id) in enumerate(itertools.pairwise(order)):
        now = T0 + 10 + i
        finished = await store.finish_job(done, "w-1", JobStatus.COMPLETED, '"ok"', None, now)
        assert finished is not None and finished.status is JobStatus.COMPLETED
        assert_started(await get(store, next_id), at=now)
        for waiting in order[i + 2 :]:
            assert_lined_up(await get(store, waiting))


async def test_a_lined_up_job_keeps_the_attempts_it_had(store: Store) -> None:
    await insert_jobs(store, job_of("run"), job_of("again"))
    # A worker lost once already ran both: each counts one attempt and one retry.
    assert len(await store.claim_jobs(EP, "w-old", 2, now=T0, lease_until=T0 + 60)) == 2
    await store.release_jobs("w-old", T0 + 0.5, max_attempts=3, reason="lost")
    [run] = await store.claim_jobs(EP, "w-1", 1, now=CLAIMED_AT, lease_until=LEASE)
    assert run.id == "run" and run.attempt == 2
    [again] = await store.line_up_jobs(EP, "w-1", 1, now=CLAIMED_AT, lease_until=LEASE)
    assert_lined_up(again, attempt=1)
    assert again.retries == 1
    await store.finish_job("run", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 5)
    assert_started(await get(store, "again"), at=T0 + 5, attempt=2)


async def test_claims_and_line_ups_of_another_worker_skip_lined_up_jobs(store: Store) -> None:
    await running_with_lineup(store)
    await store.insert_job(job_of("c"))
    assert [j.id for j in await store.claim_jobs(EP, "w-2", 5, T0 + 2, T0 + 62)] == ["c"]
    await store.insert_job(job_of("d"))
    assert [j.id for j in await store.line_up_jobs(EP, "w-2", 5, T0 + 2, T0 + 62)] == ["d"]
    assert await store.claim_jobs(EP, "w-3", 5, T0 + 3, T0 + 63) == []
    assert await store.line_up_jobs(EP, "w-3", 5, T0 + 3, T0 + 63) == []
    for job_id in ("a", "b"):
        assert_lined_up(await get(store, job_id))


async def test_a_stopping_standby_or_recycled_worker_gets_no_line_up(store: Store) -> None:
    await insert_jobs(store, job_of("a"), job_of("b"))
    await store.save_worker(replace(make_worker("w-stop"), state=WorkerState.STOPPING))
    await store.save_worker(replace(make_worker("w-ready"), state=WorkerState.STANDBY))
    await store.save_worker(replace(make_worker("w-old"), recycle=True))
    for worker_id in ("w-stop", "w-ready", "w-old"):
        assert await store.line_up_jobs(EP, worker_id, 5, T0, T0 + 60) == []
        assert await store.jobs_of_worker(worker_id) == []
    for job_id in ("a", "b"):
        assert_back_in_queue(await get(store, job_id))
    # The jobs were there to take: a worker that takes work gets them.
    got = await store.line_up_jobs(EP, "w-unrecorded", 5, T0, T0 + 60)
    assert [j.id for j in got] == ["a", "b"]


async def test_jobs_of_worker_lists_its_lined_up_jobs(store: Store) -> None:
    await running_with_lineup(store)
    assert await store.jobs_of_worker("w-1") == ["a", "b", "run"]
    assert await store.jobs_of_worker("w-2") == []
    for job_id, now in (("run", T0 + 5), ("a", T0 + 6), ("b", T0 + 7)):
        await store.finish_job(job_id, "w-1", JobStatus.COMPLETED, '"ok"', None, now)
    assert await store.jobs_of_worker("w-1") == []


# -- a finish starts the next job ------------------------------------------------------------


async def test_finishing_the_running_job_starts_the_next_lined_up_job_and_only_that_one(
    store: Store,
) -> None:
    await running_with_lineup(store)
    done = await store.finish_job("run", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 5)
    assert done is not None and done.status is JobStatus.COMPLETED
    a = await get(store, "a")
    assert_started(a, at=T0 + 5)
    assert a.lease_until == LEASE
    assert_lined_up(await get(store, "b"))
    # It started its next job: it is still running, not idle.
    worker = await store.get_worker("w-1")
    assert worker is not None and worker.state is WorkerState.RUNNING
    assert await store.jobs_of_worker("w-1") == ["a", "b"]

    await store.finish_job("a", "w-1", JobStatus.FAILED, None, "boom", T0 + 9)
    assert_started(await get(store, "b"), at=T0 + 9)
    await store.finish_job("b", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 10)
    worker = await store.get_worker("w-1")
    assert worker is not None
    assert worker.state is WorkerState.IDLE and worker.idle_since == T0 + 10
    await assert_counts_match(store, ["run", "a", "b"])


async def test_a_lined_up_jobs_execution_timeout_counts_from_its_start(store: Store) -> None:
    await running_with_lineup(store)
    # Past the deadline it would have had from the line-up, before the one from its start.
    await store.finish_job("run", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 5)
    assert await store.time_out_jobs(CLAIMED_AT + TIMEOUT_S + 1) == []
    [timed_out] = await store.time_out_jobs(T0 + 5 + TIMEOUT_S)
    assert timed_out.id == "a" and timed_out.status is JobStatus.TIMED_OUT
    # The job still lined up never times out, however long it waits.
    b = await get(store, "b")
    assert b.status is JobStatus.IN_QUEUE and b.run_deadline is None


async def test_a_result_for_a_lined_up_job_starts_the_jobs_before_it_and_finishes_it(
    store: Store,
) -> None:
    await running_with_lineup(store, ("a", "b", "c", "d"))
    done = await store.finish_job("b", "w-1", JobStatus.COMPLETED, '"b-out"', None, T0 + 5)
    assert done is not None
    assert done.status is JobStatus.COMPLETED and done.output_json == '"b-out"'
    assert done.started_at == T0 + 5 and done.finished_at == T0 + 5
    assert done.attempt == 1
    assert await get(store, "b") == done
    # The worker ran "a" unseen before it, and runs "c" after it.
    assert_started(await get(store, "a"), at=T0 + 5)
    assert_started(await get(store, "c"), at=T0 + 5)
    assert_lined_up(await get(store, "d"))
    assert (await get(store, "run")).status is JobStatus.IN_PROGRESS
    assert await store.jobs_of_worker("w-1") == ["a", "c", "d", "run"]
    await store.finish_job("c", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 6)
    assert_started(await get(store, "d"), at=T0 + 6)
    await assert_counts_match(store, ["run", "a", "b", "c", "d"])


async def test_a_result_for_a_lined_up_job_passes_over_a_cancelled_one_before_it(
    store: Store,
) -> None:
    await running_with_lineup(store, ("a", "b", "c"))
    await store.cancel_job(EP, "a", T0 + 2)
    done = await store.finish_job("b", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 5)
    assert done is not None and done.status is JobStatus.COMPLETED
    assert (await get(store, "a")).status is JobStatus.CANCELLED
    assert_started(await get(store, "c"), at=T0 + 5)
    assert await store.take_stop_signals("w-1", T0 + 6) == ["a"]


async def test_a_result_for_a_job_lined_up_on_another_worker_or_with_no_worker_is_refused(
    store: Store,
) -> None:
    await running_with_lineup(store)
    assert await store.finish_job("a", "w-2", JobStatus.COMPLETED, '"x"', None, T0 + 5) is None
    assert await store.finish_job("a", None, JobStatus.COMPLETED, '"x"', None, T0 + 5) is None
    for job_id in ("a", "b"):
        assert_lined_up(await get(store, job_id))
    assert (await get(store, "run")).status is JobStatus.IN_PROGRESS


@pytest.mark.parametrize("gone", ["cancelled", "expired"])
async def test_a_result_for_a_lined_up_job_no_longer_wanted_starts_the_next_one_only(
    store: Store, gone: str
) -> None:
    await store.save_worker(make_worker("w-1"))
    await insert_jobs(store, job_of("run"), job_of("a"), job_of("b", ttl_ms=3_000))
    await insert_jobs(store, job_of("c"), job_of("d"))
    await store.claim_jobs(EP, "w-1", 1, now=CLAIMED_AT, lease_until=LEASE)
    assert len(await store.line_up_jobs(EP, "w-1", 4, CLAIMED_AT, LEASE)) == 4
    if gone == "cancelled":
        await store.cancel_job(EP, "b", T0 + 2)
    else:
        assert [j.id for j in await store.expire_jobs(T0 + 4, 10)] == ["b"]
    # The worker ran "b" (it had it queued) and sent its result: the result is refused, and
    # "a" ran unseen before it.
    assert await store.finish_job("b", "w-1", JobStatus.COMPLETED, '"x"', None, T0 + 5) is None
    b = await store.get_job(EP, "b")
    if gone == "expired":
        assert b is None
    else:
        assert b is not None and b.status is JobStatus.CANCELLED
    assert_started(await get(store, "a"), at=T0 + 5)
    # The worker moved past "b" to "c", which starts now; it is not told to stop "b", which it
    # ran already. It runs its jobs one at a time: "d" waits behind "c", on its line-up.
    assert_started(await get(store, "c"), at=T0 + 5)
    assert_lined_up(await get(store, "d"))
    assert "d" in await store.jobs_of_worker("w-1")
    assert await store.take_stop_signals("w-1", T0 + 6) == []


# -- a job no longer wanted at its turn --------------------------------------------------------
# The worker has it queued and starts it on its own: the result before it says the line is broken
# (the service ends the worker before answering), and nothing more starts. A worker that could
# not be ended gets a stop signal for it, and moves on past it when it takes that signal.


async def test_a_cancelled_lined_up_job_at_its_turn_breaks_the_line_and_starts_nothing(
    store: Store,
) -> None:
    await running_with_lineup(store)
    cancelled = await store.cancel_job(EP, "a", T0 + 3)
    assert cancelled is not None
    assert cancelled.status is JobStatus.CANCELLED and cancelled.finished_at == T0 + 3
    assert cancelled.stop_pending is False
    assert await store.lineup_broken("w-1") is False  # "run" runs: not its turn yet
    done = await store.finish_job("run", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 5)
    assert done is not None and done.line_broken
    assert await store.lineup_broken("w-1") is True
    a = await get(store, "a")
    assert a.status is JobStatus.CANCELLED and a.started_at is None and a.attempt == 0
    b = await get(store, "b")
    assert b.status is JobStatus.IN_QUEUE and b.worker_id == "w-1" and b.started_at is None
    await assert_counts_match(store, ["run", "a", "b"])


async def test_a_worker_that_takes_the_stop_signal_of_a_broken_lines_job_moves_past_it(
    store: Store,
) -> None:
    await running_with_lineup(store)
    await store.cancel_job(EP, "a", T0 + 3)
    await store.finish_job("run", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 5)
    assert await store.take_stop_signals("w-1", T0 + 6) == ["a"]
    assert await store.lineup_broken("w-1") is False
    assert_started(await get(store, "b"), at=T0 + 6)
    assert await store.take_stop_signals("w-1", T0 + 7) == []
    await assert_counts_match(store, ["run", "a", "b"])


async def test_a_finished_job_with_a_wanted_job_next_breaks_no_line(store: Store) -> None:
    await running_with_lineup(store)
    done = await store.finish_job("run", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 5)
    assert done is not None and not done.line_broken
    assert await store.lineup_broken("w-1") is False


async def test_purged_lined_up_jobs_break_the_line_and_are_signalled_one_by_one(
    store: Store,
) -> None:
    await running_with_lineup(store)
    await store.insert_job(job_of("c"))
    assert await store.purge_queue(EP) == 3
    assert await store.get_job(EP, "a") is None
    done = await store.finish_job("run", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 5)
    assert done is not None and done.line_broken
    assert await store.take_stop_signals("w-1", T0 + 6) == ["a"]
    assert await store.lineup_broken("w-1") is True
    assert await store.take_stop_signals("w-1", T0 + 6) == ["b"]
    assert await store.lineup_broken("w-1") is False
    worker = await store.get_worker("w-1")
    assert worker is not None and worker.state is WorkerState.IDLE
    await assert_counts_match(store, ["run"])


async def test_an_expired_lined_up_job_at_its_turn_breaks_the_line(store: Store) -> None:
    await store.save_worker(make_worker("w-1"))
    await insert_jobs(store, job_of("run"), job_of("a", ttl_ms=3_000), job_of("b"))
    await store.claim_jobs(EP, "w-1", 1, now=CLAIMED_AT, lease_until=LEASE)
    assert len(await store.line_up_jobs(EP, "w-1", 2, CLAIMED_AT, LEASE)) == 2
    assert [j.id for j in await store.expire_jobs(T0 + 4, 10)] == ["a"]
    done = await store.finish_job("run", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 5)
    assert done is not None and done.line_broken
    assert (await get(store, "b")).status is JobStatus.IN_QUEUE
    assert await store.take_stop_signals("w-1", T0 + 6) == ["a"]
    assert_started(await get(store, "b"), at=T0 + 6)


# -- a stop signal starts the next job -------------------------------------------------------


async def test_a_worker_told_to_stop_its_running_job_starts_its_next_lined_up_job(
    store: Store,
) -> None:
    await running_with_lineup(store)
    assert await store.take_stop_signals("w-1", T0 + 2) == []
    assert_lined_up(await get(store, "a"))
    await store.cancel_job(EP, "run", T0 + 3)
    # Cancelled, but the worker has not been told yet: it still runs "run".
    assert_lined_up(await get(store, "a"))
    assert await store.take_stop_signals("w-1", T0 + 4) == ["run"]
    assert_started(await get(store, "a"), at=T0 + 4)
    assert_lined_up(await get(store, "b"))
    worker = await store.get_worker("w-1")
    assert worker is not None and worker.state is WorkerState.RUNNING


async def test_a_worker_told_its_running_job_timed_out_starts_its_next_lined_up_job(
    store: Store,
) -> None:
    await running_with_lineup(store)
    [timed_out] = await store.time_out_jobs(CLAIMED_AT + TIMEOUT_S)
    assert timed_out.id == "run"
    assert await store.take_stop_signals("w-1", T0 + 9) == ["run"]
    assert_started(await get(store, "a"), at=T0 + 9)
    assert_lined_up(await get(store, "b"))


async def test_a_stop_signal_starts_no_lined_up_job_while_the_worker_runs_another(
    store: Store,
) -> None:
    await store.save_worker(make_worker("w-1"))
    await insert_jobs(store, job_of("run"), job_of("other"), job_of("a"))
    assert len(await store.claim_jobs(EP, "w-1", 2, now=CLAIMED_AT, lease_until=LEASE)) == 2
    assert len(await store.line_up_jobs(EP, "w-1", 1, CLAIMED_AT, LEASE)) == 1
    await store.cancel_job(EP, "run", T0 + 3)
    assert await store.take_stop_signals("w-1", T0 + 4) == ["run"]
    assert_lined_up(await get(store, "a"))
    await store.finish_job("other", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 5)
    assert_started(await get(store, "a"), at=T0 + 5)


# -- leases, lost workers --------------------------------------------------------------------


async def test_renewing_a_held_job_renews_the_leases_of_its_line_up(store: Store) -> None:
    await running_with_lineup(store)
    await store.renew_leases("w-1", ["run"], T0 + 500)
    for job_id in ("run", "a", "b"):
        assert (await get(store, job_id)).lease_until == T0 + 500
    # The SDK lists a lined-up job once it queued it: that proves the worker holds the line-up.
    await store.renew_leases("w-1", ["a"], T0 + 900)
    assert (await get(store, "a")).lease_until == T0 + 900
    assert (await get(store, "b")).lease_until == T0 + 900
    assert (await get(store, "run")).lease_until == T0 + 500


async def test_renewals_by_another_worker_or_of_unheld_jobs_leave_a_line_up_alone(
    store: Store,
) -> None:
    await running_with_lineup(store)
    await store.renew_leases("w-2", ["run", "a", "b"], T0 + 500)
    await store.renew_leases("w-1", ["unknown"], T0 + 500)
    await store.renew_leases("w-1", [], T0 + 500)
    for job_id in ("run", "a", "b"):
        assert (await get(store, job_id)).lease_until == LEASE


async def test_releasing_a_lost_worker_puts_its_line_up_back_untouched(store: Store) -> None:
    await running_with_lineup(store)
    released = await store.release_jobs("w-1", T0 + 10, max_attempts=3, reason="lost")
    by_id = {j.id: j for j in released}
    assert sorted(by_id) == ["a", "b", "run"]
    for job_id in ("a", "b"):
        assert_back_in_queue(by_id[job_id])
        assert await get(store, job_id) == by_id[job_id]
    # The job it ran counts its attempt and a retry, as before line-ups.
    assert_back_in_queue(by_id["run"], attempt=1, retries=1)
    assert await store.jobs_of_worker("w-1") == []
    await assert_counts_match(store, ["run", "a", "b"])
    got = await store.claim_jobs(EP, "w-2", 5, now=T0 + 11, lease_until=T0 + 71)
    assert [(j.id, j.attempt) for j in got] == [("run", 2), ("a", 1), ("b", 1)]


async def test_lapsed_leases_put_lined_up_jobs_back_untouched(store: Store) -> None:
    await running_with_lineup(store)
    assert await store.release_jobs(None, LEASE, max_attempts=3, reason="lapsed") == []
    released = await store.release_jobs(None, LEASE + 1, max_attempts=3, reason="lapsed")
    by_id = {j.id: j for j in released}
    assert sorted(by_id) == ["a", "b", "run"]
    for job_id in ("a", "b"):
        assert_back_in_queue(by_id[job_id])
        assert await get(store, job_id) == by_id[job_id]
    assert_back_in_queue(by_id["run"], attempt=1, retries=1)
    await assert_counts_match(store, ["run", "a", "b"])
    got = await store.line_up_jobs(EP, "w-2", 5, now=LEASE + 2, lease_until=LEASE + 62)
    assert [j.id for j in got] == ["run", "a", "b"]


@pytest.mark.parametrize("lost", ["worker", "lease"])
async def test_a_lined_up_job_that_used_up_its_attempts_goes_back_not_failed(
    store: Store, lost: str
) -> None:
    await insert_jobs(store, job_of("run"), job_of("again"))
    assert len(await store.claim_jobs(EP, "w-old", 2, now=T0, lease_until=T0 + 60)) == 2
    await store.release_jobs("w-old", T0 + 0.5, max_attempts=3, reason="lost")
    await store.claim_jobs(EP, "w-1", 1, now=CLAIMED_AT, lease_until=LEASE)
    [again] = await store.line_up_jobs(EP, "w-1", 1, now=CLAIMED_AT, lease_until=LEASE)
    assert again.attempt == 1
    # One attempt allowed: the job it ran fails, the one lined up (one attempt in) does not.
    worker_id = "w-1" if lost == "worker" else None
    released = await store.release_jobs(worker_id, LEASE + 1, max_attempts=1, reason="gone")
    by_id = {j.id: j for j in released}
    assert by_id["run"].status is JobStatus.FAILED and by_id["run"].error == "gone"
    assert_back_in_queue(by_id["again"], attempt=1, retries=1)
    assert await get(store, "again") == by_id["again"]
    [claimed] = await store.claim_jobs(EP, "w-2", 5, now=LEASE + 2, lease_until=LEASE + 62)
    assert claimed.id == "again" and claimed.attempt == 2


async def test_a_released_line_up_no_longer_starts_on_the_worker_that_had_it(
    store: Store,
) -> None:
    await running_with_lineup(store)
    await store.release_jobs(None, LEASE + 1, max_attempts=3, reason="lapsed")
    await store.claim_jobs(EP, "w-1", 1, now=LEASE + 2, lease_until=LEASE + 62)
    await store.claim_jobs(EP, "w-2", 1, now=LEASE + 2, lease_until=LEASE + 62)
    # w-1 got "run" back; its finish must not start "a" (w-2 runs that) nor touch "b".
    await store.finish_job("run", "w-1", JobStatus.COMPLETED, '"ok"', None, LEASE + 3)
    assert_started(await get(store, "a"), at=LEASE + 2, worker_id="w-2")
    assert_back_in_queue(await get(store, "b"))
    assert await store.take_stop_signals("w-1", LEASE + 4) == []


async def test_deleting_a_worker_drops_its_line_up(store: Store) -> None:
    await running_with_lineup(store)
    await store.delete_worker("w-1")
    done = await store.finish_job("run", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 5)
    assert done is not None and done.status is JobStatus.COMPLETED
    for job_id in ("a", "b"):
        assert_lined_up(await get(store, job_id))
    assert await store.take_stop_signals("w-1", T0 + 6) == []
    # Nor does a result for one of them start it any more.
    assert await store.finish_job("b", "w-1", JobStatus.COMPLETED, '"x"', None, T0 + 7) is None
    assert_lined_up(await get(store, "a"))
    # Their leases lapse, and they go back to the queue as they were.
    released = await store.release_jobs(None, LEASE + 1, max_attempts=3, reason="lapsed")
    assert sorted(j.id for j in released) == ["a", "b"]
    got = await store.claim_jobs(EP, "w-2", 5, now=LEASE + 2, lease_until=LEASE + 62)
    assert [(j.id, j.attempt) for j in got] == [("a", 1), ("b", 1)]


# -- job counts ------------------------------------------------------------------------------


async def test_job_counts_count_lined_up_jobs_as_queued(store: Store) -> None:
    await store.save_worker(make_worker("w-1"))
    await insert_jobs(
        store,
        job_of("run", submitted_at=T0),
        job_of("a", submitted_at=T0 + 0.1),
        job_of("b", submitted_at=T0 + 0.2),
        job_of("low", submitted_at=T0 + 0.3, low_priority=True),
        job_of("c", submitted_at=T0 + 0.4),
    )
    ids = ["run", "a", "b", "low", "c"]
    await store.claim_jobs(EP, "w-1", 1, now=CLAIMED_AT, lease_until=LEASE)
    assert len(await store.line_up_jobs(EP, "w-1", 2, CLAIMED_AT, LEASE)) == 2
    lined_up = JobCounts(in_queue=4, in_progress=1, in_queue_normal=3, oldest_queued_at=T0 + 0.1)
    assert await store.job_counts(EP) == lined_up
    await assert_counts_match(store, ids)

    await store.finish_job("run", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 5)
    assert await store.job_counts(EP) == JobCounts(
        in_queue=3, in_progress=1, completed=1, in_queue_normal=2, oldest_queued_at=T0 + 0.2
    )
    await store.cancel_job(EP, "b", T0 + 6)
    await store.finish_job("a", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 7)
    # "b" passed over: counted once, as cancelled.
    assert await store.job_counts(EP) == JobCounts(
        in_queue=2, completed=2, cancelled=1, in_queue_normal=1, oldest_queued_at=T0 + 0.4
    )
    await assert_counts_match(store, ids)


async def test_a_lined_up_job_is_held_for_its_result_but_not_for_its_stream(
    store: Store,
) -> None:
    """A large result is read only from a worker that holds its job: running it, or with it
    lined up (a result for a lined-up job is taken); a stream chunk only from the one running
    it."""
    await running_with_lineup(store)
    assert await store.job_held_by("run", "w-1")
    assert not await store.job_held_by("a", "w-1")
    assert await store.job_held_by("a", "w-1", lined_up=True)
    assert not await store.job_held_by("a", "w-2", lined_up=True)
    assert not await store.job_held_by("run", "w-2", lined_up=True)
