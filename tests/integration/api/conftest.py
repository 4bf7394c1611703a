"""The in-process app (``tests/in_process.py``) for the interface tests of this folder."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from in_process import InProcess, running


@pytest.fixture
async def in_process(tmp_path: Path) -> AsyncIterator[InProcess]:
    async with running(tmp_path / "data") as app:
        yield app
