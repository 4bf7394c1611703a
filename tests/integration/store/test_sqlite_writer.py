"""SQLite's writer thread: a write that fails is undone alone, whether it had the transaction to
itself or shared it with the writes queued beside it; one that finds the database full takes
its transaction with it, and every write of it is told the disk was full."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import Job, JobStatus
from skiff.store import disk_full
from skiff.store.sealing import OneTimeKey
from skiff.store.sqlite import SQLiteStore, _Writer

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


async def _sync(step: Callable[[Any], None], c: Any) -> None:
    """A write operation that runs ``step`` on the writer's connection."""
    step(c)


def hold_to_current_size(c: Any) -> None:
    """The writer's connection held to the pages its file has now: a larger write finds the
    database full, as on a full disk (SQLITE_FULL, and SQLite rolls the transaction back)."""
    pages = c.conn.execute("PRAGMA page_count").fetchone()[0]
    c.conn.execute(f"PRAGMA max_page_count = {pages + 2}")


def lift_hold(c: Any) -> None:
    c.conn.execute("PRAGMA max_page_count = 1073741823")


async def test_a_write_alone_that_finds_the_database_full_is_told_so_and_undone(
    store: SQLiteStore,
) -> None:
    await store._write(lambda c: _sync(hold_to_current_size, c))
    with pytest.raises(sqlite3.OperationalError) as refused:
        await store.insert_job(make_job("big", input_json='"' + "x" * 200_000 + '"'))
    assert disk_full(refused.value)
    assert await store.get_job(EP, "big") is None
    await store._write(lambda c: _sync(lift_hold, c))
    await store.insert_job(make_job("big", input_json='"' + "x" * 200_000 + '"'))
    assert await store.get_job(EP, "big") is not None


async def test_writes_beside_one_that_finds_the_database_full_are_kept_only_if_told_so(
    store: SQLiteStore,
) -> None:
    await store._write(lambda c: _sync(hold_to_current_size, c))
    # Queued in one turn of the loop: one transaction. SQLite undoes the full write alone, or
    # the whole transaction; either way each write is told what became of it.
    outcomes = await asyncio.gather(
        store.insert_job(make_job("j1")),
        store.insert_job(make_job("big", input_json='"' + "x" * 200_000 + '"')),
        store.insert_job(make_job("j2")),
        return_exceptions=True,
    )
    assert isinstance(outcomes[1], sqlite3.OperationalError) and disk_full(outcomes[1])
    assert await store.get_job(EP, "big") is None
    for job_id, outcome in (("j1", outcomes[0]), ("j2", outcomes[2])):
        kept = await store.get_job(EP, job_id) is not None
        assert kept == (outcome is None), (job_id, outcome)
        assert kept or disk_full(outcome)


async def test_a_batch_that_sqlite_rolls_back_whole_tells_each_write_the_disk_was_full(
    tmp_path: Path,
) -> None:
    conn = sqlite3.connect(tmp_path / "batch.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (x TEXT)")
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    loop = asyncio.get_running_loop()

    def insert(value: str) -> Callable[[sqlite3.Connection], None]:
        return lambda c: c.execute("INSERT INTO t VALUES (?)", (value,)) and None

    batch = [(insert(value), loop.create_future(), loop) for value in ("a", "x" * 200_000, "b")]
    _Writer._run_batch(conn, batch)
    outcomes = await asyncio.gather(*(f for _, f, _ in batch), return_exceptions=True)

    assert all(isinstance(o, sqlite3.OperationalError) and disk_full(o) for o in outcomes)
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 0
    conn.close()
