"""What a provider test's exit callback heard: each worker's exit code, and an event set at
the first (providers' ``ExitCallback``)."""

from __future__ import annotations

import asyncio


class Exits:
    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.done = asyncio.Event()

    async def __call__(self, worker_id: str, code: int) -> None:
        self.codes[worker_id] = code
        self.done.set()
