"""Fixtures shared by the service tests: a real SQLite store in a temporary folder and a
clock that moves only when a test says so."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from skiff.clock import ManualClock
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
