"""The boundary between deciding that a worker should run and making it run somewhere."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

#: Called with (worker id, exit code) when a worker's process ends, whoever ended it.
ExitCallback = Callable[[str, int], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Launch:
    worker_id: str
    endpoint_id: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    home: Path


class WorkerProvider(Protocol):
    async def start(self, launch: Launch) -> int:
        """Start the worker; returns its process id."""
        ...

    async def stop(self, worker_id: str, grace: float) -> None:
        """Ask it to stop (SIGTERM), then end it (SIGKILL) after ``grace`` seconds."""
        ...

    async def stop_all(self, grace: float) -> None: ...

    def running(self) -> list[str]: ...

    def kill_leftover(self, worker_id: str, pid: int) -> bool:
        """End a worker left running by an earlier server process, if it is still there."""
        ...
