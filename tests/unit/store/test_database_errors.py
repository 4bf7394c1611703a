"""Telling an unreachable database, or a full disk, from a bug, and keeping passwords out of
messages."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest

from skiff.store import disk_full, safe_url, unavailable


def test_lost_connections_count_as_the_database_being_unreachable() -> None:
    assert unavailable(ConnectionRefusedError())
    assert unavailable(TimeoutError())
    assert unavailable(asyncpg.ConnectionDoesNotExistError("gone"))
    assert unavailable(asyncpg.CannotConnectNowError("starting up"))
    assert unavailable(asyncpg.InterfaceError("pool is closing"))


def test_errors_of_the_statement_itself_are_bugs_not_outages() -> None:
    assert not unavailable(ValueError("bad"))
    assert not unavailable(asyncpg.UniqueViolationError("duplicate"))
    assert not unavailable(KeyError("x"))


def test_sqlite_out_of_room_counts_as_a_full_disk(tmp_path: Path) -> None:
    # A database held to a few pages answers as one on a full disk does: SQLITE_FULL.
    conn = sqlite3.connect(tmp_path / "small.db")
    conn.execute("CREATE TABLE t (x TEXT)")
    conn.execute("PRAGMA max_page_count = 4")
    with pytest.raises(sqlite3.OperationalError) as refused:
        conn.execute("INSERT INTO t VALUES (?)", ("x" * 100_000,))
    conn.close()
    assert disk_full(refused.value)
    assert not unavailable(refused.value)


def test_no_space_left_is_a_full_disk_for_either_backend() -> None:
    assert disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert disk_full(asyncpg.exceptions.DiskFullError("could not extend file"))


def test_other_errors_are_not_a_full_disk() -> None:
    assert not disk_full(sqlite3.OperationalError("database is locked"))
    assert not disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not disk_full(ConnectionRefusedError())
    assert not disk_full(asyncpg.UniqueViolationError("duplicate"))
    assert not disk_full(ValueError("bad"))


def test_a_password_in_a_database_url_is_masked() -> None:
    assert (
        safe_url("postgresql://skiff:s3cret@db:5432/skiff")
        == "postgresql://skiff:***@db:5432/skiff"
    )
    assert safe_url("postgresql://skiff@db/skiff") == "postgresql://skiff@db/skiff"
    assert safe_url("sqlite:///data/skiff.db") == "sqlite:///data/skiff.db"
