"""Markers by folder: a test's kind is where it lives, so nobody marks a test by hand and
``scripts/test tests/unit`` (or ``-m unit``) runs only the fast, in-process layer.

- ``unit``: pure and in-process (no server, no subprocess, no database server); seconds.
- ``integration``: real databases, real processes and sockets, one component at a time.
- ``e2e``: a real ``skiff serve`` driven through HTTP, with the real runpod SDK as worker and
  client.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
KINDS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        try:
            kind = item.path.resolve().relative_to(HERE).parts[0]
        except ValueError:
            continue
        if kind in KINDS:
            item.add_marker(getattr(pytest.mark, kind))
