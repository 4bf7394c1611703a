"""SQLite runs the operations written once (``operations.SqlStore``) the way its own code ran:
a write whole in the one writer thread, inside the group commit; a read on the event loop's
thread, within its ``await``, never giving the loop a turn."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from skiff.store.operations import Connection
from skiff.store.sqlite import SQLiteStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "skiff.db")
    await s.open()
    yield s
    await s.close()


async def test_a_write_operation_runs_whole_in_the_writer_thread(store: SQLiteStore) -> None:
    threads: list[str] = []

    async def op(c: Connection) -> bytes | None:
        threads.append(threading.current_thread().name)
        await c.execute("add_secret", name="k", value=b"v")
        threads.append(threading.current_thread().name)
        row = await c.fetchrow("get_secret", name="k")
        return None if row is None else bytes(row["value"])

    assert await store._write(op) == b"v"
    assert threads == ["skiff-sqlite-writer", "skiff-sqlite-writer"]


async def test_a_read_completes_without_suspending(store: SQLiteStore) -> None:
    await store.secret("k")
    read = store._reader().fetchrow("get_secret", name="k")
    # Driven by hand, outside any event loop turn: it finishes on the first step.
    with pytest.raises(StopIteration) as done:
        read.send(None)
    assert done.value.value is not None


async def test_an_operation_awaiting_anything_but_its_connection_is_refused_and_undone(
    store: SQLiteStore,
) -> None:
    async def op(c: Connection) -> None:
        await c.execute("add_secret", name="k", value=b"v")
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="awaited something besides its connection"):
        await store._write(op)
    assert await store._reader().fetchrow("get_secret", name="k") is None
