"""Fixtures shared by the service tests: a real SQLite store in a temporary folder and a
clock that moves only when a test says so."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from skiff.app import build_services, open_cluster
from skiff.clock import ManualClock
from skiff.config import Settings
from skiff.services.hub import Services
from skiff.store.sqlite import SQLiteStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "skiff.db")
    await opened.open()
    yield opened
    await opened.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def local_services(
    tmp_path: Path, store: SQLiteStore, clock: ManualClock
) -> AsyncIterator[Services]:
    """Every service as the server builds them, its workers real processes on this host; the
    processes still running at the end are stopped."""
    settings = Settings(data_dir=tmp_path / "data", worker_stop_grace_seconds=1)
    built = build_services(settings, store, clock, open_cluster(settings))
    yield built
    await built.fleet.shutdown()
