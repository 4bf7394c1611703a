"""Fixtures shared by the providers' integration tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from skiff.providers.cgroups import Cgroups


@pytest.fixture
def cgroups() -> Iterator[Cgroups]:
    """A server's cgroups under a name of their own, swept and closed after; the test is
    skipped where this host lets the server make none (not root, no delegated subtree)."""
    opened = Cgroups.open(f"test-{uuid.uuid4().hex[:12]}")
    if isinstance(opened, str):
        pytest.skip(opened)
    yield opened
    opened.sweep()
    opened.close()
