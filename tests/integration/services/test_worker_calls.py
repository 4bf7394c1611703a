"""A worker's call-in (``Workers.seen``) through an endpoint that is not its own: refused, and
the worker left as it was, whichever replica answers (one that holds no copy of its record
asks the store). The real service on a real SQLite store."""

from __future__ import annotations

import pytest

from skiff.clock import ManualClock
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.errors import Conflict
from skiff.services.workers import Workers
from skiff.store.sqlite import SQLiteStore


async def test_a_call_naming_another_endpoints_worker_is_refused_and_changes_nothing(
    store: SQLiteStore, clock: ManualClock
) -> None:
    starting = Worker(
        id="w-bob",
        endpoint_id="ep-bob",
        kind=WorkerKind.LOCAL,
        state=WorkerState.INITIALIZING,
        version=1,
        started_at=clock.now(),
    )
    await store.save_worker(starting)
    # A replica that has never seen the worker: no copy of its record to check against.
    other_replica = Workers(store, clock)

    with pytest.raises(Conflict, match="in use by another endpoint"):
        await other_replica.seen("ep-alice", "w-bob", version=1)

    worker = await store.get_worker("w-bob")
    assert worker is not None
    assert worker.state is WorkerState.INITIALIZING and worker.last_seen is None
