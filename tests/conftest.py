"""Markers by folder: a test's kind is where it lives, so nobody marks a test by hand and
``scripts/test tests/unit`` (or ``-m unit``) runs only the fast, in-process layer.

- ``unit``: pure and in-process (no server, no subprocess, no database server); seconds.
- ``integration``: real databases, real processes and sockets, one component at a time.
- ``e2e``: a real ``skiff serve`` driven through HTTP, with the real runpod SDK as worker and
  client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
KINDS = ("unit", "integration", "e2e")
#: Files whose tests share something of the machine that two of them cannot hold at once, so
#: that ``pytest -n`` (scripts/test) runs them in one worker, one after the other: each of these
#: starts a Ray cluster (``bench/ray_nodes.py``; the benchmarks' B7).
ONE_AT_A_TIME = {
    "tests/e2e/test_ray_provider.py": "ray",
    "tests/e2e/test_bench_smoke.py": "ray",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        try:
            kind = item.path.resolve().relative_to(HERE).parts[0]
        except ValueError:
            continue
        if kind in KINDS:
            item.add_marker(getattr(pytest.mark, kind))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist hands out whole files (a module's fixtures, such as its server, are made once,
    and its tests keep their order), and the files of ``ONE_AT_A_TIME`` as one."""
    from xdist.scheduler import LoadFileScheduling

    class ByFile(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return ONE_AT_A_TIME.get(path, path)

    return ByFile(config, log)
