"""SQLite's writer thread: a write that fails is undone alone, whether it had the transaction to
itself or shared it with the writes queued beside it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import Job, JobStatus
from skiff.store.sealing import OneTimeKey
from skiff.store.sqlite import SQLiteStore

EP = "ep-1"
T0 = 1_700_000_000.0


def make_job(job_id: str, input_json: str | None = None) -> Job:
    return Job(
        id=job_id,
        endpoint_id=EP,
        status=JobStatus.IN_QUEUE,
        input_json=input_json or f'{{"n":"{job_id}"}}',
        execution_timeout_ms=600_000,
        ttl_ms=86_400_000,
        low_priority=False,
        webhook=None,
        s3_config_json=None,
        submitted_at=T0,
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "skiff.db", OneTimeKey())
    await s.open()
    await s.create_endpoint(
        Endpoint(
            id=EP,
            userId="u-1",
            version=1,
            createdAt=T0,
            spec=EndpointSpec(name="e", templateId="t"),
        )
    )
    yield s
    await s.close()


async def test_a_write_that_fails_alone_is_undone_and_the_next_goes_through(
    store: SQLiteStore,
) -> None:
    await store.insert_job(make_job("j1"))

    with pytest.raises(Exception, match="UNIQUE"):
        await store.insert_job(make_job("j1", input_json='{"n":"again"}'))

    first = await store.get_job(EP, "j1")
    assert first is not None and first.input_json == '{"n":"j1"}'
    await store.insert_job(make_job("j2"))
    assert await store.get_job(EP, "j2") is not None


async def test_a_write_that_fails_beside_others_is_undone_alone(store: SQLiteStore) -> None:
    await store.insert_job(make_job("j1"))

    # Queued in one turn of the loop: one transaction, each write in a savepoint of its own.
    outcomes = await asyncio.gather(
        store.insert_job(make_job("j2")),
        store.insert_job(make_job("j1", input_json='{"n":"again"}')),
        store.insert_job(make_job("j3")),
        return_exceptions=True,
    )

    assert outcomes[0] is None and outcomes[2] is None
    assert "UNIQUE" in str(outcomes[1])
    for job_id in ("j2", "j3"):
        assert await store.get_job(EP, job_id) is not None
    first = await store.get_job(EP, "j1")
    assert first is not None and first.input_json == '{"n":"j1"}'
