"""Turns taken per key (a user): at most so many holders at once for each key, the others
waiting in order; a key nobody holds or waits for is forgotten, so keys do not pile up."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class KeyedTurns:
    def __init__(self, each: int) -> None:
        self._each = each
        #: key -> (its turns, how many hold or wait for one).
        self._keys: dict[str, tuple[asyncio.Semaphore, int]] = {}

    def __len__(self) -> int:
        """Keys that hold or wait for a turn now."""
        return len(self._keys)

    @contextlib.asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        turns, waiting = self._keys.get(key, (None, 0))
        if turns is None:
            turns = asyncio.Semaphore(self._each)
        self._keys[key] = (turns, waiting + 1)
        try:
            async with turns:
                yield
        finally:
            turns, waiting = self._keys[key]
            if waiting == 1:
                del self._keys[key]
            else:
                self._keys[key] = (turns, waiting - 1)
