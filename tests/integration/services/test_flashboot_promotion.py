"""Promoting a flashboot standby: the real ``Fleet`` on a real SQLite store."""

from __future__ import annotations

import pytest

from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.services.hub import Services


def standby(services: Services, last_seen: float | None) -> Worker:
    return Worker(
        id="w1",
        endpoint_id="ep1",
        kind=WorkerKind.LOCAL,
        state=WorkerState.STANDBY,
        version=1,
        started_at=services.clock.now(),
        last_seen=last_seen,
        owner=services.workers.replica_id,
    )


@pytest.mark.parametrize(
    ("heard_from", "state"),
    [(True, WorkerState.IDLE), (False, WorkerState.INITIALIZING)],
    ids=["called-in-is-idle", "never-heard-from-is-still-starting"],
)
async def test_a_promoted_standby_is_idle_only_once_it_has_called_in(
    local_services: Services, heard_from: bool, state: WorkerState
) -> None:
    """A standby that has not polled yet is still on its way up: promoted as ``idle``, the
    scaler would see an idle worker leave a job waiting and start another for it."""
    now = local_services.clock.now()
    worker = await local_services.workers.add(standby(local_services, now if heard_from else None))
    await local_services.fleet.promote(worker)
    stored = await local_services.store.get_worker("w1")
    assert stored is not None
    assert stored.state is state


async def test_a_promoted_standby_that_never_called_in_is_idle_at_its_first_poll(
    local_services: Services,
) -> None:
    worker = await local_services.workers.add(standby(local_services, None))
    await local_services.fleet.promote(worker)
    seen = await local_services.workers.seen("ep1", "w1", 1)
    assert seen.state is WorkerState.IDLE
    assert seen.last_seen == local_services.clock.now()
