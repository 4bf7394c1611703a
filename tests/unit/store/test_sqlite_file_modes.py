"""The SQLite database holds registry passwords, ``s3Config`` secrets and the server's own
secrets: it and the files SQLite keeps beside it are the user's alone."""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import pytest

from skiff.store.sqlite import SQLiteStore


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


async def test_a_new_database_and_its_wal_and_shm_files_are_0600(tmp_path: Path) -> None:
    database = tmp_path / "new" / "skiff.db"
    store = SQLiteStore(database)
    await store.open()
    try:
        await store.secret("worker-token")  # a write, so the WAL is in use
        assert mode(database.parent) == 0o700
        for name in ("skiff.db", "skiff.db-wal", "skiff.db-shm"):
            assert mode(database.parent / name) == 0o600, name
    finally:
        await store.close()


async def test_an_existing_database_open_to_others_is_tightened_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    database = tmp_path / "skiff.db"
    sqlite3.connect(database).close()
    os.chmod(database, 0o644)
    os.chmod(tmp_path, 0o755)
    store = SQLiteStore(database)
    with caplog.at_level(logging.WARNING):
        await store.open()
    try:
        assert mode(database) == 0o600
        assert "mode 0644" in caplog.text
        # The folder of a database kept outside the data directory is not the store's to change.
        assert mode(tmp_path) == 0o755
    finally:
        await store.close()
