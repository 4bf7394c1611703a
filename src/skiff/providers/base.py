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
    home: Path


class LogSink(Protocol):
    """Where a worker's output goes. A provider feeds it the bytes as they come (stdout and
    stderr as one stream, cut anywhere); the logs service (``services/logs.py``) owns the rest:
    lines, stamps, caps and rotation, and where the log lives, so every provider's workers log
    alike."""

    def feed(self, data: bytes) -> None:
        """Keep ``data``. A log that cannot be written is turned off rather than raise: the
        worker's output must keep flowing."""
        ...

    def close(self) -> None:
        """The output ended: keep its last, unfinished line too."""
        ...


#: Opens the log of (endpoint id, worker id) for a worker about to start.
LogSinks = Callable[[str, str], LogSink]


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
