"""A worker's log and home are the user's alone: what a handler prints can hold secrets (real
subprocesses and files)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from skiff.domain.logs import rotated
from skiff.providers.base import Launch
from skiff.providers.local import LocalProvider
from skiff.services.logs import WorkerLogs


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


async def test_logs_are_0600_and_their_folders_and_the_home_0700(tmp_path: Path) -> None:
    ended = asyncio.Event()

    async def on_exit(_worker_id: str, _code: int) -> None:
        ended.set()

    spec = Launch(
        worker_id="w1",
        endpoint_id="ep1",
        argv=[sys.executable, "-c", "for i in range(500): print(f'secret line {i:05d}')"],
        env=dict(os.environ),
        home=tmp_path / "data" / "workers" / "w1" / "home",
    )
    logs = WorkerLogs(tmp_path / "data", max_bytes=4096, backups=2)
    provider = LocalProvider(on_exit, logs=logs.sink)
    await provider.start(spec)
    await asyncio.wait_for(ended.wait(), 30)

    for folder in ("data", "data/logs", "data/logs/ep1", "data/workers", "data/workers/w1"):
        assert mode(tmp_path / folder) == 0o700, folder
    assert mode(spec.home) == 0o700
    log_path = logs.log_path("ep1", "w1")
    for path in (log_path, rotated(log_path, 1), rotated(log_path, 2)):
        assert mode(path) == 0o600, path
