"""JobEvents: a job that became final wakes its waiters, its worker's stop poll when asked, and
every subscriber once, in the order they subscribed."""

from __future__ import annotations

from typing import Any, cast

import pytest

from service_stubs import a_job
from skiff.clock import ManualClock
from skiff.domain.jobs import Job, JobStatus
from skiff.services.job_events import JobEvents
from skiff.services.wakeups import Wake, Wakeups
from skiff.services.webhooks import WebhookSender
from skiff.store.base import Store


def final_job(worker_id: str | None = "w1", webhook: str | None = None) -> Job:
    return a_job(
        status=JobStatus.CANCELLED,
        execution_timeout_ms=60_000,
        webhook=webhook,
        worker_id=worker_id,
    )


async def test_a_final_job_wakes_its_waiters_then_each_subscriber_in_order() -> None:
    wakeups = Wakeups()
    events = JobEvents(wakeups)
    told: list[tuple[str, str]] = []
    events.on_final(lambda job: told.append(("metrics", job.id)))
    events.on_final(lambda job: told.append(("webhooks", job.id)))
    job = final_job()
    with wakeups.listen(Wake.job(job.id)) as waiter, wakeups.listen(Wake.stop("w1")) as stop:
        events.finished(job)
        assert waiter.is_set()
        # Finished by its worker (its result): nothing to stop.
        assert not stop.is_set()
    assert told == [("metrics", "j1"), ("webhooks", "j1")]


async def test_a_job_taken_from_its_running_worker_wakes_that_workers_stop_poll() -> None:
    wakeups = Wakeups()
    events = JobEvents(wakeups)
    with wakeups.listen(Wake.stop("w1")) as stop:
        events.finished(final_job(), stop_worker=True)
        assert stop.is_set()


async def test_a_job_without_a_worker_has_no_stop_poll_to_wake() -> None:
    published: list[str] = []
    events = JobEvents(Wakeups(publish=published.append))
    events.finished(final_job(worker_id=None), stop_worker=True)
    assert published == ["job:j1"]


@pytest.mark.parametrize(("webhook", "woken"), [(None, 0), ("https://example.com/hook", 1)])
def test_the_webhook_sender_wakes_for_a_final_job_with_a_webhook(
    webhook: str | None, woken: int
) -> None:
    sender = WebhookSender(cast(Store, None), ManualClock())
    calls: list[None] = []
    cast(Any, sender).wake = lambda: calls.append(None)
    sender.job_finished(final_job(webhook=webhook))
    assert len(calls) == woken


def test_a_job_made_final_here_is_kept_for_its_waiters_only_while_they_wait() -> None:
    events = JobEvents(Wakeups())
    job = final_job()
    events.finished(job)  # nobody waits: nothing is kept
    with events.awaiting("j1") as first, events.awaiting("j1") as second:
        assert first() is None and second() is None
        events.finished(job)
        assert first() is job and second() is job
    with events.awaiting("j1") as again:
        assert again() is None  # kept no longer than its waiters
