"""A worker printing faster than its log's pace waits in its own writes, and loses nothing
(real subprocesses through the local provider)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from skiff.domain.logs import parse
from skiff.providers.base import Launch
from skiff.providers.local import LocalProvider
from skiff.services.logs import WorkerLogs

KIB = 1024

# 1 MiB as fast as it can, then how long its writes took.
FLOOD = (
    "import sys, time\n"
    "start = time.monotonic()\n"
    "line = 'z' * 1023 + '\\n'\n"
    "for _ in range(1024): sys.stdout.write(line)\n"
    "sys.stdout.flush()\n"
    "print(f'took {time.monotonic() - start:.3f}', flush=True)\n"
)


async def flood(tmp_path: Path, bytes_per_second: int) -> list[str]:
    logs = WorkerLogs(tmp_path, bytes_per_second=bytes_per_second, burst_bytes=256 * KIB)
    done = asyncio.Event()

    async def exited(worker_id: str, code: int) -> None:
        assert code == 0
        done.set()

    provider = LocalProvider(exited, logs=logs.sink, fork_servers=False)
    await provider.start(
        Launch(
            worker_id="w1",
            endpoint_id="ep1",
            argv=[sys.executable, "-c", FLOOD],
            env=dict(os.environ),
            home=tmp_path / "home",
        )
    )
    await asyncio.wait_for(done.wait(), 60)
    raw = logs.log_path("ep1", "w1").read_bytes()
    return [parse(line)[1] for line in raw.splitlines()]


def took(lines: list[str]) -> float:
    return float(lines[-1].removeprefix("took "))


async def test_a_worker_past_its_pace_is_held_up_and_every_line_is_kept(tmp_path: Path) -> None:
    lines = await flood(tmp_path, bytes_per_second=512 * KIB)
    assert lines[:-1] == ["z" * 1023] * 1024
    # 256 KiB at once and one 64 KiB read on credit, then 512 KiB a second: of the rest, what
    # the pipe and the reader's buffers do not hold (256 KiB at most) waits for the pace, so
    # the worker's writes take at least (1024 - 320 - 256) / 512 s.
    assert took(lines) >= 0.85
